"""``make bench-urgent``: emergencies in callers' own words, and ordinary symptoms, at the clinic.

The stack is what ``make run PROFILE=clinic`` starts (llama.cpp with the packaged model, STT,
TTS, the clinic's MCP server, brain, gateway). ``bench/urgent.yaml`` holds phrasings that are
not in the clinic's profile: emergencies said directly, indirectly and with a booking
attached, and ordinary turns that mention symptoms. Each is one new call, typed
(``input.text``) and, with ``--spoken``, spoken (piper and espeak-ng voices at real-time
pace, through STT). Judged by the reply:

- an emergency is **caught** when the reply starts with one of the profile's urgent sentences;
- an ordinary turn whose reply starts with one is a **false alarm**.

Prints a table (caught per kind, false alarms, reply time p50/p95 at the client) and JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.dialog import Conversation, words
from bench.stats import percentile
from voicebot.brain.business.profile import load_profile
from voicebot.devstack import (
    ROOT,
    Stack,
    free_port,
    redis_url_for,
    start_brain_and_gateway,
    start_local_llm,
    start_mcp_servers,
    start_speech,
)

CASES = ROOT / "bench/urgent.yaml"
TOKEN = "tok-v2v"  # bench.v2v's caller helper speaks with this token


def is_urgent_reply(reply: str, sentences: list[str]) -> bool:
    said = words(reply)
    return any(said.startswith(words(sentence)) for sentence in sentences)


async def typed(ws_url: str, text: str) -> tuple[str, float]:
    async with Conversation(ws_url, TOKEN) as call:
        started = time.perf_counter()
        reply, _ = await call.turn(text)
        return reply, time.perf_counter() - started


async def spoken(ws_url: str, texts: list[str], case: str) -> list[tuple[str, str, float]]:
    from bench.v2v import VOICES, run_case

    turns = await run_case(case, ws_url, texts, per_session=1, voices=VOICES)
    return [(t.reply, t.heard, (t.v2v_ms or 0) / 1000) for t in turns]


def cases(limit: int | None) -> list[tuple[str, str, bool]]:
    """(kind, text, urgent) for every case: each urgent kind, then the ordinary turns."""
    data = yaml.safe_load(CASES.read_text())
    rows = [(kind, text, True) for kind, texts in data["urgent"].items() for text in texts[:limit]]
    return rows + [("ordinary", text, False) for text in data["ordinary"][:limit]]


async def run(ws_url: str, sentences: list[str], limit: int | None,
              with_speech: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    todo = cases(limit)
    for kind, text, urgent in todo:
        reply, seconds = await typed(ws_url, text)
        rows.append(_row("typed", kind, text, urgent, reply, seconds, sentences))
    if with_speech:
        replies = await spoken(ws_url, [text for _, text, _ in todo], "urgent-spoken")
        for (kind, text, urgent), (reply, heard, seconds) in zip(todo, replies, strict=True):
            rows.append(_row("spoken", kind, text, urgent, reply, seconds, sentences, heard))
    return rows


def _row(mode: str, kind: str, text: str, urgent: bool, reply: str, seconds: float,
         sentences: list[str], heard: str = "") -> dict[str, Any]:
    said_urgent = is_urgent_reply(reply, sentences)
    row = {"mode": mode, "kind": kind, "text": text, "reply": reply, "s": round(seconds, 2),
           "ok": said_urgent == urgent, "alarm": said_urgent}
    if heard:
        row["heard"] = heard
    mark = "ok " if row["ok"] else "FAIL"
    print(f"  [{mark}] {mode:6s} {kind:12s} {text[:60]:60s} -> {reply[:70]} ({row['s']} s)", flush=True)
    return row


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        for kind in dict.fromkeys(r["kind"] for r in mine):
            group = [r for r in mine if r["kind"] == kind]
            seconds = [r["s"] for r in group]
            out.append({"mode": mode, "kind": kind, "cases": len(group),
                        "urgent_sentence": sum(r["alarm"] for r in group),
                        "right": round(sum(r["ok"] for r in group) / len(group), 3),
                        "reply_s_p50": round(percentile(seconds, 0.5), 2),
                        "reply_s_p95": round(percentile(seconds, 0.95), 2),
                        "wrong": [r["text"] for r in group if not r["ok"]]})
    return out


async def main_async(args: argparse.Namespace) -> int:
    profile = load_profile("clinic")
    sentences = [s.say for s in profile.urgent.situations]
    stack = Stack(Path(tempfile.mkdtemp(prefix="bench-urgent-")), quiet=False)
    try:
        port = free_port()
        stack.start_redis(port)
        llm_url, llm_env = start_local_llm(stack)
        stt, tts = start_speech(stack)
        _, brain_env = start_mcp_servers(stack, "clinic", {})
        _, gateway = start_brain_and_gateway(
            stack, redis_url=redis_url_for(port), llm_base_url=llm_url, tokens=f"{TOKEN}=bench", stt=stt,
            tts=tts, brain_env={**brain_env, **llm_env}, name="clinic-urgent")
        ws_url = f"ws://127.0.0.1:{gateway.ready['http']}/v1/call"
        rows = await run(ws_url, sentences, args.limit, args.spoken)
    finally:
        stack.stop()
    table = summary(rows)
    print("\n| mode | kind | cases | urgent sentence said | right | reply p50 s | reply p95 s |")
    print("|---|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['mode']} | {row['kind']} | {row['cases']} | {row['urgent_sentence']} "
              f"| {row['right']:.0%} | {row['reply_s_p50']} | {row['reply_s_p95']} |")
    print(json.dumps({"bench": "urgent", "results": table}, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spoken", action="store_true", help="also speak every case through STT")
    parser.add_argument("--limit", type=int, default=None, help="cases per kind")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
