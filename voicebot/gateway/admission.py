"""Who may hold a session, and how fast a session may ask for work: the limits that keep one
caller (or anyone without credentials) from starving the others.

- ``UserSessions``: sessions per user id on this process (``GATEWAY_MAX_SESSIONS_PER_USER``;
  the Twilio user's own cap, ``GATEWAY_TWILIO_MAX_CALLS``), taken before the gateway's slot.
- ``Unauthenticated``: Twilio sockets still waiting for their ``start`` (and its secret); they
  hold no session slot, and only so many may wait at once.
- ``TokenBucket``: a session's typed turns (``GATEWAY_TURN_RATE_PER_S``, ``GATEWAY_TURN_BURST``).
- ``LogBudget``: warnings about bad input, per second across the process.

A bucket is a few lines of arithmetic on a clock the tests can drive. ``limits``' in-memory
storage was not taken: it re-arms a ``threading.Timer`` every 10 ms while it holds entries, a
thread contending for the GIL with the event loop that paces every call's audio.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from voicebot.gateway.metrics import ADMISSION_REFUSALS, LOG_LINES_DROPPED, UNAUTHENTICATED


class TokenBucket:
    """``burst`` tokens, refilled at ``rate_per_s``; ``take`` spends one or says no. rate 0: no limit."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate_per_s, max(1, burst), clock
        self.tokens = float(self.burst)
        self.at = clock()

    def take(self) -> bool:
        if self.rate <= 0:
            return True
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class UserSessions:
    """Open sessions per user id; ``limit_for`` gives a user's cap (0: none)."""

    def __init__(self, per_user: int, overrides: dict[str, int] | None = None) -> None:
        self.per_user = per_user
        self.overrides = overrides or {}
        self.open_by_user: dict[str, int] = {}

    def limit_for(self, user_id: str) -> int:
        return self.overrides.get(user_id, self.per_user)

    def open(self, user_id: str) -> bool:
        """Take one of the user's slots; False (and counted) when the user holds them all."""
        held = self.open_by_user.get(user_id, 0)
        limit = self.limit_for(user_id)
        if limit and held >= limit:
            ADMISSION_REFUSALS.labels("twilio_calls" if user_id in self.overrides else "user_sessions").inc()
            return False
        self.open_by_user[user_id] = held + 1
        return True

    def close(self, user_id: str) -> None:
        held = self.open_by_user.get(user_id, 0) - 1
        if held > 0:
            self.open_by_user[user_id] = held
        else:
            self.open_by_user.pop(user_id, None)


class Unauthenticated:
    """Sockets accepted before their credentials arrived (a Twilio stream's ``start``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waiting = 0

    def enter(self) -> bool:
        if self.limit and self.waiting >= self.limit:
            ADMISSION_REFUSALS.labels("unauthenticated_full").inc()
            return False
        self.waiting += 1
        UNAUTHENTICATED.set(self.waiting)
        return True

    def leave(self) -> None:
        self.waiting -= 1
        UNAUTHENTICATED.set(self.waiting)


class LogBudget:
    """Log lines per second across the process: a flood of bad input is counted, not written."""

    def __init__(self, per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.configure(per_s, clock)

    def configure(self, per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        """``per_s`` lines a second (bursts of as many); 0: no limit."""
        self.bucket = TokenBucket(per_s, max(1, round(per_s)), clock) if per_s > 0 else None

    def allow(self) -> bool:
        if self.bucket is None or self.bucket.take():
            return True
        LOG_LINES_DROPPED.inc()
        return False
