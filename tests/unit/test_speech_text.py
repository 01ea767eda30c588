"""Numbers, times and money as they are spoken; streamed text cleaned delta by delta."""

import pytest

from voicebot.brain.speak.spoken import SpokenTextCleaner
from voicebot.common.speech_text import number_words, ordinal_words, speakable


@pytest.mark.parametrize(("n", "words"), [(0, "zero"), (7, "seven"), (42, "forty-two"),
                                          (100, "one hundred"), (1500, "one thousand five hundred")])
def test_number_words(n, words):
    assert number_words(n) == words


@pytest.mark.parametrize(("n", "words"), [(1, "first"), (3, "third"), (12, "twelfth"), (20, "twentieth"),
                                          (21, "twenty-first")])
def test_ordinals(n, words):
    assert ordinal_words(n) == words


@pytest.mark.parametrize(("text", "spoken"), [
    ("See you at 7:30 pm.", "See you at seven thirty p m."),
    ("We open at 10:05.", "We open at ten oh five."),
    ("Dinner at 7pm for 2.", "Dinner at seven p m for two."),
    ("It is $12.50 each.", "It is twelve dollars fifty cents each."),
    ("On March 3rd at 8:00.", "On March third at eight o'clock."),
    ("A 15% service charge.", "A fifteen percent service charge."),
    ("Table 3.5 meters long", "Table three point five meters long"),
    ("No numbers here.", "No numbers here."),
])
def test_speakable(text, spoken):
    assert speakable(text) == spoken


def test_korean_text_passes_through():
    assert speakable("7시 30분", "ko") == "7시 30분"


def test_streamed_number_split_across_deltas():
    cleaner = SpokenTextCleaner()
    out = [cleaner.clean(d) for d in ["**Sure**, it is $12.", "50 for ", "2 people at 7:", "30."]]
    out.append(cleaner.flush())
    assert "".join(out) == "Sure, it is twelve dollars fifty cents for two people at seven thirty."
    assert out[0] == "Sure, it is "  # words without digits are not held back


def test_a_number_waits_for_its_unit_even_after_a_space():
    cleaner = SpokenTextCleaner()
    out = [cleaner.clean(d) for d in ["It is 5 ", "km away, open at 7 ", "pm."]]
    out.append(cleaner.flush())
    assert "".join(out) == "It is five kilometers away, open at seven p m."
