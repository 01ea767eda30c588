"""``make bench-knowledge``: questions to each profile through the running stack, judged by the reply.

The stack is what ``make run`` starts (llama.cpp with the packaged model, STT, TTS, the
profile's MCP servers, brain, gateway). Each question is typed on its own call
(``input.text``). Judged:

- **known** questions (the profile's knowledge answers them): the expected fact is in the
  reply (any of its phrasings, compared as spoken words);
- **unknown** questions (the business never said): the reply should be the profile's
  unknown-fact sentence (``unknown_said``); a reply that states anything the business's
  knowledge does not hold, word for word as spoken, is an **invented fact**. (A true passage
  that does not answer the question is neither: it is counted as not unknown_said only.)

Prints a table (accuracy, invented facts, reply time p50/p95 at the client) and JSON.
``--profile`` picks one profile; ``--limit`` asks fewer questions of each kind. A section may
name the business and its ``language`` (``restaurant-ko``: Korean callers of the restaurant).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.dialog import TOKEN, Conversation, each_profile, profile_args, words
from bench.stats import percentile
from voicebot.brain.act.answers import for_the_ear
from voicebot.brain.business.knowledge import load_passages
from voicebot.brain.business.profile import Profile, load_profile
from voicebot.devstack import (
    ROOT,
    Stack,
    start_brain_and_gateway,
    start_mcp_servers,
)

QUESTIONS = ROOT / "bench/questions.yaml"


def judge_known(reply: str, expect: list[str], language: str = "en") -> bool:
    said = words(reply, language)
    return any(words(fact, language) in said for fact in expect)


def judge_unknown(reply: str, unknown_sentence: str, language: str = "en") -> bool:
    return words(reply, language).startswith(words(unknown_sentence, language))


def spoken_knowledge(profile: Profile, language: str = "en") -> list[str]:
    """Every passage of the profile's knowledge as the bot would speak it, in judged words."""
    passages = load_passages(profile.knowledge, Path(profile.base_dir or "."))
    return [words(for_the_ear(p.text, language), language) for p in passages]


def invented(reply: str, profile: Profile, known: list[str], language: str = "en") -> bool:
    """The reply states something that is neither code's own words (the unknown-fact sentence and
    what the bot can do, the guard's blocked sentence, a task's question) nor a passage of the
    business's knowledge."""
    said = words(reply, language)
    if said.startswith(words(profile.sentences.unknown_fact, language)) \
            or said == words(profile.sentences.blocked, language):
        return False  # code's own sentences: nothing is stated
    questions = [words(f.ask, language) for task in profile.tasks.values() for f in task.fields.values()
                 if f.ask]
    return not any(said in passage for passage in known) and said not in questions


async def ask(ws_url: str, question: str, language: str = "en") -> tuple[str, float]:
    async with Conversation(ws_url, TOKEN, language) as call:
        started = time.perf_counter()
        reply, _ = await call.turn(question)
        return reply, time.perf_counter() - started


async def bench_profile(profile: str, stack: Stack, speech: tuple[Any, Any], llm_url: str,
                        llm_env: dict[str, str], redis_url: str, limit: int | None) -> dict[str, Any]:
    questions = yaml.safe_load(QUESTIONS.read_text())[profile]
    name, language = questions.get("profile", profile), questions.get("language", "en")
    business = load_profile(name).in_language(language)
    unknown_sentence, known_words = business.sentences.unknown_fact, spoken_knowledge(business, language)
    _, brain_env = start_mcp_servers(stack, name, {})
    stt, tts = speech
    _, gateway = start_brain_and_gateway(
        stack, redis_url=redis_url, llm_base_url=llm_url, tokens=f"{TOKEN}=bench", stt=stt, tts=tts,
        brain_env={**brain_env, **llm_env}, name=f"{profile}-knowledge")
    ws_url = f"ws://127.0.0.1:{gateway.ready['http']}/v1/call"
    rows: list[dict[str, Any]] = []
    for item in questions["known"][:limit]:
        reply, seconds = await ask(ws_url, item["q"], language)
        rows.append({"kind": "known", "q": item["q"], "reply": reply, "s": round(seconds, 2),
                     "ok": judge_known(reply, item["expect"], language)})
        _print(profile, rows[-1])
    for question in questions["unknown"][:limit]:
        reply, seconds = await ask(ws_url, question, language)
        rows.append({"kind": "unknown", "q": question, "reply": reply, "s": round(seconds, 2),
                     "ok": judge_unknown(reply, unknown_sentence, language),
                     "invented": invented(reply, business, known_words, language)})
        _print(profile, rows[-1])
    return summary(profile, rows)


def _print(profile: str, row: dict[str, Any]) -> None:
    mark = "ok " if row["ok"] else "FAIL"
    print(f"  [{mark}] {profile} {row['kind']:7s} {row['q']}  ->  {row['reply']}  ({row['s']} s)", flush=True)


def summary(profile: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    known = [r for r in rows if r["kind"] == "known"]
    unknown = [r for r in rows if r["kind"] == "unknown"]
    seconds = [r["s"] for r in rows]
    return {"profile": profile, "known": len(known), "unknown": len(unknown),
            "known_answered": round(sum(r["ok"] for r in known) / max(1, len(known)), 3),
            "unknown_said": round(sum(r["ok"] for r in unknown) / max(1, len(unknown)), 3),
            "invented_facts": sum(r.get("invented", False) for r in rows),
            "reply_s_p50": round(percentile(seconds, 0.5), 2) if seconds else None,
            "reply_s_p95": round(percentile(seconds, 0.95), 2) if seconds else None,
            "failed": [r["q"] for r in rows if not r["ok"]]}


async def main_async(args: argparse.Namespace) -> int:
    async def one(profile: str, *started: Any) -> dict[str, Any]:
        return await bench_profile(profile, *started, args.limit)

    rows = await each_profile("bench-knowledge-", args.profile, one)
    print("\n| profile | known questions | answered with the fact | unknown questions | unknown sentence "
          "| invented facts | reply p50 s | reply p95 s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['profile']} | {row['known']} | {row['known_answered']:.0%} | {row['unknown']} "
              f"| {row['unknown_said']:.0%} | {row['invented_facts']} | {row['reply_s_p50']} "
              f"| {row['reply_s_p95']} |")
    print(json.dumps({"bench": "knowledge", "results": rows}, indent=2))
    return 1 if any(row["invented_facts"] for row in rows) else 0


def main() -> None:
    args = profile_args(__doc__.split("\n")[0], "questions of each kind per profile")
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
