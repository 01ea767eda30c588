"""How full this gateway is: its session cap, its event loop's lag, STT refusals lately.

Beyond ``GATEWAY_MAX_SESSIONS``, or while the event loop runs late by more than
``GATEWAY_MAX_LOOP_LAG_MS`` (the process gets less CPU than its calls need: every call's
audio would come late), a new call is refused at once with a clear reason (error
``overloaded``, close 1013 "try again later") instead of every call getting slower; /readyz
reports these signals so a load balancer sends new calls to another replica.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from gateway.metrics import ACTIVE_SESSIONS, LOOP_LAG, SESSION_REFUSALS


class LoopLag:
    """How late the event loop wakes a 50 ms sleep: the queueing delay every callback sees."""

    def __init__(self, interval_s: float = 0.05, window: int = 40) -> None:
        self.interval_s = interval_s
        self._lags: deque[float] = deque(maxlen=window)  # the last ~2 s

    async def run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, time.perf_counter() - start - self.interval_s)
            self._lags.append(lag)
            LOOP_LAG.observe(lag)

    def recent_ms(self) -> float:
        """The second-worst lag of the window: one late wake-up is not an overload."""
        if len(self._lags) < 2:
            return 0.0
        return sorted(self._lags)[-2] * 1000


class Capacity:
    def __init__(self, max_sessions: int, max_loop_lag_ms: float = 0.0, lag: LoopLag | None = None,
                 stt_refusal_window_s: float = 10.0) -> None:
        self.max_sessions = max_sessions
        self.max_loop_lag_ms = max_loop_lag_ms
        self.lag = lag
        self.window_s = stt_refusal_window_s
        self.active = 0
        self._stt_refused_at: float | None = None

    def _loop_ok(self) -> bool:
        return not (self.max_loop_lag_ms and self.lag) or self.lag.recent_ms() <= self.max_loop_lag_ms

    def open(self) -> bool:
        """Take a session slot; False (and counted) when the gateway is full."""
        if (self.max_sessions and self.active >= self.max_sessions) or not self._loop_ok():
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
                "loop_lag": self._loop_ok(), "stt_capacity": not refused}
