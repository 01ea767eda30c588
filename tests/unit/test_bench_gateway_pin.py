"""bench-gateway --pin: the gateway alone on one core, every thread of every other process on the rest."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.gateway import pin_cores

THREADED = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)"


def threads_of(pid: int) -> list[int]:
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_every_thread_of_the_gateway_and_of_the_others_is_pinned_apart():
    cores = sorted(os.sched_getaffinity(0))
    gateway, other = (subprocess.Popen([sys.executable, "-c", THREADED]) for _ in range(2))
    try:
        deadline = time.monotonic() + 10
        while min(len(threads_of(gateway.pid)), len(threads_of(other.pid))) < 2:
            assert time.monotonic() < deadline, "the processes never started their second thread"
            time.sleep(0.02)
        pin_cores(gateway.pid, [other.pid], cores)
        assert {tid: os.sched_getaffinity(tid) for tid in threads_of(gateway.pid)} == {
            tid: {cores[-1]} for tid in threads_of(gateway.pid)}
        assert {tid: os.sched_getaffinity(tid) for tid in threads_of(other.pid)} == {
            tid: set(cores[:-1]) for tid in threads_of(other.pid)}
        assert os.sched_getaffinity(0) == set(cores)  # the caller pins itself only if it asks to
    finally:
        for proc in (gateway, other):
            proc.kill()
            proc.wait()
