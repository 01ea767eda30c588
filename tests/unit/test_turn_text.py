"""Whether the words decoded at a pause read as finished."""

import pytest

from voicebot.stt.turn_text import unfinished


@pytest.mark.parametrize("text", [
    "My name is...", "I would like to book a table for.", "Could you move my reservation to",
    "Is it possible to?", "Do you have a?", "A table for two,", "We will be", "table 42", "Um, I want",
])
def test_speech_that_goes_on(text):
    assert unfinished(text, "en")


@pytest.mark.parametrize("text", [
    "A table for two tomorrow at seven.", "Can I bring my dog?", "My name is Jordan Blake.", "Yes!",
    "What time do you close on Sundays?", "It's me.", "",
])
def test_finished_sentences(text):
    assert not unfinished(text, "en")


def test_languages_without_data_are_judged_by_punctuation_alone():
    assert not unfinished("Jeg vil gerne have et bord til.", "da")  # no Danish word list
    assert unfinished("Jeg vil gerne have et bord til", "da")
    assert not unfinished("明天七点两个人。", "zh")


@pytest.mark.parametrize("text", ["Yes, I do.", "I think so.", "No.", "What would you like?", "Okay then.",
                                  "Could you put me down for the earliest slot you have?"])
def test_short_answers_and_questions_that_end_on_such_a_word_are_finished(text):
    assert not unfinished(text, "en")


@pytest.mark.parametrize(("language", "going_on", "finished"), [
    ("de", "Ich möchte einen Tisch für.", "Ich möchte einen Tisch für zwei."),
    ("es", "Quisiera una mesa para.", "Quisiera una mesa para dos."),
    ("fr", "Je voudrais une table pour.", "Je voudrais une table pour deux."),
])
def test_each_language_has_its_own_words_as_data(language, going_on, finished):
    assert unfinished(going_on, language) and not unfinished(finished, language)
    assert not unfinished(going_on, "en")  # an English reader sees only the punctuation here
