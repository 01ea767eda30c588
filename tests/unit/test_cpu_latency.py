"""Holding the CPUs' wake-up latency: the bound is written as the kernel reads it, held while
inside and let go after, and a host without the device says so instead of a traceback. A
regular file stands in for /dev/cpu_dma_latency (the real one would change this machine)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from bench.cpu_latency import NO_BOUND_US, current_bound_us, held_bound
from bench.gateway import table


def test_the_bound_is_written_as_a_native_int32_and_held_only_while_inside(tmp_path):
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(struct.pack("=i", NO_BOUND_US))
    assert current_bound_us(str(device)) == NO_BOUND_US
    with held_bound(0, str(device)):
        assert current_bound_us(str(device)) == 0
        # The kernel keeps a bound exactly as long as its file is open.
        assert open_on(device) == 1
    assert open_on(device) == 0
    with held_bound(50, str(device)):
        assert current_bound_us(str(device)) == 50
    assert open_on(device) == 0


def open_on(path) -> int:
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(path))


def test_a_host_without_the_device_is_told_so(tmp_path):
    missing = tmp_path / "nothing"
    assert current_bound_us(str(missing)) is None
    with pytest.raises(FileNotFoundError, match="QoS is not available"), held_bound(0, str(missing)):
        pass
    with pytest.raises(ValueError), held_bound(-1, str(missing)):
        pass


def test_the_table_says_when_idle_cpus_were_held_awake():
    def results(idle_poll: bool, bound: int | None) -> dict:
        return {"machine": {"cpu_wakeup_bound_us": bound}, "idle_poll": idle_poll, "variants": {}}

    assert "--idle-poll" in table(results(True, 0))
    assert "within 10 µs by another process" in table(results(False, 10))
    assert "cpu_dma_latency" not in table(results(False, NO_BOUND_US))
    assert "cpu_dma_latency" not in table(results(False, None))
