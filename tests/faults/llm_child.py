"""``python -m tests.faults.llm_child``: the scripted LLM (tests/fakes/fake_llm.py) in a process of
its own, so the fault suite can kill it by pid (an in-process server cannot die mid-stream the way
a crashed one does: its sockets stay open until its thread's loop winds down).

The brain asks a model only for a reading of the caller's words (a request with
``response_format``); the script answers it with JSON and reads the caller's words, so one
process serves every fault case without a control channel: "slowly" holds the first token
``FAULT_LLM_SLOW_S`` (2.5 s: the turn is in flight when something is killed), "briefly"
``FAULT_LLM_BRIEF_S`` (0.6 s), "break" answers HTTP 500, and a name said in lower case after
"under" is read as the name (rules read only a capitalised one, so such words need the model).
Requests of any other kind (the warm-up) get a line of text: "story" makes a long one, "what did
i say" lists the code words of the caller's earlier turns. The guard always allows.
``FAULT_LLM_PORT`` pins the port (0: a free one), so a restart by ``Proc.relaunch`` comes back
where the brain looks. Prints ``READY fault-llm http=PORT``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Any

import uvicorn

from tests.fakes.fake_llm import FakeLLM, is_guard
from voicebot.devstack import free_port

CODE_WORDS = ("pineapple", "lighthouse", "violin")
STORY = ("Once upon a time there was a small restaurant by the sea. Every evening the owner lit "
         "the lanterns along the terrace. Guests came from the village to watch the boats. The cook "
         "made fish soup with fennel and saffron. Nobody ever left before the last boat was home. "
         "And that is the whole story.")


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content") or "").lower() for m in body["messages"] if m["role"] == "user"]


def script(body: dict[str, Any]) -> str | dict[str, Any]:
    if is_guard(body):
        return "ALLOW"
    users = user_texts(body)
    last = users[-1] if users else ""
    if "break" in last:
        raise RuntimeError("scripted failure")  # Starlette answers 500: a server error to retry
    delay = 0.0
    if "slowly" in last:
        delay = float(os.environ.get("FAULT_LLM_SLOW_S", "2.5"))
    elif "briefly" in last:
        delay = float(os.environ.get("FAULT_LLM_BRIEF_S", "0.6"))
    if body.get("response_format"):
        return {"content": json.dumps(reading(last)), "delay_s": delay}
    if "what did i say" in last:
        heard = [w for w in CODE_WORDS if any(w in text for text in users[:-1])]
        return {"content": "You mentioned " + (", ".join(heard) or "nothing") + ".", "delay_s": delay}
    if "story" in last:
        return {"content": STORY, "delay_s": delay}
    return {"content": "Sure, I can help with that. What else?", "delay_s": delay}


def reading(last: str) -> dict[str, Any]:
    """The words read as the brain's schema asks: no task of its own (code's picker names it), and
    the name said after "under", if any."""
    said = last.split("the caller said:")[-1]
    name = re.search(r"\bunder ([a-z]+)", said)
    return {"intent": "other", **({"name": name[1].title()} if name else {})}


def main() -> None:
    llm = FakeLLM(script=script, port=int(os.environ.get("FAULT_LLM_PORT", "0")) or free_port())
    config = uvicorn.Config(llm.app(), host="127.0.0.1", port=llm.port, log_config=None,
                            access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    print(f"READY fault-llm http={llm.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
