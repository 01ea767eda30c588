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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from services.brain.dialog import is_dialogue_act
from services.brain.guard import TopicGuard
from services.brain.llm import OpenAIChatClient
from services.brain.profile import load_profile
from voicebot.common.stats import percentile
from voicebot.devstack import ROOT, Stack, free_port, local_llm_brain_env, start_guard_llm

CORPORA = ROOT / "tests" / "guard_corpora"
LINES = (0.5, 0.7)  # P(BLOCK) thresholds shown beside the profile's, from the same verdicts


async def verdicts(guard: TopicGuard, items: list[dict[str, Any]], by_code: bool) -> list[dict[str, Any]]:
    out = []
    for item in items:
        said = item.get("said", "")
        if by_code and said and is_dialogue_act(item["text"]):
            out.append({**item, "blocked": False, "by": "code", "ms": 0})
            continue
        verdict = await guard.check(item["text"])
        out.append({**item, "blocked": not verdict.allowed, "by": "model", "p_block": verdict.p_block,
                    "ms": round(verdict.seconds * 1000)})
    return out


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
        for name in profiles:
            profile = load_profile(name)
            guard = TopicGuard(chat, profile.purpose, 60.0, profile.guard.allow, profile.guard.block,
                               profile.guard.block_above)
            await guard.check("Hello.")  # warm the guard's prompt prefix
            in_domain = await verdicts(guard, corpora["in_domain"][name], by_code=True)
            acts = [i for i in corpora["in_domain"][name] if i.get("act")]
            acts_model = await verdicts(guard, acts, by_code=False)
            off_topic = await verdicts(guard, corpora["off_topic"][name], by_code=True)
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
                "let_through": [r["text"] for r in off_topic if not r["blocked"]]})
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
    print(json.dumps({"bench": "guard", "results": results}, indent=2))


if __name__ == "__main__":
    main()
