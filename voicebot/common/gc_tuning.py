"""Python's cyclic garbage collector, set for services that answer in milliseconds.

The collector stops the event loop while it runs, and a full collection walks every object the
process holds: with Python's defaults, a gateway carrying a few hundred real-time sessions runs
frequent collections, the full ones long enough to be heard. Each is a stall for every call on
the process, and a burst of late frames after it (``make bench-gateway``'s ``python-gc``
variant compares the two side by side).

``settle(configured())``, called once a service has started, does what long-running Python
servers do:

- collect, then **freeze** what start-up made (modules, models, settings, the gRPC and
  OpenTelemetry machinery): none of it ever becomes garbage, and no later collection walks it;
- raise the **thresholds**: a young collection after 5,000 new container objects (not 700), a
  middle one every 20 of those, a full one every 100 middle ones (and only when the survivors
  have grown by a quarter, Python's own rule). Garbage cycles are still collected, later and in
  fewer, shorter pauses; the price is some memory.

``VOICEBOT_GC`` sets it for every service: three thresholds ("5000,20,100", the default), or
"python" to keep Python's defaults and freeze nothing (to compare).

Every collection is timed from then on, either way: ``voicebot_gc_pause_seconds{generation}``
is how long each one stopped the process. Objects made per audio frame or left in a cycle per
turn make collections frequent and long, and a turn that meets one waits it out.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from voicebot.common.config import SharedSettings
from voicebot.common.metrics import GC_PAUSES

log = logging.getLogger("voicebot.gc")


class PauseTimer:
    """A ``gc.callbacks`` entry: each collection's time, by generation, into ``GC_PAUSES``."""

    def __init__(self) -> None:
        self._started = 0.0
        self._by_generation = [GC_PAUSES.labels(str(generation)) for generation in range(3)]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._by_generation[info["generation"]].observe(time.perf_counter() - self._started)


_timer = PauseTimer()


def time_pauses() -> None:
    """Time every collection of this process from now on (once, however often it is called)."""
    if _timer not in gc.callbacks:
        gc.callbacks.append(_timer)


PYTHON_DEFAULTS = "python"


def parse(setting: str) -> tuple[int, int, int] | None:
    """None for "python"; else the three thresholds. A clear error for anything else."""
    if setting.strip().lower() == PYTHON_DEFAULTS:
        return None
    try:
        thresholds = tuple(int(part) for part in setting.split(","))
    except ValueError:
        thresholds = ()
    if len(thresholds) != 3 or min(thresholds) < 1:
        raise ValueError(f"VOICEBOT_GC={setting!r}: give three positive integers such as "
                         f"'5000,20,100', or '{PYTHON_DEFAULTS}'")
    return thresholds  # type: ignore[return-value]


def configured(setting: str | None = None) -> tuple[int, int, int] | None:
    """What ``setting`` (by default ``VOICEBOT_GC``) asks for. Read it before the service starts
    anything: a setting that is not valid stops it there, with the reason."""
    try:
        return parse(setting if setting is not None else SharedSettings().gc)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def settle(thresholds: tuple[int, int, int] | None) -> None:
    """Once start-up is over: freeze what it made and set ``thresholds`` (None: Python's own);
    either way, time each collection from then on."""
    time_pauses()
    if thresholds is None:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    log.info("gc settled", extra={"frozen_objects": gc.get_freeze_count(), "gc_thresholds": list(thresholds)})
