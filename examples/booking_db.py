"""What every business's booking store shares: SQLite opened for one process and its
threads, BEGIN IMMEDIATE transactions, and the day and time words callers use.

The stores (``examples/restaurant/store.py``, ``examples/clinic/store.py``,
``examples/salon/store.py``, each a ``BookingStore``) are blocking (stdlib sqlite3) and run in a
thread behind one lock; writes take
``BEGIN IMMEDIATE`` so two processes on one file cannot double-book.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta
from pathlib import Path

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


class InvalidRequest(Exception):
    """The caller asked for something that cannot be (bad day, unknown id): its text is for the model."""


def open_db(path: str, schema: str) -> sqlite3.Connection:
    """A file (made with its folder, WAL journal) or ``:memory:``, with ``schema`` applied."""
    if path != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        path = str(Path(path).expanduser())
    # isolation_level=None: transactions are opened explicitly (BEGIN IMMEDIATE).
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA busy_timeout = 5000")
    if path != ":memory:":
        db.execute("PRAGMA journal_mode = WAL")
    db.executescript(schema)
    return db


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE … COMMIT, ROLLBACK on any exception (business refusals included)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def parse_day(text: str, today: date, field: str = "day") -> date:
    """An ISO date, 'today', 'tomorrow' or a weekday name (the nearest such day, today included)."""
    word = text.strip().lower()
    if word == "today":
        return today
    if word == "tomorrow":
        return today + timedelta(days=1)
    for index, name in enumerate(WEEKDAYS):
        if word in (name, name[:3]):
            return today + timedelta(days=(index - today.weekday()) % 7)
    try:
        return date.fromisoformat(word)
    except ValueError:
        raise InvalidRequest(f"{field} {text!r}: give a date as YYYY-MM-DD, 'today', 'tomorrow' "
                             "or a weekday name") from None


def parse_time(text: str, example: str = "19:30") -> str:
    match = re.fullmatch(r"(\d{1,2}):(\d{2})", text.strip())
    if not match or int(match[1]) > 23 or int(match[2]) > 59:
        raise InvalidRequest(f"time {text!r}: give a time as HH:MM, e.g. {example}")
    return f"{int(match[1]):02d}:{match[2]}"


def minutes(hhmm: str) -> int:
    hours, mins = hhmm.split(":")
    return int(hours) * 60 + int(mins)


def hhmm(minutes_of_day: int) -> str:
    return f"{minutes_of_day // 60:02d}:{minutes_of_day % 60:02d}"


def clean_text(value: str, what: str, max_chars: int) -> str:
    """A name or a reason as one line of words; empty or too long is the caller's to fix."""
    value = " ".join(value.split())
    if not value:
        raise InvalidRequest(f"{what} is empty: ask the caller for it")
    if len(value) > max_chars:
        raise InvalidRequest(f"{what} is too long: at most {max_chars} characters")
    return value


class BookingStore:
    """What every business's store does the same way: its SQLite file behind one lock, its
    clock (``*_TODAY`` pins it), and the booking window: today and the ``booking_days - 1`` days
    after it. A business's store adds its own tables and tools."""

    booking_days = 14
    day_field = "day"  # the tool argument a day comes in, for the refusal of a day it cannot read
    # The refusal of a day past the window, e.g. "bookings are open up to {last} ({days} days ahead)".
    window_sentence = "bookings are open up to {last} ({days} days ahead)"

    def __init__(self, path: str, schema: str, clock: Callable[[], datetime] = datetime.now) -> None:
        self._db = open_db(path, schema)
        self._lock = threading.Lock()
        self._clock = clock

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def today(self) -> date:
        return self._clock().date()

    def booking_day(self, text: str) -> date:
        """The day the caller said, inside the booking window, or ``InvalidRequest`` saying why not."""
        today = self.today()
        day = parse_day(text, today, self.day_field)
        last = today + timedelta(days=self.booking_days - 1)
        if day < today:
            raise InvalidRequest(f"{day.isoformat()} is in the past; today is {today.isoformat()}")
        if day > last:
            raise InvalidRequest(self.window_sentence.format(last=last.isoformat(), days=self.booking_days))
        return day
