"""Slot filling by rules (seed 002): day, time, party size and name from what the caller said.

Small local models often answer a complete booking request in prose instead of calling
find_slots. When every slot is known, code takes the same path the model should have
(find_slots, then propose_reservation) and reads the proposal back; nothing is booked
until the caller confirms. English only; anything the rules miss is left to the model.
"""

from __future__ import annotations

import re
from typing import Any

_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_NUM = r"(\d{1,2}|" + "|".join(_NUMBERS) + r")"
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "today",
         "tomorrow", "tonight")
_DAY = re.compile(r"\b(" + "|".join(_DAYS) + r")\b", re.I)
_PEOPLE = re.compile(
    r"\b(?:for|party of|table for)\s+" + _NUM + r"(?:\s+(?:people|persons|guests|of us))?\b"
    r"|\b" + _NUM + r"\s+(?:people|persons|guests|of us)\b", re.I)
_TIME = re.compile(
    r"\bat\s+" + _NUM + r"(?::(\d{2}))?(?:\s*(o'clock))?\s*(a\.?m\.?|p\.?m\.?|in the evening|"
    r"in the morning|tonight)?", re.I)
_HALF_PAST = re.compile(r"\bhalf past\s+" + _NUM, re.I)
_NAME = re.compile(r"\b(?i:my name is|this is|under the name|under|name's)\s+([A-Z][a-z]+)")
_BOOKING = re.compile(r"\b(book|table|reserv)", re.I)
_CANCEL = re.compile(r"\b(cancel|change my|move my)", re.I)


def _number(token: str) -> int:
    return int(token) if token.isdigit() else _NUMBERS[token.lower()]


def _hour_24(hour: int, suffix: str) -> int:
    suffix = (suffix or "").lower()
    if suffix.startswith("a") or "morning" in suffix:
        return hour % 12
    if hour < 12 and (suffix.startswith("p") or "evening" in suffix or "tonight" in suffix or hour < 11):
        return hour + 12  # a dinner booking: "at seven" means 19:00
    return hour


def extract_slots(text: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if day := _DAY.search(text):
        found["day"] = "today" if day.group(1).lower() == "tonight" else day.group(1).lower()
    if people := _PEOPLE.search(text):
        found["people"] = _number(people.group(1) or people.group(2))
    if half := _HALF_PAST.search(text):
        found["time"] = f"{_hour_24(_number(half.group(1)), ''):02d}:30"
    elif time := _TIME.search(text):
        minutes = time.group(2) or "00"
        found["time"] = f"{_hour_24(_number(time.group(1)), time.group(4) or ''):02d}:{minutes}"
    if name := _NAME.search(text):
        found["name"] = name.group(1)
    return found


def is_booking_request(text: str) -> bool:
    return bool(_BOOKING.search(text)) and not _CANCEL.search(text)


REQUIRED = ("day", "time", "people", "name")


def complete(slots: dict[str, Any]) -> bool:
    return all(slots.get(key) for key in REQUIRED)
