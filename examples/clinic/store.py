"""The clinic's appointment book in SQLite.

Openings are not stored: the schedule (weekdays, 09:00-12:00 and
14:00-17:00, 20-minute appointments, per clinician) generates them, and an
opening is free while no confirmed appointment holds its id. A partial unique
index on ``appointments (opening_id) WHERE status = 'confirmed'`` makes a
double booking impossible even across processes; writes also take
``BEGIN IMMEDIATE``. The calls are blocking (stdlib sqlite3): the server runs
them in a thread, behind one lock on one connection (which also makes
``:memory:`` work).

Phone numbers and dates of birth are stored to identify and reach the
patient, and never returned; neither is the reason for the visit (health
data: the caller already knows it).
"""

from __future__ import annotations

import re
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from examples import booking_db
from examples.booking_db import WEEKDAYS, InvalidRequest, transaction

__all__ = ["WEEKDAYS", "InvalidRequest", "NotAFullName", "OpeningTaken", "Store", "parse_day", "parse_time"]

CLINICIANS = {"patel": "Dr. Patel", "kim": "Dr. Kim"}  # id -> the name callers use
SESSIONS = (("09:00", "12:00"), ("14:00", "17:00"))  # morning and afternoon, end exclusive
LENGTH_MIN = 20
BOOKING_DAYS = 21  # today and the 20 days after it
MAX_LIMIT = 4
MAX_TEXT = 200  # names and reasons: a sentence, not a document

_SCHEMA = """
CREATE TABLE IF NOT EXISTS appointments (
    appointment_id TEXT PRIMARY KEY,
    opening_id TEXT NOT NULL,
    date TEXT NOT NULL,
    start TEXT NOT NULL,
    clinician TEXT NOT NULL,
    patient_name TEXT NOT NULL,
    reason TEXT NOT NULL,
    date_of_birth TEXT NOT NULL DEFAULT '',
    phone TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS appointments_held ON appointments (opening_id) WHERE status = 'confirmed';
CREATE INDEX IF NOT EXISTS appointments_date ON appointments (date, status);
CREATE INDEX IF NOT EXISTS appointments_patient ON appointments (patient_name COLLATE NOCASE);
"""

# Only what a caller may hear back: no phone, no date of birth, no reason.
_APPOINTMENT_SELECT = ("SELECT appointment_id, date, start, clinician, patient_name, status"
                       " FROM appointments")


class OpeningTaken(Exception):
    """Someone else holds that opening."""


class NotAFullName(Exception):
    """A patient name of one word: the clinic files patients by first and last name."""


@dataclass(frozen=True)
class Opening:
    date: date
    start: str  # HH:MM
    clinician: str  # the key of CLINICIANS

    @property
    def opening_id(self) -> str:
        return f"{self.date:%Y%m%d}-{self.start.replace(':', '')}-{self.clinician}"

    def view(self) -> dict[str, Any]:
        return {"opening_id": self.opening_id, "date": self.date.isoformat(),
                "weekday": self.date.strftime("%A"), "start": self.start,
                "clinician": CLINICIANS[self.clinician]}


_minutes = booking_db.minutes


START_TIMES = tuple(booking_db.hhmm(m) for first, end in SESSIONS
                    for m in range(_minutes(first), _minutes(end), LENGTH_MIN))


def parse_day(text: str, today: date) -> date:
    return booking_db.parse_day(text, today, "date")


def parse_time(text: str) -> str:
    return booking_db.parse_time(text, "14:30")


def parse_clinician(text: str) -> str | None:
    """'Dr. Patel', 'doctor patel', 'Patel' -> 'patel'; empty -> None (any clinician)."""
    word = re.sub(r"^(dr\.?|doctor)\s+", "", text.strip().lower()).strip()
    if not word:
        return None
    if word not in CLINICIANS:
        known = ", ".join(CLINICIANS.values())
        raise InvalidRequest(f"no clinician {text!r} here; the clinicians are {known}")
    return word


def _text(value: str, what: str) -> str:
    return booking_db.clean_text(value, what, MAX_TEXT)


def _birth_date(text: str, today: date) -> str:
    if not text.strip():
        return ""
    try:
        born = date.fromisoformat(text.strip())
    except ValueError:
        raise InvalidRequest(f"date_of_birth {text!r}: give it as YYYY-MM-DD") from None
    if born > today:
        raise InvalidRequest("date_of_birth is in the future")
    return born.isoformat()


class Store(booking_db.BookingStore):
    booking_days = BOOKING_DAYS
    day_field = "date"
    window_sentence = "appointments can be booked up to {last} ({days} days ahead)"

    def __init__(self, path: str, clock: Callable[[], datetime] = datetime.now) -> None:
        super().__init__(path, _SCHEMA, clock)

    def _is_past(self, opening: Opening) -> bool:
        return datetime.fromisoformat(f"{opening.date.isoformat()}T{opening.start}") <= self._clock()

    def opening(self, opening_id: str) -> Opening:
        """The opening an id names, checked against the schedule and the booking window."""
        match = re.fullmatch(r"(\d{8})-(\d{4})-([a-z]+)", opening_id.strip().lower())
        unknown = InvalidRequest(f"unknown opening_id {opening_id!r}: take one from list_openings")
        if not match or match[3] not in CLINICIANS:
            raise unknown
        try:
            day = datetime.strptime(match[1], "%Y%m%d").date()
        except ValueError:
            raise unknown from None
        start = f"{match[2][:2]}:{match[2][2:]}"
        if day.weekday() >= 5 or start not in START_TIMES:
            raise unknown
        opening = Opening(self.booking_day(day.isoformat()), start, match[3])
        if self._is_past(opening):
            raise InvalidRequest(f"opening {opening_id} is in the past")
        return opening

    # -- queries ----------------------------------------------------------------------------------

    def list_openings(self, day_text: str, clinician_text: str = "", after: str | None = None,
                      limit: int = MAX_LIMIT) -> dict[str, Any]:
        day = self.booking_day(day_text)
        clinician = parse_clinician(clinician_text)
        wanted = _minutes(parse_time(after)) if after else None
        if day.weekday() >= 5:
            return {"openings": [], "note": f"{day:%A} {day.isoformat()}: the clinic is closed at "
                                            "weekends; it is open Monday to Friday"}
        with self._lock:
            held = {row[0] for row in self._db.execute(
                "SELECT opening_id FROM appointments WHERE date = ? AND status = 'confirmed'",
                (day.isoformat(),))}
        doctors = [clinician] if clinician else list(CLINICIANS)
        free = [o for start in START_TIMES for o in (Opening(day, start, d) for d in doctors)
                if o.opening_id not in held and not self._is_past(o)]
        if wanted is not None:  # at or after the wished time first, nearest first; then the ones before
            free.sort(key=lambda o: (_minutes(o.start) < wanted, abs(_minutes(o.start) - wanted)))
        result: dict[str, Any] = {"openings": [o.view() for o in free[:limit]]}
        if not free:
            who = CLINICIANS[clinician] if clinician else "any clinician"
            result["note"] = f"no free opening with {who} on {day.isoformat()}"
        return result

    def book(self, opening_id: str, patient_name: str, reason: str, date_of_birth: str = "",
             phone: str = "", key: str = "") -> dict[str, Any]:
        name = _text(patient_name, "patient_name")
        why = _text(reason, "reason")
        born = _birth_date(date_of_birth, self.today())
        with self._lock, transaction(self._db):
            if key and (done := self._by_key(key)) is not None:
                return done  # a retry of a booking that already went through
            opening = self.opening(opening_id)
            if self._held(opening.opening_id):
                raise OpeningTaken(opening.opening_id)
            if len(name.split()) < 2:
                raise NotAFullName(name)
            appointment_id = "APT-" + secrets.token_hex(4).upper()
            self._db.execute(
                "INSERT INTO appointments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'confirmed', ?, ?)",
                (appointment_id, opening.opening_id, opening.date.isoformat(), opening.start,
                 CLINICIANS[opening.clinician], name, why, born, phone.strip(), key or None,
                 self._clock().isoformat(timespec="seconds")))
            return self._appointment(appointment_id)

    def find(self, patient_name: str) -> dict[str, Any]:
        name = _text(patient_name, "patient_name")
        with self._lock:
            rows = self._db.execute(f"{_APPOINTMENT_SELECT} WHERE patient_name = ? COLLATE NOCASE"
                                    " AND date >= ? ORDER BY date, start LIMIT 10",
                                    (name, self.today().isoformat())).fetchall()
        return {"appointments": [_view(row) for row in rows]}

    def cancel(self, appointment_id: str) -> dict[str, Any]:
        appointment_id = appointment_id.strip().upper()
        with self._lock, transaction(self._db):
            updated = self._db.execute(
                "UPDATE appointments SET status = 'cancelled' WHERE appointment_id = ?", (appointment_id,)
            ).rowcount
            if not updated:
                raise InvalidRequest(f"no appointment {appointment_id!r}; find_appointments lists them")
            return self._appointment(appointment_id)

    # -- helpers ----------------------------------------------------------------------------------

    def _held(self, opening_id: str) -> bool:
        return self._db.execute("SELECT 1 FROM appointments WHERE opening_id = ? AND status = 'confirmed'",
                                (opening_id,)).fetchone() is not None

    def _by_key(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute(f"{_APPOINTMENT_SELECT} WHERE idempotency_key = ?", (key,)).fetchone()
        return None if row is None else _view(row)

    def _appointment(self, appointment_id: str) -> dict[str, Any]:
        query = f"{_APPOINTMENT_SELECT} WHERE appointment_id = ?"
        return _view(self._db.execute(query, (appointment_id,)).fetchone())


def _view(row: sqlite3.Row) -> dict[str, Any]:
    return {"appointment_id": row["appointment_id"], "date": row["date"],
            "weekday": date.fromisoformat(row["date"]).strftime("%A"), "start": row["start"],
            "clinician": row["clinician"], "patient_name": row["patient_name"], "status": row["status"]}
