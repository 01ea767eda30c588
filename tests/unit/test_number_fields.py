"""What a number field's number means in words comes from the business's profile, not from code:
the restaurant's party size reads "a table for four" and "just me"; a garage's mileage, with no
such words, takes a number only as the answer to its own question."""

from __future__ import annotations

import datetime as dt

import pytest

from voicebot.brain.business.profile import FieldSettings, ProfileError, load_profile, parse_profile
from voicebot.brain.business.tasks import FieldSpec
from voicebot.brain.read.numbers import number_change, number_words, said_number
from voicebot.brain.read.reading import rule_values
from voicebot.brain.read.values import parse_name, parse_time

TODAY = dt.date(2026, 12, 7)
PARTY = load_profile("restaurant").tasks["create_reservation"].fields["people"]
PEOPLE = FieldSpec("people", "integer", "For how many people?", True, numbers=number_words(PARTY))
TIME = FieldSpec("time", "time", "At what time?", True, between=("18:00", "22:00"))
MILEAGE = FieldSpec("mileage", "integer", "What is the mileage?", True,
                    numbers=number_words(FieldSettings()))


@pytest.mark.parametrize(("words", "number"), [
    ("A table for four tomorrow at seven.", 4), ("We are 6.", 6), ("a party of eight", 8),
    ("Just me, please.", 1), ("Me and my wife.", 2), ("four people at seven", 4),
    ("at seven, please", None), ("I'd like to book a table.", None),
])
def test_the_restaurants_party_size_in_its_own_words(words, number):
    assert said_number(words, PEOPLE.numbers) == number


@pytest.mark.parametrize(("words", "current", "changed"), [
    ("one more person is coming", 2, 3), ("my partner is joining us too", 2, 3), ("two more people", 2, 4),
    ("one less", 3, 2), ("my brother can't come", 3, 2), ("a little later", 3, None),
])
def test_the_party_size_changes_in_its_own_words(words, current, changed):
    assert number_change(words, PEOPLE.numbers, current) == changed


def test_a_garage_number_field_gets_none_of_the_restaurants_rules():
    assert MILEAGE.numbers is None
    for words in ("A service for four people.", "just me", "a party of six", "one more person is coming"):
        assert rule_values(words, [MILEAGE], "", TODAY) == {}
    assert rule_values("About 42000.", [MILEAGE], "mileage", TODAY) == {"mileage": "About 42000."}


def test_a_party_size_is_no_time_and_the_time_is_still_read():
    values = rule_values("A table for 4 people at 7 pm.", [PEOPLE, TIME], "", TODAY)
    assert values["people"] == 4
    assert parse_time(values["time"], TIME.between) == "19:00"
    assert parse_time(rule_values("We are 8.", [PEOPLE, TIME], "", TODAY).get("time") or "") is None


def test_a_said_as_phrase_without_the_number_fails_the_start():
    with pytest.raises(ProfileError, match=r"said_as: 'table for two' has no \{n\}"):
        parse_profile({"tasks": {"book": {"fields": {"people": {"said_as": ["table for two"]}}}}})


def test_the_businesss_own_words_are_never_a_name():
    restaurant_words = frozenset({"book", "table", "reservation", "cancel"})
    assert parse_name("A table, please.", restaurant_words) is None
    assert parse_name("A table, please.") == "A Table"  # a garage's name field knows no tables
    assert parse_name("Jordan Blake", restaurant_words) == "Jordan Blake"
