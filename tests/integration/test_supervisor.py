"""make run's supervision, with stand-in children (tests/fakes/ready_child.py): a process killed by
pid comes back on its port with backoff while the others keep running, and closing the stack
stops everything, also a restart that is waiting."""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import LOG_ROOT
from voicebot.devstack import Backoff, Proc, Stack, Supervisor

pytestmark = pytest.mark.integration

CHILD = "tests.fakes.ready_child"


def pid_on(port: int) -> int | None:
    """The pid the child on ``port`` answers with, or None when nothing listens."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            return int(conn.makefile().readline())
    except (OSError, ValueError):
        return None


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def start_child(stack: Stack, name: str, **env: str) -> Proc:
    return stack.start_service(name, CHILD, {"FAKE_PORT": "0", **env}, timeout=30, prefix="FAKE")


@contextmanager
def supervised(stack: Stack, supervisor: Supervisor) -> Iterator[Supervisor]:
    stopped = threading.Event()
    loop = threading.Thread(target=supervisor.run, args=(stopped, 0.05), daemon=True)
    loop.start()
    try:
        yield supervisor
    finally:
        stopped.set()
        loop.join(5)
        supervisor.stop()
        stack.close()


def notes(supervisor: Supervisor, name: str, word: str) -> list[str]:
    return [what for _t, who, what in supervisor.events if who == name and what.startswith(word)]


def test_backoff_doubles_up_to_its_cap():
    backoff = Backoff(initial_s=0.5, max_s=4.0)
    assert [backoff.delay(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_killed_service_comes_back_on_its_port_while_the_others_keep_serving(tmp_path):
    stack = Stack(tmp_path, quiet=True)
    a, b = start_child(stack, "a"), start_child(stack, "b")
    port_a, port_b = a.ready["http"], b.ready["http"]
    pid_a, pid_b = a.popen.pid, b.popen.pid
    assert (pid_on(port_a), pid_on(port_b)) == (pid_a, pid_b)

    with supervised(stack, Supervisor(stack, Backoff(0.2, 2.0))) as supervisor:
        os.kill(pid_a, signal.SIGKILL)
        # Same port (it was 0, a free one: the restart pins it), a new process.
        wait_for(lambda: pid_on(port_a) not in (None, pid_a), 20, "a answers again from a new pid")
        assert pid_on(port_b) == pid_b  # b was never touched
        assert b.popen.poll() is None
        [exited] = notes(supervisor, "a", "exited")
        assert "status -9" in exited and "restarting in 0.2 s (attempt 1)" in exited
        wait_for(lambda: notes(supervisor, "a", "restarted"), 5, "the restart is logged")
        assert not notes(supervisor, "b", "")
        log = (tmp_path / "supervisor.log").read_text()
        assert re.search(r"a exited .*\n.*a restarted \(pid \d+", log)
        [new_a] = [p for p in stack.procs if p.name == "a"]
        assert new_a.popen.pid == pid_on(port_a) and len(stack.procs) == 2


def test_a_service_that_keeps_crashing_waits_longer_each_time(tmp_path):
    stack = Stack(tmp_path, quiet=True)
    start_child(stack, "crashy", FAKE_EXIT_AFTER_S="0.2")
    with supervised(stack, Supervisor(stack, Backoff(0.2, 10.0), stable_s=60)) as supervisor:
        wait_for(lambda: len(notes(supervisor, "crashy", "exited")) >= 3, 30, "three crashes")
        delays = [float(re.search(r"restarting in ([\d.]+) s", n)[1])
                  for n in notes(supervisor, "crashy", "exited")[:3]]
        assert delays == [0.2, 0.4, 0.8]
        # Each restart really waited its delay: a lower bound, which load cannot break.
        times = {what: t for t, who, what in supervisor.events if who == "crashy"}
        exits = sorted(t for what, t in times.items() if what.startswith("exited"))
        restarts = sorted(t for what, t in times.items() if what.startswith("restarted"))
        for delay, exited, restarted in zip(delays, exits, restarts, strict=False):
            assert restarted - exited >= delay


def test_a_service_that_ran_long_enough_restarts_without_waiting_longer(tmp_path):
    stack = Stack(tmp_path, quiet=True)
    # Each run lasts 2 s against the 0.5 s that counts as stable: a margin for a restart whose
    # READY line is read late on a loaded machine (it must not count as a short run).
    start_child(stack, "steady", FAKE_EXIT_AFTER_S="2.0")
    with supervised(stack, Supervisor(stack, Backoff(0.1, 10.0), stable_s=0.5)) as supervisor:
        wait_for(lambda: len(notes(supervisor, "steady", "exited")) >= 3, 30, "three exits")
        assert all("restarting in 0.1 s (attempt 1)" in n for n in notes(supervisor, "steady", "exited")[:3])


def test_close_stops_everything_and_a_waiting_restart_never_happens(tmp_path):
    stack = Stack(tmp_path, quiet=True)
    a, b = start_child(stack, "a"), start_child(stack, "b")
    port_a, port_b = a.ready["http"], b.ready["http"]
    supervisor = Supervisor(stack, Backoff(3.0, 3.0))
    with supervised(stack, supervisor):
        os.kill(a.popen.pid, signal.SIGKILL)
        wait_for(lambda: notes(supervisor, "a", "exited"), 10, "the exit is noticed")
    # Leaving `supervised` stopped the supervisor and closed the stack, inside the 3 s delay.
    assert b.popen.poll() is not None and pid_on(port_b) is None
    time.sleep(3.5)
    assert pid_on(port_a) is None and not notes(supervisor, "a", "restarted") and stack.procs == []


def test_logs_of_a_restarted_service_are_kept(tmp_path):
    stack = Stack(LOG_ROOT / "supervisor", quiet=True)
    proc = start_child(stack, "logged")
    proc.log_path.write_text("the crash trace\n")
    with supervised(stack, Supervisor(stack, Backoff(0.1, 1.0))) as supervisor:
        os.kill(proc.popen.pid, signal.SIGKILL)
        wait_for(lambda: notes(supervisor, "logged", "restarted"), 20, "restarted")
        assert "the crash trace" in proc.log_path.read_text()  # appended to, not truncated
