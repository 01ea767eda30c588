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
    # Idioms the packaged 1.5B model read wrongly as fields (18:30, 18:00, four people):
    ("Can we push it back by thirty minutes instead", {"time": "19:30"}),
    ("Could you push the booking back by an hour?", {"time": "20:00"}),
    ("Can we bring it forward a little?", {"time": "18:30"}),
    ("Move it forward by an hour, please.", {"time": "18:00"}),
    ("Actually my partner is joining us too", {"people": 3}),
    ("My sister's coming along.", {"people": 3}),
    ("Push it by an hour please", {}),  # no direction: the model's
    ("Could we move it to the weekend instead", {}),
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


async def test_a_change_the_model_read_as_fields_is_proposed_like_one_read_by_rule():
    from services.brain.hooks import HookContext
    from services.brain.state import PendingAction
    from services.reservations.hooks import CHANGE_FIELDS, RestaurantHooks

    async def read(name, arguments):
        return {"ok": True, "result": {"slots": [{"slot_id": "S5", "time": arguments["time"]}]}}

    read_back = PendingAction(tool="create_reservation", args={}, action="a table for two on Friday at 7 pm")
    task = dict(TASK)
    ctx = HookContext("Could we do eight instead?", "en", task,
                      frozenset({"find_slots", "create_reservation"}), read, read_back)
    assert await RestaurantHooks().before_model(ctx) is None  # a time or a party size: the rules can't tell
    assert RestaurantHooks.change_fields is CHANGE_FIELDS and CHANGE_FIELDS.schema["required"] == [
        "day", "time", "people"]
    result = await RestaurantHooks().from_fields(ctx, {"day": "friday", "time": "20:00", "people": 2})
    assert result.propose == ("create_reservation", {"slot_id": "S5", "name": "Robin", "people": 2})
    assert task["time"] == "20:00"  # the task holds the change, for the next one
