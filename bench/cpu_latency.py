"""How fast an idle CPU wakes: Linux's CPU latency QoS (``/dev/cpu_dma_latency``).

Every hop between two of the stack's processes wakes one of them, often on an idle CPU. On a
VM whose idle vCPUs halt (Firecracker, for one, with guest halt polling off), that
wake-up is a round trip through the host: `make bench-gateway` measured the transport floor of
a turn shorter with them held awake. A process that writes a latency bound to the device and keeps it open
holds every CPU to idle states that wake within that bound (0: they poll); closing it lets
them go. It costs power, and on a shared host the CPU time the idle vCPUs spin, so it is a
choice for the host's operator (tuned's ``latency-performance`` profile holds 1 µs), made
here only where asked for.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator

DEVICE = "/dev/cpu_dma_latency"
# What the device reads as while no one holds a bound (PM_QOS_CPU_LATENCY_DEFAULT_VALUE).
NO_BOUND_US = 2_000_000_000


def current_bound_us(path: str = DEVICE) -> int | None:
    """The bound in force now, in µs (``NO_BOUND_US``: none); None where it cannot be read."""
    try:
        with open(path, "rb") as device:
            data = device.read(4)
    except OSError:
        return None
    return struct.unpack("=i", data)[0] if len(data) == 4 else None


@contextlib.contextmanager
def held_bound(max_us: int, path: str = DEVICE) -> Iterator[None]:
    """Idle CPUs wake within ``max_us`` while inside (0: they poll). Raises ``PermissionError``
    or ``FileNotFoundError`` with what is needed when the device cannot be written."""
    if max_us < 0:
        raise ValueError("max_us: 0 or more")
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path} is missing: Linux's CPU latency QoS is not available here") from exc
    except PermissionError as exc:
        raise PermissionError(f"{path} is not writable: holding a wake-up bound needs root") from exc
    try:
        os.write(fd, struct.pack("=i", max_us))
        yield
    finally:
        os.close(fd)  # the kernel drops this bound with its last holder
