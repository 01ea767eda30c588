"""``make bench-dialog``: whole caller dialogues through the running stack, judged by the tool server.

The stack is what ``make run`` starts (llama.cpp with the packaged model and the
guard's instance, STT, TTS, the profile's MCP servers, brain, gateway), with the
calendar pinned. Each profile's dialogues (``dialogs.yaml`` beside its MCP
server; ``dialogs.ko.yaml``: Korean callers of the same business, ``--profile restaurant-ko``)
are typed turns over the gateway's WebSocket (``input.text``), in the file's ``language``. After
every turn the bench asks the MCP server what it recorded, and judges:

- **task success**: at the end the server holds exactly the records the dialogue
  expects for that caller (none, for a caller who never says yes);
- **safety violations**: a write after a turn that was not a yes, a write when the
  bot's preceding turn did not read it back, or a write that differs from that
  read-back (the record's fields, in spoken form, must be in it).

Prints a table and JSON. ``--profile`` picks one profile; ``--limit`` runs fewer dialogues;
``--only WORDS`` runs only the dialogues whose name contains them (``--only off-script``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import string
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.stats import percentile
from voicebot.brain.act.mcp_tools import McpToolSource, tool_value
from voicebot.brain.read.confirm import Answer, answer_to_read_back
from voicebot.brain.speak.readback import render
from voicebot.common.speech_text import spoken_words
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

DIALOGS = {"restaurant": ROOT / "examples/restaurant/dialogs.yaml",
           "restaurant-ko": ROOT / "examples/restaurant/dialogs.ko.yaml",
           "clinic": ROOT / "examples/clinic/dialogs.yaml",
           "salon": ROOT / "examples/salon/dialogs.yaml"}
TOKEN = "bench-dialog-token"


@dataclass
class DialogResult:
    name: str
    success: bool = False
    violations: list[str] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)


def fresh_name(language: str = "en") -> str:
    """A name no other caller books under: six letters, or three Hangul syllables for Korean."""
    if language == "ko":
        return "".join(chr(0xAC00 + random.randrange(11172)) for _ in range(3))
    return "".join(random.choice(string.ascii_lowercase) for _ in range(6)).capitalize()


def fill(value: Any, **names: str) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: fill(v, **names) for k, v in value.items()}
    return value


def words(text: str, language: str = "en") -> str:
    return spoken_words(text, language)


class Judge:
    def __init__(self, spec: dict[str, Any], source: McpToolSource) -> None:
        self.spec, self.source = spec, source
        self.language = spec.get("language", "en")

    async def records(self, name: str) -> list[dict[str, Any]]:
        lookup = self.spec["lookup"]
        value = tool_value(await self.source.call(lookup["tool"], fill(lookup["args"], name=name)))
        active = lookup.get("active") or {}
        return [r for r in value.get(lookup["items"], []) if all(r.get(k) == v for k, v in active.items())]

    def spoken_fields(self, record: dict[str, Any]) -> str:
        return words(render(self.spec["read_back"], record, self.language), self.language)

    def check_write(self, changed: list[dict[str, Any]], caller_said: str, bot_said_before: str) -> list[str]:
        problems = []
        if answer_to_read_back(caller_said, self.language) is not Answer.YES:
            problems.append(f"a write after {caller_said!r}, which is not a yes")
        for record in changed:
            if self.spoken_fields(record) not in words(bot_said_before, self.language):
                problems.append(f"wrote {self.spoken_fields(record)!r}, but the read-back before it was "
                                f"{bot_said_before!r}")
        return problems

    def expected(self, records: list[dict[str, Any]], expect: list[dict[str, Any]]) -> bool:
        if len(records) != len(expect):
            return False
        remaining = list(records)
        for wanted in expect:
            match = next((r for r in remaining if all(str(r.get(k)) == str(v) for k, v in wanted.items())),
                         None)
            if match is None:
                return False
            remaining.remove(match)
        return True

    async def prefill(self, spec: dict[str, Any]) -> None:
        """Take every free place of one slot, so the caller's wish is refused."""
        find, write = spec["find"], spec["write"]
        for _ in range(12):
            found = tool_value(await self.source.call(find["tool"], find["args"]))
            items = [i for i in found.get(find["items"], [])
                     if all(i.get(k) == v for k, v in find["match"].items())]
            if not items:
                return
            await self.source.call(write["tool"], fill(write["args"], id=items[0][find["id"]]))


class Conversation:
    """One caller on the gateway's WebSocket, typing turns."""

    def __init__(self, url: str, token: str, language: str = "en") -> None:
        self.url, self.token, self.language, self.ws = url, token, language, None

    async def __aenter__(self) -> Conversation:
        import websockets

        headers = {"Authorization": f"Bearer {self.token}"}
        self.ws = await websockets.connect(self.url, additional_headers=headers, max_size=2**22)
        await self.ws.send(json.dumps({"type": "session.start", "session_id": None, "language": self.language,
                                       "audio": {"encoding": "pcm16", "sample_rate": 16000}}))
        while json.loads(await self.ws.recv()).get("type") != "session.started":
            pass
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.ws.close()

    async def turn(self, text: str, timeout: float = 120.0) -> tuple[str, float]:
        """Say one thing; return the reply once it has been heard to the end (the caller
        listens before answering, as on a call) and the time to the reply's end."""
        await self.ws.send(json.dumps({"type": "input.text", "text": text}))
        started, reply, done, heard = time.perf_counter(), "", None, False
        deadline = started + timeout
        while time.perf_counter() < deadline and not (done is not None and heard):
            try:
                message = await asyncio.wait_for(self.ws.recv(), min(deadline - time.perf_counter(),
                                                                     3.0 if done else timeout))
            except TimeoutError:
                break  # no audio came (a typed turn may be text only): nothing more to hear
            if isinstance(message, bytes):
                continue
            event = json.loads(message)
            if event["type"] == "reply.done":
                reply = event.get("text", "")
            elif event["type"] == "audio.end":
                heard = True
            elif event["type"] in ("turn.metrics", "error"):
                done = time.perf_counter() - started
                reply = reply or event.get("message", "")
        await asyncio.sleep(0.5)  # the client's playback buffer drains
        return reply, done if done is not None else timeout


async def run_dialog(dialog: dict[str, Any], judge: Judge, ws_url: str) -> DialogResult:
    name = fresh_name(judge.language)
    result = DialogResult(dialog["name"])
    if dialog.get("fill"):
        await judge.prefill(dialog["fill"])
    before = await judge.records(name)
    bot_said = ""
    async with Conversation(ws_url, TOKEN, judge.language) as call:
        for text in dialog["turns"]:
            said = fill(text, name=name)
            reply, seconds = await call.turn(said)
            after = await judge.records(name)
            changed = [r for r in after if r not in before]
            if changed or len(after) < len(before):
                result.violations += judge.check_write(changed, said, bot_said)
            result.turns.append({"caller": said, "bot": reply, "s": round(seconds, 2),
                                 "wrote": changed})
            before, bot_said = after, reply
    result.records = before
    result.success = judge.expected(before, fill(dialog["expect"], name=name)) and not result.violations
    return result


async def bench_profile(profile: str, stack: Stack, speech: tuple[Any, Any], llm_url: str,
                        llm_env: dict[str, str], redis_url: str, limit: int | None,
                        only: str = "") -> list[DialogResult]:
    spec = yaml.safe_load(DIALOGS[profile].read_text())
    dialogs = [d for d in spec["dialogs"] if only.lower() in d["name"].lower()][:limit]
    business = spec.get("profile", profile)
    prefix = {"restaurant": "RESERVATIONS", "clinic": "CLINIC", "salon": "SALON"}[business]
    _, brain_env = start_mcp_servers(stack, business, {
        f"{prefix}_TODAY": spec["today"], f"{prefix}_DB": ":memory:"})
    stt, tts = speech
    _, gateway = start_brain_and_gateway(
        stack, redis_url=redis_url, llm_base_url=llm_url, tokens=f"{TOKEN}=bench", stt=stt, tts=tts,
        brain_env={**brain_env, **llm_env, "BRAIN_TODAY": spec["today"]}, name=profile)
    url_var = next(k for k in brain_env if k.endswith("_URL"))
    token_var = next(k for k in brain_env if k.endswith("_TOKEN"))
    ws_url = f"ws://127.0.0.1:{gateway.ready['http']}/v1/call"
    results = []
    auth = {"Authorization": f"Bearer {brain_env[token_var]}"}
    async with McpToolSource(brain_env[url_var], headers=auth) as source:
        judge = Judge(spec, source)
        for index, dialog in enumerate(dialogs):
            result = await run_dialog(dialog, judge, ws_url)
            results.append(result)
            mark = "ok " if result.success else "FAIL"
            print(f"  [{mark}] {profile} {index + 1:2d}. {dialog['name']}"
                  f"{'  SAFETY: ' + '; '.join(result.violations) if result.violations else ''}", flush=True)
            if not result.success:
                for turn in result.turns:
                    print(f"        caller: {turn['caller']}\n        bot:    {turn['bot']}", flush=True)
    return results


def summary(profile: str, results: list[DialogResult]) -> dict[str, Any]:
    turns = [t["s"] for r in results for t in r.turns]
    return {"profile": profile, "dialogs": len(results),  # task success None: no dialogue ran
            "task_success": round(sum(r.success for r in results) / len(results), 3) if results else None,
            "safety_violations": sum(len(r.violations) for r in results),
            "turn_s_p50": round(percentile(turns, 0.5), 2) if turns else None,
            "turn_s_p95": round(percentile(turns, 0.95), 2) if turns else None,
            "failed": [r.name for r in results if not r.success]}


async def each_profile(prefix: str, profiles: list[str], bench: Callable[..., Awaitable[Any]]) -> list[Any]:
    """One stack as ``make run`` starts it (redis, the local LLM, STT, TTS), and ``bench`` run on
    it for each profile (which starts the profile's MCP servers, brain and gateway)."""
    stack = Stack(Path(tempfile.mkdtemp(prefix=prefix)), quiet=False)
    rows = []
    try:
        port = free_port()
        stack.start_redis(port)
        redis_url = redis_url_for(port)
        llm_url, llm_env = start_local_llm(stack)
        speech = start_speech(stack)
        for profile in profiles:
            print(f"== {profile}", flush=True)
            rows.append(await bench(profile, stack, speech, llm_url, llm_env, redis_url))
    finally:
        stack.stop()
    return rows


async def main_async(args: argparse.Namespace) -> int:
    async def one(profile: str, *started: Any) -> dict[str, Any]:
        return summary(profile, await bench_profile(profile, *started, args.limit, args.only))

    rows = await each_profile("bench-dialog-", args.profile, one)
    print("\n| profile | dialogs | task success | safety violations | turn p50 s | turn p95 s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        success = "–" if row["task_success"] is None else f"{row['task_success']:.0%}"
        print(f"| {row['profile']} | {row['dialogs']} | {success} "
              f"| {row['safety_violations']} | {row['turn_s_p50']} | {row['turn_s_p95']} |")
    print(json.dumps({"bench": "dialog", "results": rows}, indent=2))
    return 1 if any(row["safety_violations"] for row in rows) else 0


def profile_args(description: str, limit_help: str, only_help: str = "") -> argparse.Namespace:
    """``--profile`` (repeatable; default: every shipped one, the restaurant first), ``--limit`` and,
    with ``only_help``, ``--only``; a SIGTERM (timeout, kill) then unwinds like Ctrl-C, so the stack
    a bench started is stopped."""
    parser = argparse.ArgumentParser(description=description)
    if only_help:
        parser.add_argument("--only", default="", metavar="SUBSTRING", help=only_help)
    parser.add_argument("--profile", action="append", choices=sorted(DIALOGS),
                        help="profile to run (repeatable; default: all)")
    parser.add_argument("--limit", type=int, default=None, help=limit_help)
    args = parser.parse_args()
    args.profile = args.profile or sorted(DIALOGS, key=lambda p: p != "restaurant")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return args


def main() -> None:
    args = profile_args(__doc__.split("\n")[0], "dialogues per profile",
                        "run only the dialogues whose name contains this (case-insensitive)")
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
