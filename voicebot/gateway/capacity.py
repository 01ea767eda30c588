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
from collections.abc import Callable

from voicebot.gateway.metrics import ACTIVE_SESSIONS, LOOP_LAG, SESSION_REFUSALS


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


class CpuUse:
    """This process's CPU (all its threads), in cores, over the last ``window_s``; and per
    session, once enough sessions ran in that window for the process's own baseline not to
    count for much.

    Why not the loop's lag alone: callers arriving in a burst were all admitted while the lag
    was still small, and once the gateway's core was full the backlog grew in the sockets'
    buffers, not in the loop (make bench-gateway --pin at 400 callers with a 30 ms lag limit:
    all 400 admitted, 785 turns with no audio).
    """

    MIN_SESSIONS = 20

    def __init__(self, read: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic, window_s: float = 2.0,
                 interval_s: float = 0.25) -> None:
        self.read, self.clock = read, clock
        self.interval_s = interval_s
        # (when, CPU seconds so far, sessions then)
        self._samples: deque[tuple[float, float, int]] = deque(maxlen=round(window_s / interval_s) + 1)

    def sample(self, sessions: int) -> None:
        self._samples.append((self.clock(), self.read(), sessions))

    async def run(self, sessions: Callable[[], int]) -> None:
        while True:
            self.sample(sessions())
            await asyncio.sleep(self.interval_s)

    def cores(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, cpu0, _), (t1, cpu1, _) = self._samples[0], self._samples[-1]
        return (cpu1 - cpu0) / (t1 - t0) if t1 > t0 else 0.0

    def per_session(self) -> float | None:
        """Cores per session over the window (None below ``MIN_SESSIONS`` on average)."""
        if len(self._samples) < 2:
            return None
        mean = sum(n for _, _, n in list(self._samples)[1:]) / (len(self._samples) - 1)
        return self.cores() / mean if mean >= self.MIN_SESSIONS else None


class Capacity:
    def __init__(self, max_sessions: int, max_loop_lag_ms: float = 0.0, lag: LoopLag | None = None,
                 stt_refusal_window_s: float = 10.0, max_cores: float = 0.0,
                 cpu: CpuUse | None = None) -> None:
        self.max_sessions = max_sessions
        self.max_loop_lag_ms = max_loop_lag_ms
        self.lag = lag
        self.max_cores = max_cores
        self.cpu = cpu
        self.window_s = stt_refusal_window_s
        self.active = 0
        self._stt_refused_at: float | None = None

    def _loop_ok(self) -> bool:
        return not (self.max_loop_lag_ms and self.lag) or self.lag.recent_ms() <= self.max_loop_lag_ms

    def _cpu_ok(self, sessions: int) -> bool:
        """The process uses at most ``max_cores``, and would with ``sessions`` at the current
        cost per session (callers arriving together are counted before their audio costs)."""
        if not (self.max_cores and self.cpu):
            return True
        per_session = self.cpu.per_session()
        return self.cpu.cores() <= self.max_cores and (
            per_session is None or per_session * sessions <= self.max_cores)

    def open(self) -> bool:
        """Take a session slot; False (and counted) when the gateway is full."""
        if ((self.max_sessions and self.active >= self.max_sessions) or not self._loop_ok()
                or not self._cpu_ok(self.active + 1)):
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
                "loop_lag": self._loop_ok(), "cpu": self._cpu_ok(self.active + 1),
                "stt_capacity": not refused}
