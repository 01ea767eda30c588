"""Caller's words to typed values, by parsers rather than the model (voicebot/brain/read/values.py)."""

import datetime as dt

import pytest

from voicebot.brain.read.values import (
    match_choice,
    normalise,
    parse_date,
    parse_integer,
    parse_name,
    parse_time,
    relative_change,
)

MONDAY = dt.date(2030, 1, 7)


@pytest.mark.parametrize(("words", "day"), [
    ("tomorrow", "2030-01-08"), ("Friday", "2030-01-11"), ("on the twelfth", "2030-01-12"),
    ("December 12th", "2030-12-12"), ("the day after tomorrow", "2030-01-09"), ("tonight", "2030-01-07"),
    ("a table for two tomorrow at seven", "2030-01-08"), ("2030-01-09", "2030-01-09"),
    ("Monday", "2030-01-07"), ("next Saturday", "2030-01-12"),
])
def test_a_day_is_read_as_the_nearest_one_from_today(words, day):
    assert parse_date(words, MONDAY) == dt.date.fromisoformat(day)


@pytest.mark.parametrize("words", ["I want to book", "at seven", "four people", ""])
def test_words_without_a_day_give_none(words):
    assert parse_date(words, MONDAY) is None


@pytest.mark.parametrize(("words", "evening", "plain"), [
    ("seven pm", "19:00", "19:00"), ("at seven", "19:00", "07:00"), ("7:30", "19:30", "07:30"),
    ("half past seven", "19:30", "07:30"), ("seven thirty", "19:30", "07:30"), ("noon", "12:00", "12:00"),
    ("a table for four at eight", "20:00", "08:00"), ("quarter to eight", "19:45", "07:45"),
    ("at 9 in the morning", "09:00", "09:00"), ("two", "14:00", "14:00"),
])
def test_a_time_is_read_inside_the_business_hours_when_am_or_pm_is_not_said(words, evening, plain):
    assert parse_time(words, ("18:00", "22:00")) == evening
    assert parse_time(words) == plain


def test_a_half_of_the_day_said_after_half_past_or_quarter_to_counts():
    assert parse_time("half past seven at night") == "19:30"
    assert parse_time("quarter to eight in the morning", ("12:00", "22:00")) == "07:45"


@pytest.mark.parametrize("words", ["for four people", "we are 4", "a table please"])
def test_a_party_size_is_no_time(words):
    assert parse_time(words) is None


@pytest.mark.parametrize(("words", "number"), [
    ("four", 4), ("we are 4", 4), ("a party of six", 6), ("Four people.", 4), ("two or three", None),
    ("two people at seven", None),  # two numbers: which one is the field's is the field's to say
])
def test_numbers_in_words(words, number):
    assert parse_integer(words) == number


@pytest.mark.parametrize(("words", "name"), [
    ("It's Jordan Blake.", "Jordan Blake"), ("jordan blake", "Jordan Blake"),
    ("My name is Alex Park", "Alex Park"), ("under Lee please", "Lee"),
    ("I want a table tomorrow", None), ("What time is it?", None), ("Looking", None),
    ("under the name Kim", "Kim"), ("a reservation", None),
])
def test_a_name_as_an_answer_to_what_name(words, name):
    assert parse_name(words) == name


def test_a_choice_is_one_allowed_value_the_words_name():
    assert match_choice("a beard trim please", ["haircut", "colour", "beard trim"]) == "beard trim"
    assert match_choice("with Dr. Kim", ["Dr. Patel", "Dr. Kim"]) == "Dr. Kim"
    assert match_choice("a haircut and a colour", ["haircut", "colour"]) is None  # two: not one
    assert match_choice("a perm", ["haircut", "colour"]) is None


@pytest.mark.parametrize(("words", "choice"), [
    ("can I get my hair coloured with Leo", "colour"), ("two haircuts", "haircut"),
    ("a beard trimmed", "beard trim"), ("colouring and a haircut", None), ("a perm", None),
])
def test_a_choice_is_named_by_another_form_of_its_words(words, choice):
    assert match_choice(words, ["haircut", "colour", "beard trim"]) == choice


@pytest.mark.parametrize(("kind", "words", "current", "changed"), [
    ("time", "Could you make it a little later, please?", "19:00", "19:30"),
    ("time", "an hour earlier", "19:00", "18:00"), ("time", "push it back by an hour", "19:00", "20:00"),
    ("time", "I'll call back later", "19:00", None), ("date", "the day after", "2030-01-11", "2030-01-12"),
    ("time", "two hours later", "19:00", "21:00"), ("time", "20 minutes earlier", "19:00", "18:40"),
    ("time", "bring it forward half an hour", "19:00", "18:30"),
    ("integer", "one more person is coming", 2, None),  # a number field's changes are its own
])
def test_a_change_relative_to_what_was_read_back(kind, words, current, changed):
    assert relative_change(kind, words, current) == changed


def test_normalise_gives_none_for_words_without_a_value_of_the_kind():
    assert normalise("date", "null", today=MONDAY) is None
    assert normalise("integer", "lots", today=MONDAY) is None
    assert normalise("choice", "a perm", today=MONDAY, choices=["haircut"]) is None
    assert normalise("text", "  my laptop will not start. ", today=MONDAY) == "my laptop will not start"


@pytest.mark.parametrize(("text", "day"), [
    ("Sorry, one thing first: can we bring our own birthday cake?", None),
    ("First we need a table on Friday", "2026-12-04"),
    ("the 12th", "2026-12-12"), ("Twelfth.", "2026-12-12"), ("on the first", "2026-12-01"),
    ("December 1st", "2026-12-01"), ("first of December", "2026-12-01"),
])
def test_an_ordinal_is_a_day_only_when_said_as_one(text, day):
    found = parse_date(text, dt.date(2026, 11, 29))
    assert (found.isoformat() if found else None) == day
