"""Brain benchmark (``make bench-brain``): prefix-cache and topic-guard effects on TTFT.

Against the local llama.cpp server (started here, on free ports), in one run:

- warm:       turn N of a session whose previous prompt is cached (stable context order)
- perturbed:  the same turn with one byte changed at the start of the prompt (cache miss)
- guard-same: warm, with the topic guard running in parallel on the *same* server
- guard-own:  warm, with the guard on its own server instance (the CPU default's design)

Prints a table and JSON with TTFT p50/p95 per case and the ratios the issue asks for
(warm/perturbed ≤ 0.3, guard overhead ≤ 10 %).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from services.brain.context import build_messages, state_text
from services.brain.guard import TopicGuard
from services.brain.llm import OpenAIChatClient
from services.brain.profile import load_profile
from services.brain.prompts import system_prompt
from services.brain.session_store import Turn
from voicebot.common.stats import percentile
from voicebot.devstack import Stack, free_port, main_llm_threads, start_guard_llm

PROFILE = load_profile("restaurant")
DOMAIN = PROFILE.purpose
HISTORY = [
    ("Hi, I'd like to book a table.", "Sure. For which day?"),
    ("Saturday evening.", "Saturday works. How many people?"),
    ("Four of us.", "Four people on Saturday. What time would you like?"),
    ("Around eight.", "Eight is free. May I have your name?"),
    ("It's Jamie.", "Thanks, Jamie. Anything else I should note?"),
    ("A high chair, please.", "Noted, one high chair."),
]
QUESTIONS = ["Is there parking nearby?", "Can we sit outside?", "Do you have vegetarian dishes?",
             "Can I bring a cake?", "Is the terrace heated?", "Do you take cards?"]


LEADS = ("Quick question:", "Also,", "By the way,", "One more thing:")


async def ttft(chat: OpenAIChatClient, messages) -> float:
    """Time to the first text token. The (short) stream is read to its end: llama.cpp's server
    does not take an aborted stream well, and a real turn reads it all anyway."""
    started = time.perf_counter()
    first = None
    async for chunk in chat(messages, max_tokens=8):
        if first is None and chunk.text.strip():
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


def turn_messages(system: str, turns: int, question: str) -> list[dict]:
    history = [Turn(f"t{i}", q, a) for i, (q, a) in enumerate(HISTORY[:turns])]
    return build_messages(system, history, question, [], state_text({"dialog_state": "listen"}))


async def measure(main: OpenAIChatClient, guard_same: TopicGuard, guard_own: TopicGuard | None,
                  rounds: int) -> dict[str, list[float]]:
    system = system_prompt(PROFILE)
    results: dict[str, list[float]] = {"warm": [], "perturbed": [], "guard-same": [], "guard-own": []}
    for index in range(rounds):
        question = QUESTIONS[index % len(QUESTIONS)]
        prime = turn_messages(system, 5, HISTORY[5][0])
        cases = [("warm", None), ("guard-same", guard_same), ("guard-own", guard_own), ("perturbed", None)]
        for (name, guard), lead in zip(cases, LEADS, strict=True):
            if name == "guard-own" and guard is None:
                continue
            await ttft(main, prime)  # the previous turn's prompt is what the server has cached
            # Each case asks its own question: an identical prompt would be a full cache hit
            # for the cases that come after the first.
            messages = full = turn_messages(system, 6, f"{lead} {question[0].lower()}{question[1:]}")
            if name == "perturbed":
                messages = [{"role": "system", "content": f"[{index}] " + system}, *full[1:]]
            if guard is not None:
                check = asyncio.create_task(guard.check(question))
                # The guard's request reaches the server first, as in the agent (it starts
                # before the main loop has even assembled its prompt).
                await asyncio.sleep(0.01)
                results[name].append(await ttft(main, messages))
                await check
            else:
                results[name].append(await ttft(main, messages))
            print(f"  round {index + 1}/{rounds} {name}: {results[name][-1] * 1000:.0f} ms",
                  file=sys.stderr, flush=True)
    return results


def report(results: dict[str, list[float]]) -> dict:
    summary = {name: {"p50_ms": round(statistics.median(v) * 1000),
                      "p95_ms": round(percentile(v, 0.95) * 1000), "n": len(v)}
               for name, v in results.items() if v}
    warm = summary["warm"]["p50_ms"]
    summary["ratios"] = {
        "warm_over_perturbed": round(warm / summary["perturbed"]["p50_ms"], 3),
        "guard_same_overhead": round(summary["guard-same"]["p50_ms"] / warm - 1, 3),
    }
    if "guard-own" in summary:
        summary["ratios"]["guard_own_overhead"] = round(summary["guard-own"]["p50_ms"] / warm - 1, 3)
    return summary


def print_table(summary: dict) -> None:
    print(f"{'case':<12} {'p50 ms':>8} {'p95 ms':>8} {'n':>3}")
    for name, row in summary.items():
        if name != "ratios":
            print(f"{name:<12} {row['p50_ms']:>8} {row['p95_ms']:>8} {row['n']:>3}")
    for name, value in summary["ratios"].items():
        print(f"{name}: {value}")


async def run(args) -> dict:
    """Starts the LLM servers as `make run` does: the main one, and the guard's own instance."""
    stack = Stack(Path(".run/bench-brain"), quiet=False)
    clients: list[OpenAIChatClient] = []

    def client(url: str) -> OpenAIChatClient:
        clients.append(OpenAIChatClient(url, "voicebot-llm", deadline_s=60, first_token_timeout_s=300))
        return clients[-1]

    try:
        own_instance = not args.no_second_instance
        main_port = free_port()
        threads = args.main_threads or (main_llm_threads() if own_instance else None)
        stack.start_llm(main_port, threads=threads)
        main = client(f"http://127.0.0.1:{main_port}/v1")
        guard_same = TopicGuard(main, DOMAIN, timeout_s=60)
        guard_own = TopicGuard(client(start_guard_llm(stack, free_port())), DOMAIN, timeout_s=60) \
            if own_instance else None
        for guard in (guard_same, guard_own):
            if guard is not None:
                await guard.check("warm up")
        return report(await measure(main, guard_same, guard_own, args.rounds))
    finally:
        for chat in clients:
            await chat.aclose()
        stack.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-second-instance", action="store_true")
    parser.add_argument("--main-threads", type=int, default=0,
                        help="threads of the main LLM server (default: as make run)")
    parser.add_argument("--json", help="also write the JSON summary to this file")
    args = parser.parse_args()
    summary = asyncio.run(run(args))
    print_table(summary)
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
