"""The restaurant profile's hook rules: booking slots read from what the caller said."""

import pytest

from services.reservations.hooks import complete, extract_slots, is_booking_request


@pytest.mark.parametrize(("text", "slots"), [
    ("Hi, I would like to book a table for two people on Friday at 7 in the evening. My name is Jamie.",
     {"day": "friday", "people": 2, "time": "19:00", "name": "Jamie"}),
    ("A table for four tomorrow at 8:30 pm under Lee", {"day": "tomorrow", "people": 4, "time": "20:30",
                                                         "name": "Lee"}),
    ("no, half past seven", {"time": "19:30"}),
    ("three people at seven", {"people": 3, "time": "19:00"}),
    ("what is on the menu?", {}),
    ("A table for two tomorrow at seven pm, my name is Alex", {"day": "tomorrow", "people": 2,
                                                               "time": "19:00", "name": "Alex"}),
    ("Actually, make it half past seven.", {"time": "19:30"}),
    ("Sorry, we are three people, not two.", {"people": 3}),
    ("could I get a table on Friday at seven pm? I'm Jamie.", {"day": "friday", "time": "19:00",
                                                               "name": "Jamie"}),
    ("There will be four of us, at seven thirty", {"people": 4, "time": "19:30"}),
    ("a table for 8 pm for two", {"people": 2, "time": "20:00"}),
    ("I'm looking for a table", {}),
])
def test_extract(text, slots):
    assert extract_slots(text) == slots


def test_complete_and_intent():
    assert complete({"day": "friday", "people": 2, "time": "19:00", "name": "Jamie"})
    assert not complete({"day": "friday", "people": 2})
    assert is_booking_request("I'd like to book a table") and not is_booking_request("cancel my booking")
