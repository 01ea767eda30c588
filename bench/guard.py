"""``make bench-guard``: the topic guard's block rates on the corpora in ``tests/guard_corpora``.

The guard runs as in ``make run``: its own llama.cpp instance with the packaged
model, each profile's purpose and topics, and the bot's previous sentence as
context. A dialogue act inside an ongoing task (an item with ``said``) is let
through by code, as the agent does (``dialog.is_dialogue_act``); the model's
verdict on those is measured too, to show what code spares the caller.

Prints a table and JSON: block rate on in-domain turns (target 0), on dialogue
acts without the code rule, and on off-topic requests (higher is better), at the
profile's ``guard.block_above`` and, from the same verdicts' P(BLOCK), at 0.5 (what
the model's own word says) and 0.7 (for a profile that wants only clear blocks).

The quick screen (``guard_screen.py``, the profile's ``guard.screen``) is judged beside
the model on the same turns: the share of in-domain turns it passes without an LLM call,
the off-topic requests it would pass (target 0), the in-domain turns it passes that the
model alone blocks, its time per turn, and the block rates of screen and model together
(what ``make run`` does).
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

from bench.stats import percentile
from voicebot.brain.business.profile import load_profile
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.dialog import is_dialogue_act
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.read.guard_screen import ExampleScreen
from voicebot.brain.read.sentence_encoder import MiniLMEncoder
from voicebot.devstack import ROOT, Stack, free_port, local_llm_brain_env, start_guard_llm

CORPORA = ROOT / "tests" / "guard_corpora"
LINES = (0.5, 0.7)  # P(BLOCK) thresholds shown beside the profile's, from the same verdicts


async def verdicts(guard: TopicGuard, items: list[dict[str, Any]], by_code: bool,
                   screen: ExampleScreen | None = None) -> list[dict[str, Any]]:
    """The model's verdict on every turn (the guard has no screen), and beside it the screen's."""
    out = []
    for item in items:
        said = item.get("said", "")
        if by_code and said and is_dialogue_act(item["text"]):
            out.append({**item, "blocked": False, "by": "code", "ms": 0})
            continue
        verdict = await guard.check(item["text"])
        row = {**item, "blocked": not verdict.allowed, "by": "model", "p_block": verdict.p_block,
               "ms": round(verdict.seconds * 1000)}
        if screen is not None:
            started = time.perf_counter()
            result = screen.screen(item["text"])
            row.update(screened=result.passed, screen_ms=round((time.perf_counter() - started) * 1000, 2),
                       allow_similarity=round(result.allow_similarity, 3),
                       block_similarity=round(result.block_similarity, 3))
        out.append(row)
    return out


def screened_summary(in_domain: list[dict[str, Any]], off_topic: list[dict[str, Any]]) -> dict[str, Any]:
    """What the screen passes, and the block rates with it in front of the model."""
    asked_in = [r for r in in_domain if r["by"] == "model"]
    asked_off = [r for r in off_topic if r["by"] == "model"]

    def together(rows: list[dict[str, Any]]) -> float:
        return round(sum(r["blocked"] and not r["screened"] for r in rows) / max(1, len(rows)), 3)

    times = [r["screen_ms"] for r in asked_in + asked_off]
    return {
        "in_domain_screened": round(sum(r["screened"] for r in asked_in) / max(1, len(asked_in)), 3),
        "in_domain_asked": len(asked_in),
        "off_topic_screened": [r["text"] for r in asked_off if r["screened"]],
        "screened_but_model_blocks": [r["text"] for r in asked_in if r["screened"] and r["blocked"]],
        "in_domain_blocked_with_screen": together(in_domain),
        "off_topic_blocked_with_screen": together(off_topic),
        "screen_ms_p50": percentile(times, 0.5) or 0, "screen_ms_p95": percentile(times, 0.95) or 0,
    }


def rate(rows: list[dict[str, Any]], above: float | None = None) -> float:
    """Blocked share; with ``above``, as if the threshold were that (code-passed rows stay passed)."""
    def blocked(row: dict[str, Any]) -> bool:
        if above is None or row.get("p_block") is None:
            return row["blocked"]
        return row["p_block"] > above

    return round(sum(blocked(r) for r in rows) / max(1, len(rows)), 3)


async def bench(profiles: list[str]) -> list[dict[str, Any]]:
    corpora = {name: yaml.safe_load((CORPORA / f"{name}.yaml").read_text())
               for name in ("in_domain", "off_topic")}
    stack = Stack(Path(tempfile.mkdtemp(prefix="bench-guard-")), quiet=False)
    results = []
    try:
        extra = json.loads(local_llm_brain_env().get("BRAIN_GUARD_EXTRA_BODY", "{}"))  # slot, grammar
        chat = OpenAIChatClient(start_guard_llm(stack, free_port()), "guard", temperature=0.0,
                                deadline_s=5.0, first_token_timeout_s=60, extra_body=extra)
        encoder = MiniLMEncoder()
        for name in profiles:
            profile = load_profile(name)
            guard = TopicGuard(chat, profile.purpose, 60.0, profile.guard.allow, profile.guard.block,
                               profile.guard.block_above)
            screen = ExampleScreen.from_settings(encoder, profile.guard.screen)
            await guard.check("Hello.")  # warm the guard's prompt prefix
            in_domain = await verdicts(guard, corpora["in_domain"][name], by_code=True, screen=screen)
            acts = [i for i in corpora["in_domain"][name] if i.get("act")]
            acts_model = await verdicts(guard, acts, by_code=False)
            off_topic = await verdicts(guard, corpora["off_topic"][name], by_code=True, screen=screen)
            timings = [r["ms"] for r in in_domain + off_topic if r["by"] == "model"]
            results.append({
                "profile": name, "in_domain": len(in_domain), "in_domain_blocked": rate(in_domain),
                "acts": len(acts), "acts_blocked_by_model_alone": rate(acts_model),
                "off_topic": len(off_topic), "off_topic_blocked": rate(off_topic),
                "block_above": profile.guard.block_above,
                "at": {str(line): {"in_domain_blocked": rate(in_domain, line),
                                   "off_topic_blocked": rate(off_topic, line)} for line in LINES},
                "guard_ms_p50": percentile(timings, 0.5) or 0, "guard_ms_p95": percentile(timings, 0.95) or 0,
                "wrongly_blocked": [r["text"] for r in in_domain if r["blocked"]],
                "let_through": [r["text"] for r in off_topic if not r["blocked"]],
                "screen": screened_summary(in_domain, off_topic) if screen else None})
        await chat.aclose()
    finally:
        stack.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", action="append", choices=["restaurant", "clinic"])
    args = parser.parse_args()
    # A SIGTERM (timeout, kill) unwinds like Ctrl-C, so the stack this bench started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = asyncio.run(bench(args.profile or ["restaurant", "clinic"]))
    print("\n| profile | P(BLOCK) above | in-domain blocked | dialogue acts blocked by the model alone "
          "| off-topic blocked | guard p50/p95 ms |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['profile']} | {r['block_above']} | {r['in_domain_blocked']:.0%} of {r['in_domain']} "
              f"| {r['acts_blocked_by_model_alone']:.0%} of {r['acts']} | {r['off_topic_blocked']:.0%} of "
              f"{r['off_topic']} | {r['guard_ms_p50']:.0f} / {r['guard_ms_p95']:.0f} |")
        for line, at in r["at"].items():
            print(f"| {r['profile']} | {line} (same verdicts) | {at['in_domain_blocked']:.0%} | | "
                  f"{at['off_topic_blocked']:.0%} | |")
    print("\n| profile | in-domain turns the screen passes (no LLM call) | off-topic it passes "
          "| passed, but the model alone blocks | blocked, screen + model: in-domain, off-topic "
          "| screen p50/p95 ms |")
    print("|---|---|---|---|---|---|")
    for r in results:
        if s := r["screen"]:
            print(f"| {r['profile']} | {s['in_domain_screened']:.0%} of {s['in_domain_asked']} "
                  f"| {len(s['off_topic_screened'])} | {len(s['screened_but_model_blocks'])} "
                  f"| {s['in_domain_blocked_with_screen']:.0%}, {s['off_topic_blocked_with_screen']:.0%} "
                  f"| {s['screen_ms_p50']:.1f} / {s['screen_ms_p95']:.1f} |")
    print(json.dumps({"bench": "guard", "results": results}, indent=2))


if __name__ == "__main__":
    main()
