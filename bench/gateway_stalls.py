"""How long a process woken on this machine waits for a CPU (``make bench-gateway`` prints it
for every measured window).

A turn with instant engines is a chain of processes waking each other: the client, the gateway,
the fake STT, the brain, Redis, the scripted LLM, the fake TTS. Each wake-up waits until a CPU is
free for it: behind whatever else runs on these cores, and behind the host when it does not run
this virtual machine. A bystander process that only sleeps ``PERIOD_S`` at a time and notes how
late each wake-up came shares those waits, so its figures over a window say how busy or slow
the machine was then: a turn p99 that rises with them is the hour's, one that rises without
them is the code's. It costs 1 % of a core (500 wake-ups a second; 0.10 s of CPU in 10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time

PERIOD_S = 0.002
REPORT_MS = 1.0  # wake-ups later than this are reported (none in 3 s on the idle machine)


def _probe() -> None:
    """The child: sleeps and prints each late wake-up as "<monotonic s> <ms late>"; it ends
    when its parent does."""
    parent = os.getppid()
    print("sleeping", flush=True)
    for count in range(sys.maxsize):
        due = time.monotonic() + PERIOD_S
        time.sleep(PERIOD_S)
        woke = time.monotonic()
        if (woke - due) * 1000 > REPORT_MS:
            print(f"{woke:.6f} {(woke - due) * 1000:.3f}", flush=True)
        if count % 500 == 0 and os.getppid() != parent:
            return


class StallMeter:
    """The bystander process and what it reported; ``window`` sums a span of it."""

    def __init__(self) -> None:
        self._late: list[tuple[float, float]] = []  # (monotonic s, ms late), the reported ones
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None

    async def start(self) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.gateway_stalls", stdout=asyncio.subprocess.PIPE)
        await self._proc.stdout.readline()  # it sleeps from now on
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for line in self._proc.stdout:
            at, late = line.split()
            self._late.append((float(at), float(late)))

    def window(self, start: float, end: float) -> dict[str, float]:
        """Wake-ups between ``start`` and ``end`` (``time.monotonic``) that came over 2 and over
        10 ms late, and the latest one's ms (0 when none came over ``REPORT_MS``)."""
        late = [ms for at, ms in self._late if start <= at <= end]
        return {"over_2ms": sum(ms > 2 for ms in late), "over_10ms": sum(ms > 10 for ms in late),
                "max_ms": round(max(late, default=0.0), 1)}

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


if __name__ == "__main__":
    _probe()
