"""How full this gateway is: its own session cap, and whether STT refused streams lately.

Beyond ``GATEWAY_MAX_SESSIONS`` a new call is refused at once with a clear reason (error
``overloaded``, close 1013 "try again later") instead of every call getting slower; /readyz
reports both signals so a load balancer sends new calls to another replica.
"""

from __future__ import annotations

import time

from gateway.metrics import ACTIVE_SESSIONS, SESSION_REFUSALS


class Capacity:
    def __init__(self, max_sessions: int, stt_refusal_window_s: float = 10.0) -> None:
        self.max_sessions = max_sessions
        self.window_s = stt_refusal_window_s
        self.active = 0
        self._stt_refused_at: float | None = None

    def open(self) -> bool:
        """Take a session slot; False (and counted) when the gateway is full."""
        if self.max_sessions and self.active >= self.max_sessions:
            SESSION_REFUSALS.inc()
            return False
        self.active += 1
        ACTIVE_SESSIONS.inc()
        return True

    def close(self) -> None:
        self.active -= 1
        ACTIVE_SESSIONS.dec()

    def stt_refused(self) -> None:
        self._stt_refused_at = time.monotonic()

    def checks(self) -> dict[str, bool]:
        """True = room for more: sessions below the cap; no STT refusal within the window."""
        refused = self._stt_refused_at is not None and time.monotonic() - self._stt_refused_at < self.window_s
        return {"sessions": not self.max_sessions or self.active < self.max_sessions,
                "stt_capacity": not refused}
