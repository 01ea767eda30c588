"""Days and clock times from numbers, the same in every language: the next day of a month,
which half of the day an hour means, minutes of a clock time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence


def next_day_of_month(number: int, today: dt.date) -> dt.date | None:
    """The next day numbered ``number`` (the 31st skips months without one), today included."""
    year, month = today.year, today.month
    for _ in range(13):
        try:
            day = dt.date(year, month, number)
        except ValueError:
            day = None
        if day is not None and day >= today:
            return day
        month, year = (1, year + 1) if month == 12 else (month + 1, year)
    return None


def this_year_or_next(month: int, number: int, today: dt.date) -> dt.date | None:
    """A month and day said without a year: this year's, or next year's when it has passed."""
    try:
        day = dt.date(today.year, month, number)
        return day if day >= today else day.replace(year=today.year + 1)
    except ValueError:
        return None


def clock(hour: int, minute: int, half: str, between: Sequence[str] | None) -> str | None:
    """"HH:MM" for an hour said with "am", "pm" or neither (``half``: "am", "pm" or "")."""
    if hour > 23 or minute > 59:
        return None
    if half == "pm":
        hour = hour + 12 if hour < 12 else hour
    elif half == "am":
        hour = 0 if hour == 12 else hour
    elif 1 <= hour <= 12:
        hour = likely_hour(hour, between)
    return f"{hour:02d}:{minute:02d}"


def likely_hour(hour: int, between: Sequence[str] | None) -> int:
    """An hour without am or pm: the one inside the business's hours (``between``, an "HH:MM"
    pair) when only one is; otherwise 1-6 is afternoon and 7-11 morning."""
    morning, afternoon = hour % 12, hour % 12 + 12
    if between:
        start, end = (to_minutes(t) for t in between)
        inside = [h for h in (morning, afternoon) if start <= h * 60 <= end]
        if len(inside) == 1:
            return inside[0]
    if hour == 12:
        return 12
    return afternoon if hour <= 6 else morning


def to_minutes(clock_time: str) -> int:
    hours, minutes = clock_time.split(":")
    return int(hours) * 60 + int(minutes)


def shifted(clock_time: str, minutes: int) -> str | None:
    """A clock time moved by ``minutes``, inside the same day."""
    total = to_minutes(clock_time) + minutes
    return f"{total // 60:02d}:{total % 60:02d}" if 0 <= total < 24 * 60 else None
