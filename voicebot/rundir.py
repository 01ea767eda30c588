"""What ``make run`` keeps under ``.run/`` so that every start works, however the last one ended.

- ``devstack.lock``: held (an ``flock``) by the running launcher for its whole life; the kernel
  releases it however the launcher ends, ``kill -9`` included. A second start finds it held
  and refuses, naming the first one's pid (``devstack.pid``).
- ``pids/NAME.pid``: one per process the launcher started (its pid and the kernel's start
  time of it, so a pid the system handed to another program since is never taken for ours),
  removed when the launcher stops it. What a start finds there is what a crashed launcher left
  running: it is stopped (its whole process group) and started afresh, and the start says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from pathlib import Path
from typing import IO


class AlreadyRunning(RuntimeError):
    """Another launcher holds the run directory."""


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (``/proc/PID/stat`` field 22), None when it is gone
    (or where there is no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return not Path("/proc").is_dir()  # gone meanwhile, or no /proc to ask


class RunDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.pids = root / "pids"
        self._lock: IO[str] | None = None

    def claim(self) -> None:
        """Hold the run directory for this launcher, or raise ``AlreadyRunning``."""
        self.pids.mkdir(parents=True, exist_ok=True)
        handle = (self.root / "devstack.lock").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            pid_file = self.root / "devstack.pid"
            other = pid_file.read_text().strip() if pid_file.exists() else "?"
            raise AlreadyRunning(
                f"another make run (pid {other}) is running from {self.root}; stop it first (Ctrl-C "
                f"in its terminal, or kill {other}), or give this one its own checkout") from None
        self._lock = handle
        (self.root / "devstack.pid").write_text(f"{os.getpid()}\n")

    def release(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                (self.root / "devstack.pid").unlink()
            self._lock.close()  # closing the last descriptor releases the flock
            self._lock = None

    def record(self, name: str, pid: int) -> None:
        self.pids.mkdir(parents=True, exist_ok=True)
        (self.pids / f"{name}.pid").write_text(json.dumps({"pid": pid, "started": process_start_time(pid)}))

    def forget(self, name: str, pid: int) -> None:
        path = self.pids / f"{name}.pid"
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text())["pid"] == pid:
                path.unlink()

    def leftovers(self) -> dict[str, int]:
        """Processes an earlier launcher started that still run: name -> pid."""
        found: dict[str, int] = {}
        for path in sorted(self.pids.glob("*.pid")):
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                continue
            pid = int(entry["pid"])
            if alive(pid) and process_start_time(pid) == entry.get("started"):
                found[path.stem] = pid
            else:
                path.unlink(missing_ok=True)  # gone, or its pid now belongs to another program
        return found

    def stop_leftovers(self, timeout_s: float = 10.0) -> dict[str, int]:
        """Stop what an earlier launcher left running (SIGTERM to each process group, SIGKILL
        after ``timeout_s``); returns what was stopped, name -> pid."""
        found = self.leftovers()
        for pid in found.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while any(alive(pid) for pid in found.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for name, pid in found.items():
            if alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            (self.pids / f"{name}.pid").unlink(missing_ok=True)
        deadline = time.monotonic() + 5.0  # a killed process frees its ports once it is reaped
        while any(alive(pid) for pid in found.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return found
