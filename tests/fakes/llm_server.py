"""``python -m tests.fakes.llm_server``: the scripted LLM (tests/fakes/fake_llm.py) in a process of
its own, for benchmarks. The guard allows; every question gets the same two-sentence reply, one
word per streamed delta (as a real server streams tokens). Prints ``READY fake-llm http=PORT``."""

from __future__ import annotations

import os
import threading

from tests.fakes.fake_llm import FakeLLM, is_guard

REPLY = os.environ.get("FAKE_LLM_REPLY", "Sure, a table for two. Shall I book it for you?")


def main() -> None:
    llm = FakeLLM(script=lambda body: "ALLOW" if is_guard(body) else REPLY, chunk_words=1).start()
    print(f"READY fake-llm http={llm.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
