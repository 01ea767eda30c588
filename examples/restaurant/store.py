"""The restaurant's book in SQLite: time slots, tables and reservations.

One row in ``slots`` is a time on a day for one table size, with how many
tables of that size exist; a reservation takes one table. The calls are
blocking (stdlib sqlite3): the server runs them in a thread. One connection
behind one lock serialises them, which also makes ``:memory:`` work; writes
take ``BEGIN IMMEDIATE`` so two processes on one file cannot double-book.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from examples import booking_db
from examples.booking_db import InvalidRequest, parse_day, transaction

__all__ = ["InvalidRequest", "PartyTooLarge", "SlotTaken", "Store", "parse_day", "parse_time"]

OPENING_TIMES = tuple(f"{h:02d}:{m:02d}" for h in range(18, 22) for m in (0, 30))  # 18:00 … 21:30
TABLES = {2: 3, 4: 3}  # seats per table -> tables of that size in every time slot
BOOKING_DAYS = 14  # today and the 13 days after it
MAX_PEOPLE = max(TABLES)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS slots (
    slot_id TEXT PRIMARY KEY,
    day TEXT NOT NULL,
    time TEXT NOT NULL,
    seats INTEGER NOT NULL,
    tables INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS slots_day ON slots (day);
CREATE TABLE IF NOT EXISTS reservations (
    reservation_id TEXT PRIMARY KEY,
    slot_id TEXT NOT NULL REFERENCES slots (slot_id),
    name TEXT NOT NULL,
    people INTEGER NOT NULL,
    phone TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_slot ON reservations (slot_id, status);
"""


class PartyTooLarge(Exception):
    """More people than the largest table seats: a business refusal, said to the caller as it is."""


class SlotTaken(Exception):
    """No table of that size is left at that time."""


def parse_time(text: str) -> str:
    return booking_db.parse_time(text, "19:30")


_minutes = booking_db.minutes


@dataclass(frozen=True)
class _Slot:
    slot_id: str
    day: str
    time: str
    seats: int
    tables: int


class Store(booking_db.BookingStore):
    booking_days = BOOKING_DAYS
    window_sentence = "bookings are open up to {last} ({days} days ahead)"

    def __init__(self, path: str, clock: Callable[[], datetime] = datetime.now) -> None:
        super().__init__(path, _SCHEMA, clock)
        self._seeded_for: date | None = None

    def _ensure_seeded(self) -> None:
        """Slots for the booking window; re-run when the date moves on (a server left running)."""
        today = self.today()
        if self._seeded_for == today:
            return
        rows = [(f"{day:%Y%m%d}-{hhmm.replace(':', '')}-t{seats}", day.isoformat(), hhmm, seats, count)
                for day in (today + timedelta(days=n) for n in range(BOOKING_DAYS))
                for hhmm in OPENING_TIMES for seats, count in TABLES.items()]
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR IGNORE INTO slots VALUES (?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._seeded_for = today

    def _is_past(self, day: str, hhmm: str) -> bool:
        return datetime.fromisoformat(f"{day}T{hhmm}") <= self._clock()

    # -- queries ----------------------------------------------------------------------------------

    def find_slots(self, day_text: str, people: int, time_text: str | None, limit: int = 4) -> dict[str, Any]:
        _check_people(people)
        day = self.booking_day(day_text)
        wanted = _minutes(parse_time(time_text)) if time_text else None
        with self._lock:
            self._ensure_seeded()
            rows = self._db.execute(
                "SELECT s.slot_id, s.day, s.time, s.seats, s.tables - COUNT(r.reservation_id) AS free"
                " FROM slots s LEFT JOIN reservations r ON r.slot_id = s.slot_id AND r.status = 'confirmed'"
                " WHERE s.day = ? AND s.seats >= ? GROUP BY s.slot_id HAVING free > 0"
                " ORDER BY s.time, s.seats", (day.isoformat(), people)).fetchall()
        best: dict[str, sqlite3.Row] = {}
        for row in rows:  # the smallest free table that fits, per time
            if row["time"] not in best and not self._is_past(row["day"], row["time"]):
                best[row["time"]] = row
        if wanted is not None:  # nearest first; on a tie the earlier time
            order = sorted(best, key=lambda t: (abs(_minutes(t) - wanted), _minutes(t)))
        else:
            order = sorted(best, key=_minutes)
        slots = [_slot_view(best[t]) for t in order[:limit]]
        result: dict[str, Any] = {"slots": slots}
        if not slots:
            result["note"] = f"no free table for {people} on {day.isoformat()}"
        return result

    def create(self, slot_id: str, name: str, people: int, phone: str, key: str) -> dict[str, Any]:
        _check_people(people)
        if not name.strip():
            raise InvalidRequest("name is empty: ask for the name the booking should be under")
        with self._lock, self._transaction():
            if key and (done := self._by_key(key)) is not None:
                return done  # a retry of a booking that already went through
            slot = self._slot(slot_id)
            if people > slot.seats:
                raise InvalidRequest(f"slot {slot_id} is a table for {slot.seats}; find a slot for {people}")
            if self._is_past(slot.day, slot.time):
                raise InvalidRequest(f"slot {slot_id} is in the past")
            taken = self._db.execute("SELECT COUNT(*) FROM reservations WHERE slot_id = ? AND status = "
                                     "'confirmed'", (slot_id,)).fetchone()[0]
            if taken >= slot.tables:
                raise SlotTaken(slot_id)
            reservation_id = "R" + secrets.token_hex(4).upper()
            self._db.execute(
                "INSERT INTO reservations VALUES (?, ?, ?, ?, ?, 'confirmed', ?, ?)",
                (reservation_id, slot_id, name.strip(), people, phone.strip(), key or None,
                 self._clock().isoformat(timespec="seconds")))
            return self._reservation(reservation_id)

    def get(self, reservation_id: str, name: str) -> dict[str, Any]:
        if not reservation_id.strip() and not name.strip():
            raise InvalidRequest("give a reservation_id or a name")
        where, params = [], []
        if reservation_id.strip():
            where.append("r.reservation_id = ?")
            params.append(reservation_id.strip().upper())
        if name.strip():
            where.append("r.name = ? COLLATE NOCASE")
            params.append(name.strip())
        with self._lock:
            rows = self._db.execute(f"{_RESERVATION_SELECT} WHERE {' AND '.join(where)}"
                                    " ORDER BY s.day, s.time LIMIT 10", params).fetchall()
        return {"reservations": [_reservation_view(row) for row in rows]}

    def cancel(self, reservation_id: str) -> dict[str, Any]:
        reservation_id = reservation_id.strip().upper()
        with self._lock, self._transaction():
            updated = self._db.execute(
                "UPDATE reservations SET status = 'cancelled' WHERE reservation_id = ?", (reservation_id,)
            ).rowcount
            if not updated:
                raise InvalidRequest(f"no reservation {reservation_id!r}")
            return self._reservation(reservation_id)

    # -- helpers ----------------------------------------------------------------------------------

    def _transaction(self) -> contextlib.AbstractContextManager[None]:
        return transaction(self._db)

    def _slot(self, slot_id: str) -> _Slot:
        row = self._db.execute("SELECT * FROM slots WHERE slot_id = ?", (slot_id,)).fetchone()
        if row is None:
            raise InvalidRequest(f"unknown slot_id {slot_id!r}: take one from find_slots")
        return _Slot(row["slot_id"], row["day"], row["time"], row["seats"], row["tables"])

    def _by_key(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute(f"{_RESERVATION_SELECT} WHERE r.idempotency_key = ?", (key,)).fetchone()
        return None if row is None else _reservation_view(row)

    def _reservation(self, reservation_id: str) -> dict[str, Any]:
        row = self._db.execute(f"{_RESERVATION_SELECT} WHERE r.reservation_id = ?",
                               (reservation_id,)).fetchone()
        return _reservation_view(row)


# The phone column is deliberately not selected: nothing the model can reach returns it.
_RESERVATION_SELECT = ("SELECT r.reservation_id, s.day, s.time, r.name, r.people, r.status"
                       " FROM reservations r JOIN slots s ON s.slot_id = r.slot_id")


def _check_people(people: int) -> None:
    if people < 1:
        raise InvalidRequest("people must be at least 1")
    if people > MAX_PEOPLE:
        raise PartyTooLarge(f"our largest table seats {MAX_PEOPLE} people, so we cannot book a table "
                            f"for {people}")


def _weekday(day: str) -> str:
    return date.fromisoformat(day).strftime("%A")


def _slot_view(row: sqlite3.Row) -> dict[str, Any]:
    return {"slot_id": row["slot_id"], "day": row["day"], "weekday": _weekday(row["day"]),
            "time": row["time"], "seats": row["seats"]}


def _reservation_view(row: sqlite3.Row) -> dict[str, Any]:
    return {"reservation_id": row["reservation_id"], "day": row["day"], "weekday": _weekday(row["day"]),
            "time": row["time"], "name": row["name"], "people": row["people"], "status": row["status"]}
