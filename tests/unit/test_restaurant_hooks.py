"""The restaurant profile's hook rules: booking slots read from what the caller said."""

import pytest

from services.reservations.hooks import complete, extract_slots, is_booking_request, relative_changes


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


TASK = {"intent": "book", "day": "friday", "time": "19:00", "people": 2, "name": "Robin"}


@pytest.mark.parametrize(("text", "changes"), [
    ("Could you make it a little later in the evening, please?", {"time": "19:30"}),
    ("A bit earlier, please.", {"time": "18:30"}),
    ("Make it an hour later.", {"time": "20:00"}),
    ("Half an hour earlier would be better.", {"time": "18:30"}),
    ("Actually, one more person is coming with us.", {"people": 3}),
    ("Two more people are coming.", {"people": 4}),
    ("Another guest is joining.", {"people": 3}),
    ("We will be one person less.", {"people": 1}),
    ("Could we do the day after instead?", {"day": "saturday"}),
    ("The day before would suit us.", {"day": "thursday"}),
    ("The day after, and a little later.", {"day": "saturday", "time": "19:30"}),
    ("I'll call back later.", {}),
    ("Actually, make it half past seven.", {}),  # an outright value: extract_slots reads it
])
def test_a_change_relative_to_the_read_back(text, changes):
    assert relative_changes(text, TASK) == changes


def test_a_relative_change_needs_the_value_it_changes():
    assert relative_changes("one more person, a little later, the day after", {}) == {}
    assert relative_changes("the day after", {"day": "tomorrow"}) == {}  # the date is the server's


async def test_a_relative_change_to_the_read_back_is_proposed_by_rule():
    from services.brain.hooks import HookContext
    from services.brain.state import PendingAction
    from services.reservations.hooks import RestaurantHooks

    asked = []

    async def read(name, arguments):
        asked.append((name, arguments))
        return {"ok": True, "result": {"slots": [{"slot_id": "S2", "time": "19:30"}]}}

    read_back = PendingAction(tool="create_reservation", args={}, action="a table for two on Friday at 7 pm")
    ctx = HookContext("Could you make it a little later, please?", "en", dict(TASK),
                      frozenset({"find_slots", "create_reservation"}), read, read_back)
    result = await RestaurantHooks().before_model(ctx)
    assert asked == [("find_slots", {"day": "friday", "people": 2, "time": "19:30"})]
    assert result.propose == ("create_reservation", {"slot_id": "S2", "name": "Robin", "people": 2})
    # Without an action being changed, "later" is no change to anything.
    ctx = HookContext("a little later", "en", dict(TASK), ctx.tools, read, None)
    assert await RestaurantHooks().before_model(ctx) is None
