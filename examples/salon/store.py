"""The salon's appointment book in SQLite.

The day is cut into 30-minute openings on the half hour, per stylist
(Tuesday to Saturday, 10:00-18:00). A visit occupies as many consecutive
openings of its stylist as its service needs: a haircut or a beard trim one,
a colour three. Openings are not stored; a visit's openings are, in
``holds``, whose primary key makes a double booking impossible even across
processes (writes also take ``BEGIN IMMEDIATE``). Cancelling a visit deletes
its holds, which frees its openings.

A ``time_id`` names a start, a stylist and a service
(``20300108-1000-mia-colour``): booking it needs nothing else. The calls are
blocking (stdlib sqlite3): the server runs them in a thread, behind one lock
on one connection (which also makes ``:memory:`` work). Phone numbers are
stored to reach the customer, and never returned.
"""

from __future__ import annotations

import math
import re
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from examples import booking_db
from examples.booking_db import InvalidRequest, transaction

__all__ = ["SERVICES", "STYLISTS", "InvalidRequest", "NotAFullName", "Store", "TimeTaken", "parse_service",
           "parse_stylist"]

STYLISTS = {"mia": "Mia", "leo": "Leo"}  # id -> the name callers use
SERVICES = {"haircut": 30, "colour": 90, "beard trim": 15}  # name -> minutes
SERVICE_IDS = {"haircut": "haircut", "colour": "colour", "beard trim": "beard"}  # its word in a time_id
# What callers say for each service (lower case, single spaces).
SYNONYMS = {
    "haircut": "haircut", "haircuts": "haircut", "hair cut": "haircut", "cut": "haircut",
    "hair": "haircut",
    "colour": "colour", "color": "colour", "colouring": "colour", "coloring": "colour",
    "hair colour": "colour", "hair color": "colour", "dye": "colour",
    "beard trim": "beard trim", "beard": "beard trim", "beard trimming": "beard trim",
    "trim beard": "beard trim",
}
OPEN_WEEKDAYS = frozenset({1, 2, 3, 4, 5})  # Tuesday to Saturday (date.weekday())
OPEN, CLOSE = "10:00", "18:00"  # close: the last visit ends by then
STEP_MIN = 30
BOOKING_DAYS = 28  # today and the 27 days after it
MAX_LIMIT = 4
MAX_TEXT = 200  # names: a sentence, not a document
MAX_PHONE = 40

_SCHEMA = """
CREATE TABLE IF NOT EXISTS visits (
    visit_id TEXT PRIMARY KEY,
    time_id TEXT NOT NULL,
    day TEXT NOT NULL,
    time TEXT NOT NULL,
    stylist TEXT NOT NULL,
    service TEXT NOT NULL,
    customer_name TEXT NOT NULL,
    phone TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS holds (
    opening_id TEXT PRIMARY KEY,
    visit_id TEXT NOT NULL,
    day TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS holds_day ON holds (day);
CREATE INDEX IF NOT EXISTS holds_visit ON holds (visit_id);
CREATE INDEX IF NOT EXISTS visits_customer ON visits (customer_name COLLATE NOCASE);
"""

# Only what a caller may hear back: no phone.
_VISIT_SELECT = "SELECT visit_id, day, time, stylist, service, customer_name, status FROM visits"


_minutes = booking_db.minutes


def openings_for(service: str) -> int:
    """How many consecutive 30-minute openings a service occupies (a beard trim still takes one)."""
    return math.ceil(SERVICES[service] / STEP_MIN)


def start_times(service: str) -> tuple[str, ...]:
    """The starts on the half hour from which the service ends by closing time."""
    last = _minutes(CLOSE) - openings_for(service) * STEP_MIN
    return tuple(booking_db.hhmm(m) for m in range(_minutes(OPEN), last + 1, STEP_MIN))


@dataclass(frozen=True)
class Start:
    """A service with a stylist starting at a time: what a time_id names."""

    day: date
    time: str  # HH:MM
    stylist: str  # a key of STYLISTS
    service: str  # a key of SERVICES

    @property
    def time_id(self) -> str:
        return f"{self.day:%Y%m%d}-{self.time.replace(':', '')}-{self.stylist}-{SERVICE_IDS[self.service]}"

    def openings(self) -> list[str]:
        """The ids of the openings this visit occupies: day, start and stylist of each."""
        first = _minutes(self.time)
        return [f"{self.day:%Y%m%d}-{booking_db.hhmm(first + i * STEP_MIN).replace(':', '')}-{self.stylist}"
                for i in range(openings_for(self.service))]

    def view(self) -> dict[str, Any]:
        return {"time_id": self.time_id, "day": self.day.isoformat(), "weekday": self.day.strftime("%A"),
                "time": self.time, "stylist": STYLISTS[self.stylist], "service": self.service}


class TimeTaken(Exception):
    """Another visit holds one of the openings this start needs."""

    def __init__(self, start: Start) -> None:
        super().__init__(start.time_id)
        self.start = start


class NotAFullName(Exception):
    """A customer name of one word: two customers called Alex must not share a visit list."""


def _words(text: str) -> str:
    return " ".join(text.strip().lower().replace("-", " ").replace("_", " ").split())


def parse_service(text: str) -> str:
    """'Cut', 'color', 'beard' -> 'haircut', 'colour', 'beard trim'."""
    service = SYNONYMS.get(_words(text))
    if service is None:
        raise InvalidRequest(f"unknown service {text!r}; offer haircut, colour or beard trim")
    return service


def parse_stylist(text: str) -> str | None:
    """'Mia', 'leo' -> the stylist's key; empty (or 'any') -> None, any stylist."""
    word = _words(text)
    if word in ("", "any", "anyone", "either"):
        return None
    if word not in STYLISTS:
        raise InvalidRequest(f"no stylist {text!r} here; the stylists are Mia and Leo")
    return word


def _text(value: str, what: str) -> str:
    return booking_db.clean_text(value, what, MAX_TEXT)


def _phone(value: str) -> str:
    value = " ".join(value.split())
    if len(value) > MAX_PHONE:
        raise InvalidRequest(f"phone is too long: at most {MAX_PHONE} characters")
    return value


def closed_note(day: date) -> str:
    return f"the salon is closed on {day:%A}s; it is open Tuesday to Saturday"


class Store(booking_db.BookingStore):
    booking_days = BOOKING_DAYS
    window_sentence = "visits can be booked up to {last} ({days} days ahead)"

    def __init__(self, path: str, clock: Callable[[], datetime] = datetime.now) -> None:
        super().__init__(path, _SCHEMA, clock)

    def _is_past(self, start: Start) -> bool:
        return datetime.fromisoformat(f"{start.day.isoformat()}T{start.time}") <= self._clock()

    def start(self, time_id: str) -> Start:
        """The start a time_id names, checked against the schedule and the booking window."""
        match = re.fullmatch(r"(\d{8})-(\d{4})-([a-z]+)-([a-z]+)", time_id.strip().lower())
        unknown = InvalidRequest(f"unknown time_id {time_id!r}: take one from free_times")
        services = {word: name for name, word in SERVICE_IDS.items()}
        if not match or match[3] not in STYLISTS or match[4] not in services:
            raise unknown
        try:
            day = datetime.strptime(match[1], "%Y%m%d").date()
        except ValueError:
            raise unknown from None
        time, service = f"{match[2][:2]}:{match[2][2:]}", services[match[4]]
        if day.weekday() not in OPEN_WEEKDAYS or time not in start_times(service):
            raise unknown
        start = Start(self.booking_day(day.isoformat()), time, match[3], service)
        if self._is_past(start):
            raise InvalidRequest(f"time {time_id} is in the past")
        return start

    # -- queries ----------------------------------------------------------------------------------

    def free_times(self, day_text: str, service_text: str, stylist_text: str = "", from_time: str = "",
                   limit: int = MAX_LIMIT) -> dict[str, Any]:
        day = self.booking_day(day_text)
        service = parse_service(service_text)
        stylist = parse_stylist(stylist_text)
        wanted = _minutes(booking_db.parse_time(from_time, "14:30")) if from_time.strip() else None
        if day.weekday() not in OPEN_WEEKDAYS:
            return {"times": [], "note": closed_note(day)}
        with self._lock:
            held = {row[0] for row in self._db.execute("SELECT opening_id FROM holds WHERE day = ?",
                                                       (day.isoformat(),))}
        stylists = [stylist] if stylist else list(STYLISTS)
        free = [s for time in start_times(service) for s in (Start(day, time, k, service) for k in stylists)
                if held.isdisjoint(s.openings()) and not self._is_past(s)]
        if wanted is not None:  # at or after the wished time first, nearest first; then the ones before
            free.sort(key=lambda s: (_minutes(s.time) < wanted, abs(_minutes(s.time) - wanted)))
        result: dict[str, Any] = {"times": [s.view() for s in free[:limit]]}
        if not free:
            who = STYLISTS[stylist] if stylist else "any stylist"
            result["note"] = f"no free time for a {service} with {who} on {day:%A} {day.isoformat()}"
        return result

    def book(self, time_id: str, customer_name: str, key: str = "", phone: str = "") -> dict[str, Any]:
        name = _text(customer_name, "customer_name")
        number = _phone(phone)
        with self._lock, transaction(self._db):
            if key and (done := self._by_key(key)) is not None:
                return done  # a retry of a booking that already went through
            start = self.start(time_id)
            if self._any_held(start.openings()):
                raise TimeTaken(start)
            if len(name.split()) < 2:
                raise NotAFullName(name)
            visit_id = "V-" + secrets.token_hex(4).upper()
            self._db.execute(
                "INSERT INTO visits VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'booked', ?, ?)",
                (visit_id, start.time_id, start.day.isoformat(), start.time, STYLISTS[start.stylist],
                 start.service, name, number, key or None, self._clock().isoformat(timespec="seconds")))
            self._db.executemany("INSERT INTO holds VALUES (?, ?, ?)",
                                 [(o, visit_id, start.day.isoformat()) for o in start.openings()])
            return self._visit(visit_id)

    def find(self, customer_name: str) -> dict[str, Any]:
        name = _text(customer_name, "customer_name")
        with self._lock:
            rows = self._db.execute(f"{_VISIT_SELECT} WHERE customer_name = ? COLLATE NOCASE"
                                    " AND day >= ? ORDER BY day, time LIMIT 10",
                                    (name, self.today().isoformat())).fetchall()
        return {"visits": [_view(row) for row in rows]}

    def cancel(self, visit_id: str) -> dict[str, Any]:
        visit_id = visit_id.strip().upper()
        with self._lock, transaction(self._db):
            updated = self._db.execute("UPDATE visits SET status = 'cancelled' WHERE visit_id = ?",
                                       (visit_id,)).rowcount
            if not updated:
                raise InvalidRequest(f"no visit {visit_id!r}; find_visits lists them")
            self._db.execute("DELETE FROM holds WHERE visit_id = ?", (visit_id,))
            return self._visit(visit_id)

    # -- helpers ----------------------------------------------------------------------------------

    def _any_held(self, openings: list[str]) -> bool:
        marks = ", ".join("?" * len(openings))
        query = f"SELECT 1 FROM holds WHERE opening_id IN ({marks}) LIMIT 1"
        return self._db.execute(query, openings).fetchone() is not None

    def _by_key(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute(f"{_VISIT_SELECT} WHERE idempotency_key = ?", (key,)).fetchone()
        return None if row is None else _view(row)

    def _visit(self, visit_id: str) -> dict[str, Any]:
        return _view(self._db.execute(f"{_VISIT_SELECT} WHERE visit_id = ?", (visit_id,)).fetchone())


def _view(row: sqlite3.Row) -> dict[str, Any]:
    return {"visit_id": row["visit_id"], "day": row["day"],
            "weekday": date.fromisoformat(row["day"]).strftime("%A"), "time": row["time"],
            "stylist": row["stylist"], "service": row["service"], "customer_name": row["customer_name"],
            "status": row["status"]}
