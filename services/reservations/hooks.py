"""The restaurant profile's domain hooks: booking slots by rule (seed 002).

Day, time, party size and name are read from what the caller says, turn by
turn, into the task. When the caller asked for a table and all four are known,
and this turn said something about them, the hook takes the path the model
should take: ``find_slots``, then a ``create_reservation`` call for the slot at
the wished time. That call is only a proposal: the brain reads it back and
books after the caller's yes. A correction ("half past seven", "we are three,
not two") updates the task and proposes anew, and so does one relative to the read-back
("one more person", "a little later", "the day after"). A change the rules cannot read
("could we do eight instead") is asked of the model as the booking's day, time and party size
(``CHANGE_FIELDS``), and proposed from those the same way. Anything else the rules miss is left
to the model. English only.
"""

from __future__ import annotations

import re
from typing import Any

from services.brain.hooks import ChangeFields, DomainHooks, HookContext, HookResult
from services.reservations.store import MAX_PEOPLE

_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_NUM = r"(\d{1,2}|" + "|".join(_NUMBERS) + r")"
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "today",
         "tomorrow", "tonight")
_DAY = re.compile(r"\b(" + "|".join(_DAYS) + r")\b", re.I)
_PEOPLE = re.compile(
    r"\b(?:for|party of|table for|we are|we're|there are|there will be|there'll be)\s+" + _NUM +
    r"(?:\s+(?:people|persons|guests|of us|adults))?\b(?!\s*(?::|o'clock|am\b|pm\b|a\.m|p\.m|in the))"
    r"|\b" + _NUM + r"\s+(?:people|persons|guests|of us|adults)\b", re.I)
_TIME = re.compile(
    # "for"/"to" only before a clock time: "a table for two" is a party, "for 8 pm" a time.
    r"\b(?:at|make it|around|about|(?:for|to)(?=\s+\w+(?::\d{2})?\s*(?:o'clock|[ap]\.?m\b)))\s+"
    + _NUM + r"(?::(\d{2}))?(?:\s*(o'clock))?"
    r"(\s*(?:a\.?m\.?|p\.?m\.?|in the evening|in the morning|tonight))?"
    r"(?!\s*(?:people|persons|guests|of us))", re.I)
_HALF_PAST = re.compile(r"\bhalf past\s+" + _NUM, re.I)
_SEVEN_THIRTY = re.compile(r"\b" + _NUM + r"\s+thirty\b", re.I)
_NEGATED = re.compile(r"\b(?:not|instead of)\s+(?:at\s+)?" + _NUM + r"(?::\d{2})?(?:\s+\w+)?", re.I)
_NAME = re.compile(r"\b(?i:my name is|this is|under the name|under|name's|i'm|i am|it's for|name is)"
                   r"\s+([A-Z][a-z]+)\b")
_NOT_NAMES = {"Looking", "Calling", "Sorry", "Just", "Not", "Here", "Good", "Fine", "Hoping", "Trying"}
# Changes relative to what was read back: "one more person", "a little later", "the day after".
_GUESTS = r"(?:person|people|guests?)"
_MORE = re.compile(r"\b(?:" + _NUM + r"|a|an)?\s*(?:more|extra|additional)\s+" + _GUESTS +
                   r"\b|\banother\s+(?:person|guest)\b", re.I)
_FEWER = re.compile(
    r"\b" + _NUM + r"\s+(?:(?:less|fewer)\s+" + _GUESTS + "|" + _GUESTS + r"\s+(?:less|fewer))\b", re.I)
_DAY_AFTER = re.compile(r"\b(?:the\s+(?:day|night)\s+after|the\s+next\s+day|a\s+day\s+later)\b", re.I)
_DAY_BEFORE = re.compile(r"\b(?:the\s+(?:day|night)\s+before|a\s+day\s+earlier)\b", re.I)
_SHIFT = re.compile(r"\b(?:(an?\s+hour|half\s+an\s+hour)|a\s+(?:little|bit)(?:\s+bit)?|slightly)?\s*"
                    r"\b(later|earlier)\b", re.I)
_CALL_BACK = re.compile(r"\bcall\b", re.I)  # "I'll call back later" is no later table
# "Push it back by half an hour" (later), "bring it forward an hour" (earlier); without an
# amount, half an hour. The 1.5B model read "push it back" as earlier.
_PUSH = re.compile(r"\b(?:(push|put|move)|(bring|move))\s+"
                   r"(?:it|that|this|the\s+(?:booking|reservation|table))?\s*(?(1)back|forward)\b", re.I)
_AN_HOUR = re.compile(r"\b(?<!half )(?:an?|one)\s+hour\b", re.I)
# "My partner is joining us too": one more (plural subjects are not counted by rule).
_JOINING = re.compile(r"\b(?:is|'s)\s+(?:also\s+)?(?:joining\s+us|coming\s+(?:with\s+us|along|too))\b",
                      re.I)
_WEEK = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_BOOKING = re.compile(r"\b(book|table|reserv)", re.I)
_CANCEL = re.compile(r"\b(cancel|change my|move my)", re.I)
REQUIRED = ("day", "time", "people", "name")
# The booking after a change, as the model is asked to write it. All three, always: the 1.5B
# model got 7 of 10 changes right this way, and fewer when asked for the changed fields alone.
# No more people than the largest table seats: "Could we do eight instead?" came back as 20:00
# *and* eight people, a party no table takes (a larger one the rules read: "we are six").
CHANGE_FIELDS = ChangeFields(
    schema={
        "type": "object",
        "properties": {
            "day": {"type": "string", "enum": [*_WEEK, "today", "tomorrow"]},
            "time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"},
            "people": {"type": "integer", "minimum": 1, "maximum": MAX_PEOPLE},
        },
        "required": ["day", "time", "people"],
        "additionalProperties": False,
    },
    instruction="One line of JSON: the booking after the caller's change (day, 24-hour time, people).",
)


def _number(token: str) -> int:
    return int(token) if token.isdigit() else _NUMBERS[token.lower()]


def _hour_24(hour: int, suffix: str) -> int:
    suffix = (suffix or "").lower().strip()
    if suffix.startswith("a") or "morning" in suffix:
        return hour % 12
    if hour < 12 and (suffix.startswith("p") or "evening" in suffix or "tonight" in suffix or hour < 11):
        return hour + 12  # a dinner booking: "at seven" means 19:00
    return hour


def extract_slots(text: str) -> dict[str, Any]:
    """What the caller said about a booking. "not two" is a value being replaced: skipped."""
    text = _NEGATED.sub(" ", text)
    found: dict[str, Any] = {}
    if day := _DAY.search(text):
        found["day"] = "today" if day.group(1).lower() == "tonight" else day.group(1).lower()
    if people := _PEOPLE.search(text):
        found["people"] = _number(people.group(1) or people.group(2))
    if half := _HALF_PAST.search(text):
        found["time"] = f"{_hour_24(_number(half.group(1)), ''):02d}:30"
    elif thirty := _SEVEN_THIRTY.search(text):
        found["time"] = f"{_hour_24(_number(thirty.group(1)), ''):02d}:30"
    elif time := _TIME.search(text):
        minutes = time.group(2) or "00"
        found["time"] = f"{_hour_24(_number(time.group(1)), time.group(4) or ''):02d}:{minutes}"
    if (name := _NAME.search(text)) and name.group(1) not in _NOT_NAMES:
        found["name"] = name.group(1)
    return found


def relative_changes(text: str, task: dict[str, Any]) -> dict[str, Any]:
    """A change to what the caller was read back, relative to it: "one more person" or "my
    partner is joining us" (+1), "a little later" or "push it back" (+30 min; "an hour later"
    +60), "the day after" (next weekday). Only values
    the task holds are changed; a day said as a date or "tomorrow" is left to the model."""
    found: dict[str, Any] = {}
    people = task.get("people")
    if isinstance(people, int):
        if more := _MORE.search(text):
            found["people"] = people + (_number(more.group(1)) if more.group(1) else 1)
        elif _JOINING.search(text):
            found["people"] = people + 1
        elif fewer := _FEWER.search(text):
            found["people"] = max(1, people - _number(fewer.group(1)))
    day = str(task.get("day") or "")
    after, before = _DAY_AFTER.search(text), _DAY_BEFORE.search(text)
    if (after or before) and day in _WEEK:
        found["day"] = _WEEK[(_WEEK.index(day) + (1 if after else -1)) % 7]
    elif after and day == "today":
        found["day"] = "tomorrow"
    rest = _DAY_BEFORE.sub(" ", _DAY_AFTER.sub(" ", text))
    clock = re.fullmatch(r"(\d{2}):(\d{2})", str(task.get("time") or ""))
    if clock and not _CALL_BACK.search(rest) and (shift := _time_shift(rest)):
        total = int(clock.group(1)) * 60 + int(clock.group(2)) + shift
        if 0 <= total < 24 * 60:
            found["time"] = f"{total // 60:02d}:{total % 60:02d}"
    return found


def _time_shift(text: str) -> int | None:
    """Minutes later (negative: earlier): "a little later" +30, "an hour earlier" -60, "push it
    back by an hour" +60, "bring it forward" -30."""
    if shift := _SHIFT.search(text):
        minutes = 60 if shift.group(1) and "half" not in shift.group(1).lower() else 30
        return minutes if shift.group(2).lower() == "later" else -minutes
    if push := _PUSH.search(text):
        minutes = 60 if _AN_HOUR.search(text) else 30
        return minutes if push.group(1) else -minutes
    return None


def is_booking_request(text: str) -> bool:
    return bool(_BOOKING.search(text)) and not _CANCEL.search(text)


def complete(slots: dict[str, Any]) -> bool:
    return all(slots.get(key) for key in REQUIRED)


class RestaurantHooks(DomainHooks):
    change_fields = CHANGE_FIELDS

    def __init__(self, profile: Any = None) -> None:
        self.profile = profile

    async def before_model(self, ctx: HookContext) -> HookResult | None:
        found = extract_slots(ctx.text)
        task = ctx.task
        if ctx.correcting is not None:  # what the caller says outright wins over "a little later"
            found = {**relative_changes(ctx.text, task), **found}
        if is_booking_request(ctx.text) or ctx.correcting is not None:
            task["intent"] = "book"
        elif _CANCEL.search(ctx.text):
            task.pop("intent", None)  # a cancellation is the model's (find_reservation first)
        task.update(found)
        if not found:
            return None
        return await self._propose(ctx)

    async def from_fields(self, ctx: HookContext, fields: dict[str, Any]) -> HookResult | None:
        ctx.task.update(fields, intent="book")
        return await self._propose(ctx)

    @staticmethod
    async def _propose(ctx: HookContext) -> HookResult | None:
        """``find_slots`` for the task, then a ``create_reservation`` proposal for the wished time."""
        task = ctx.task
        if not (task.get("intent") == "book" and complete(task)
                and {"find_slots", "create_reservation"} <= ctx.tools):
            return None
        wanted = {"day": task["day"], "people": task["people"], "time": task["time"]}
        answer = await ctx.read("find_slots", wanted)
        slots = (answer.get("result") or {}).get("slots") or []
        match = next((s for s in slots if s.get("time") == task["time"]), None)
        if not answer.get("ok") or match is None:
            free = ", ".join(f"{s['slot_id']} at {s['time']}" for s in slots[:3]) or "none"
            return HookResult(note=(f"No table at {task['time']} on {task['day']} for {task['people']}. "
                                    f"Free: {free}. Offer these to the caller."))
        return HookResult(propose=("create_reservation", {
            "slot_id": match["slot_id"], "name": task["name"], "people": task["people"]}))


def hooks(profile: Any) -> RestaurantHooks:
    return RestaurantHooks(profile)
