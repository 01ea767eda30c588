"""The background job of the first ``make run``: llama.cpp built for this CPU
(``scripts/build-llama-server.sh``), then the packaged model re-laid for its kernels
(``localllm.model_path``), both under ``localllm.build_lock`` and at the lowest priority.

Holding the one lock from the build to the end of the derivation is what lets any number of
``make run`` come and go meanwhile: a start that finds the lock held serves what is complete
and verified (the prebuilt server, the packaged model) and never writes beside this job. A
second job finds the lock held and exits at once. ``python -m voicebot.native_build``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from voicebot import localllm
from voicebot.devstack import ROOT


def main() -> int:
    os.nice(19)  # the stack keeps its cores; this only uses what it leaves
    with localllm.build_lock() as held:
        if not held:
            print("==> another build holds the lock; nothing to do", flush=True)
            return 0
        started = time.monotonic()
        build = subprocess.run(["bash", "scripts/build-llama-server.sh"], cwd=ROOT, check=False)
        if build.returncode != 0:
            print(f"==> the build failed (exit {build.returncode}); the prebuilt server stays in use",
                  flush=True)
            return build.returncode
        print(f"==> serving model: {localllm.model_path()}", flush=True)
        print(f"==> done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
