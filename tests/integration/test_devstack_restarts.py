"""make run survives its own restarts: every way out of the launcher stops what it started; a
start after ``kill -9`` of the launcher stops what that one left and starts afresh, saying so;
two starts at once: the second refuses, naming the first.

The launcher is ``tests/fakes/fake_devstack.py``: make run's own run directory, ``serve`` and
``claim_run_dir`` around small stand-in services, so each test takes seconds, not a model load.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from voicebot.devstack import ROOT
from voicebot.rundir import alive


class Launcher:
    """One fake make run: its output lines collected as they come."""

    def __init__(self, run_dir: Path, how: str = "ok") -> None:
        self.lines: list[str] = []
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.fake_devstack"], cwd=ROOT, text=True,
            env={**os.environ, "FAKE_RUN_DIR": str(run_dir), "FAKE_HOW": how},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.output:
            assert self.popen.poll() is None or time.monotonic() < deadline, self.output
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout_s} s:\n{self.output}")
            time.sleep(0.05)

    def exit_status(self, timeout_s: float = 60) -> int:
        status = self.popen.wait(timeout_s)
        time.sleep(0.1)  # the reader thread takes the last lines
        return status


def children(run_dir: Path) -> dict[str, int]:
    return {path.stem: json.loads(path.read_text())["pid"] for path in (run_dir / "pids").glob("*.pid")}


def all_gone(pids, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(pid) for pid in pids)


@pytest.fixture
def run_dir(tmp_path):
    yield tmp_path / "run"
    for pid in children(tmp_path / "run").values():  # a failed test leaves nothing running
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_start_stops_every_service(run_dir, stop):
    launcher = Launcher(run_dir)
    launcher.wait_for("voicebot is running")
    started = children(run_dir)
    assert sorted(started) == ["alpha", "beta"] and all(alive(pid) for pid in started.values())
    launcher.popen.send_signal(stop)
    assert launcher.exit_status() == 0
    assert all_gone(started.values()), launcher.output
    assert children(run_dir) == {}  # their pid files go with them


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_starting_stops_what_had_started(run_dir, stop):
    launcher = Launcher(run_dir, how="slow")
    launcher.wait_for("STARTING")
    started = children(run_dir)
    assert list(started) == ["alpha"]
    launcher.popen.send_signal(stop)
    assert launcher.exit_status() == 130
    assert "interrupted while starting" in launcher.output
    assert all_gone(started.values()) and children(run_dir) == {}


@pytest.mark.parametrize("how", ["fail", "crash"])
def test_a_failed_start_or_a_crash_stops_what_had_started(run_dir, how):
    launcher = Launcher(run_dir, how=how)
    status = launcher.exit_status(timeout_s=90)
    assert status == 1, launcher.output
    message = "startup failed: beta did not become ready" if how == "fail" else "RuntimeError: a bug"
    assert message in launcher.output
    pids = [int(line.split()[2]) for line in launcher.lines if line.startswith("STARTED ")]
    assert len(pids) == (1 if how == "fail" else 2)
    assert all_gone(pids) and children(run_dir) == {}


def test_a_start_after_kill_9_of_the_launcher_replaces_what_it_left(run_dir):
    first = Launcher(run_dir)
    first.wait_for("voicebot is running")
    left = children(run_dir)
    first.popen.kill()
    first.exit_status()
    assert all(alive(pid) for pid in left.values())  # kill -9: nothing could stop them

    second = Launcher(run_dir)
    second.wait_for("voicebot is running")
    for name, pid in left.items():
        assert f"{name} (pid {pid})" in second.output
    assert "stopped them; starting everything afresh" in second.output
    assert all_gone(left.values())
    now = children(run_dir)
    assert sorted(now) == ["alpha", "beta"] and set(now.values()).isdisjoint(left.values())
    second.popen.send_signal(signal.SIGTERM)
    assert second.exit_status() == 0 and all_gone(now.values())


def test_two_starts_at_once_the_second_refuses_clearly(run_dir):
    first = Launcher(run_dir)
    first.wait_for("voicebot is running")
    running = children(run_dir)
    second = Launcher(run_dir)
    assert second.exit_status() == 1
    assert f"make run refused: another make run (pid {first.popen.pid}) is running" in second.output
    assert children(run_dir) == running and all(alive(pid) for pid in running.values())  # untouched
    first.popen.send_signal(signal.SIGINT)
    assert first.exit_status() == 0 and all_gone(running.values())


def test_a_pid_file_whose_process_is_gone_or_another_programs_is_left_alone(run_dir):
    """A pid file names a process only while the kernel's start time matches: a pid handed to
    another program since is never stopped."""
    from voicebot.rundir import RunDir

    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        rd = RunDir(run_dir)
        rd.claim()
        (rd.pids / "redis.pid").write_text(json.dumps({"pid": stranger.pid, "started": "1"}))
        (rd.pids / "stt.pid").write_text(json.dumps({"pid": 2 ** 22 + 1, "started": "1"}))
        assert rd.stop_leftovers() == {}
        assert stranger.poll() is None and children(run_dir) == {}
        rd.release()
    finally:
        stranger.kill()
        stranger.wait()


def test_a_redis_make_run_did_not_start_must_take_the_password_it_is_given(tmp_path):
    """A Redis left by something else, with a password: a clear message, not the brain's
    AuthenticationError later."""
    from voicebot.devstack import Stack, StartupError, check_redis, free_port

    stack = Stack(tmp_path / "logs", quiet=True)
    port = free_port()
    try:
        stack.start_redis(port, password="its-own")
        with pytest.raises(StartupError, match=r"refuses the password.*VOICEBOT_REDIS_PASSWORD"):
            check_redis(port, None)
        with pytest.raises(StartupError, match="refuses the password"):
            check_redis(port, "another")
        check_redis(port, "its-own")
    finally:
        stack.close()


def test_a_fixed_port_another_program_holds_fails_the_start_by_name():
    import socket

    from voicebot.devstack import StartupError, check_ports_free, free_port

    with socket.create_server(("127.0.0.1", 0)) as held:
        taken = held.getsockname()[1]
        with pytest.raises(StartupError, match=rf"ports in use by another program: stt {taken};.*STT_PORT"):
            check_ports_free({"stt": taken, "brain": free_port(), "gateway": 0})
    check_ports_free({"stt": taken})
