"""bench-gateway's bystander: how late a process woken on this machine ran, per measured window."""

from __future__ import annotations

import asyncio
import signal
import time

from bench.gateway_stalls import StallMeter


def test_a_window_counts_only_the_late_wake_ups_inside_it():
    meter = StallMeter()
    meter._late = [(9.9, 30.0), (10.0, 1.5), (10.5, 2.5), (11.0, 12.0), (12.0, 3.0), (12.1, 50.0)]

    assert meter.window(10.0, 12.0) == {"over_2ms": 3, "over_10ms": 1, "max_ms": 12.0}
    assert meter.window(13.0, 14.0) == {"over_2ms": 0, "over_10ms": 0, "max_ms": 0.0}


async def test_a_wake_up_held_from_the_bystander_is_reported_and_it_ends_with_the_run():
    meter = StallMeter()
    await meter.start()  # its first line: it sleeps from now on
    try:
        started = time.monotonic()
        # A CPU held from it, as the host or a busy core would: stopped outright for 60 ms, its
        # next wake-up comes at least ~58 ms late (it sleeps 2 ms at a time). A stop that lands
        # between two sleeps (or before the first) holds nothing late: up to three tries.
        for _ in range(3):
            await asyncio.sleep(0.2)
            meter._proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(0.06)
            meter._proc.send_signal(signal.SIGCONT)
            await asyncio.sleep(0.5)  # it reports within a wake-up
            if meter.window(started, time.monotonic())["over_10ms"]:
                break
        window = meter.window(started, time.monotonic())
    finally:
        await meter.stop()

    assert window["over_10ms"] >= 1 and window["max_ms"] >= 40
    assert meter._proc.returncode is not None  # stopped with the run, not left behind
