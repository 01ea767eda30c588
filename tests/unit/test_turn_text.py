"""Whether the words decoded at a pause read as finished."""

import pytest

from voicebot.stt.turn_text import unfinished


@pytest.mark.parametrize("text", [
    "My name is...", "I would like to book a table for.", "Could you move my reservation to",
    "Is it possible to?", "Do you have?", "A table for two,", "We will be", "table 42", "Um, I want",
])
def test_speech_that_goes_on(text):
    assert unfinished(text, "en")


@pytest.mark.parametrize("text", [
    "A table for two tomorrow at seven.", "Can I bring my dog?", "My name is Jordan Blake.", "Yes!",
    "What time do you close on Sundays?", "It's me.", "",
])
def test_finished_sentences(text):
    assert not unfinished(text, "en")


def test_other_languages_are_judged_by_punctuation_alone():
    assert not unfinished("Ich möchte einen Tisch für.", "de")  # no German word list
    assert unfinished("Ich möchte einen Tisch für", "de")
    assert not unfinished("明天七点两个人。", "zh")
