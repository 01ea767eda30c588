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


@pytest.mark.parametrize(("text", "spoken"), [
    ("7시 30분", "일곱 시 30분"), ("2명", "두 명"), ("오후 12시에 21명", "오후 열두 시에 스물한 명"),
    ("2시간", "두 시간"), ("12월 25일", "12월 25일"), ("100명", "100명"), ("3.5시간", "3.5시간"),
])
def test_korean_numbers_before_native_counters_are_native_words_and_the_rest_is_the_voices(text, spoken):
    """A voice reads digits the Sino-Korean way (칠 시); hours and counts are native (일곱 시)."""
    assert speakable(text, "ko") == spoken


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
