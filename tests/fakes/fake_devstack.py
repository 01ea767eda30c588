"""A launcher for tests of make run's exits and restarts: ``voicebot.devstack``'s own run
directory, ``serve`` and ``claim_run_dir`` around small stand-in services (``ready_child``)
instead of the real stack. Its run directory is FAKE_RUN_DIR; FAKE_SERVICES names the
services; FAKE_HOW picks how the start goes:

- ``ok``: every service starts, then it serves until a signal;
- ``slow``: one service starts, then the start waits (a model still loading) for a signal;
- ``fail``: one service starts, then the next one fails to become ready;
- ``crash``: every service starts, then the launcher itself raises (a bug).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from voicebot.devstack import Stack, StartupError, claim_run_dir, serve
from voicebot.rundir import AlreadyRunning, RunDir

CHILD = [sys.executable, "-m", "tests.fakes.ready_child"]


def main() -> int:
    run_dir = RunDir(Path(os.environ["FAKE_RUN_DIR"]))
    stack = Stack(run_dir.root / "logs", run_dir=run_dir)
    how = os.environ.get("FAKE_HOW", "ok")
    names = os.environ.get("FAKE_SERVICES", "alpha,beta").split(",")
    try:
        claim_run_dir(run_dir, stack)
    except AlreadyRunning as exc:
        print(f"make run refused: {exc}", file=sys.stderr, flush=True)
        return 1

    def start() -> None:
        for index, name in enumerate(names):
            if index == 1 and how == "slow":
                print("STARTING", flush=True)
                time.sleep(600)
            if index == 1 and how == "fail":
                stack.start_service(name, "tests.fakes.no_such_service", {}, timeout=60)
                raise StartupError("unreachable: a service that cannot start is never ready")
            proc = stack.start_service(name, "tests.fakes.ready_child", {}, timeout=60, prefix="FAKE")
            print(f"STARTED {name} {proc.popen.pid}", flush=True)

    def ready() -> None:
        print("voicebot is running", flush=True)
        if how == "crash":
            raise RuntimeError("a bug in the launcher")

    try:
        return serve(stack, start, ready, interval_s=0.1)
    finally:
        run_dir.release()


if __name__ == "__main__":
    sys.exit(main())
