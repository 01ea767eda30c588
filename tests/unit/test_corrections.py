"""A value taken back in the same words gives way to the one said instead, in every language by
its pack's words (``corrections``): "not two people, three", "세 명 말고 네 명". Words that take
nothing back, or take back a value and say no other, are read as they were said."""

from __future__ import annotations

import datetime as dt

import pytest

from voicebot.brain.business.profile import load_profile
from voicebot.brain.business.tasks import FieldSpec
from voicebot.brain.read.numbers import number_words
from voicebot.brain.read.reading import rule_values
from voicebot.brain.read.values import normalise

TUESDAY = dt.date(2026, 12, 1)
RESTAURANT = load_profile("restaurant")


def _fields(language: str) -> list[FieldSpec]:
    party = RESTAURANT.in_language(language).tasks["create_reservation"].fields["people"]
    return [
        FieldSpec("day", "date", "Which day?", True, language=language),
        FieldSpec("time", "time", "At what time?", True, between=("17:00", "22:30"), language=language),
        FieldSpec("people", "integer", "How many?", True, numbers=number_words(party, language),
                  language=language),
    ]


def _read(words: str, language: str, asking: str = "") -> dict[str, object]:
    """The values as the brain keeps them: a day and a time parsed from the words rules kept."""
    values = rule_values(words, _fields(language), asking, TUESDAY,
                         {"day": "2026-12-02", "time": "19:00", "people": 2})
    kinds = {"day": "date", "time": "time", "people": "integer"}
    return {name: normalise(kinds[name], raw, today=TUESDAY, between=("17:00", "22:30"), language=language)
            for name, raw in values.items()}


@pytest.mark.parametrize(("words", "asking", "expected"), [
    ("Not two people, three.", "", {"people": 3}),
    ("Not Wednesday but Thursday.", "", {"day": "2026-12-03"}),
    ("Thursday, not Wednesday.", "", {"day": "2026-12-03"}),
    ("At seven, no wait, at eight.", "", {"time": "20:00"}),
    ("For four people, I mean five people.", "", {"people": 5}),
    ("Seven, no wait, eight.", "time", {"time": "20:00"}),
    ("Five people, sorry, I mean six.", "people", {"people": 6}),
    ("At seven not eight.", "time", {"time": "19:00"}),  # "not" takes back what follows it
    # what the caller did not say again stands: only the time was corrected
    ("Friday at 8, no wait, at 9.", "", {"day": "2026-12-04", "time": "21:00"}),
    ("Friday at 8, sorry, I mean Saturday.", "", {"day": "2026-12-05", "time": "20:00"}),
    ("Actually, not Friday — Saturday.", "", {"day": "2026-12-05"}),
    ("Not at seven. Eight.", "time", {"time": "20:00"}),
])
def test_an_english_correction_keeps_the_value_said_instead(words, asking, expected):
    assert _read(words, "en", asking) == expected


@pytest.mark.parametrize(("words", "asking", "expected"), [
    ("세 명 말고 네 명으로 해 주세요.", "", {"people": 4}),
    ("아니요, 금요일이 아니라 토요일이에요.", "", {"day": "2026-12-05"}),
    ("일곱 시 말고 일곱 시 반으로요.", "", {"time": "19:30"}),
    ("다섯 명이요, 아 아니다 여섯 명이요.", "people", {"people": 6}),
    ("두 명 아니고 세 명이요.", "people", {"people": 3}),
    ("금요일 대신 토요일로 해 주세요.", "", {"day": "2026-12-05"}),
    ("금요일 저녁 7시, 아 아니다 8시요.", "", {"day": "2026-12-04", "time": "20:00"}),
])
def test_a_korean_correction_keeps_the_value_said_instead(words, asking, expected):
    assert _read(words, "ko", asking) == expected


@pytest.mark.parametrize(("words", "language", "expected"), [
    # nothing taken back: read as said
    ("I'm not sure, maybe Thursday.", "en", {"day": "2026-12-03"}),
    ("That's not right, make it Thursday.", "en", {"day": "2026-12-03"}),
    ("A table for three on Friday.", "en", {"people": 3, "day": "2026-12-04"}),
    ("그게 아니라 목요일이에요.", "ko", {"day": "2026-12-03"}),
])
def test_words_that_correct_nothing_are_read_as_said(words, language, expected):
    assert _read(words, language) == expected


@pytest.mark.parametrize(("words", "language"), [("Not Friday.", "en"), ("금요일 말고요.", "ko"),
                                                 ("Not at seven.", "en")])
def test_a_value_taken_back_with_none_said_instead_gives_the_field_no_value(words, language):
    assert _read(words, language) == {}


def test_free_words_are_never_taken_back():
    """Only dates, times, numbers and choices are taken back: a text field keeps its "not"."""
    summary = FieldSpec("summary", "text", "What is the problem?", True)
    values = rule_values("My laptop will not start.", [*_fields("en"), summary], "summary", TUESDAY)
    assert values == {"summary": "My laptop will not start."}
