"""Brain benchmark (``make bench-brain``): prefix-cache and topic-guard effects on TTFT.

Against the local LLM server as ``make run`` starts it (on free ports), in one run, for each
server kind that is installed (``--servers``):

- native: one llama-server built for this CPU with two slots; the main reply in slot 0, the
  guard in slot 1 with its one-word grammar (the request fields ``localllm.main_request_fields``
  and ``guard_request_fields`` name)
- prebuilt: the same server and requests from the prebuilt xllamacpp wheel (what a first
  ``make run`` serves while the native build is made)
- python: the llama-cpp-python fallback, the main server on cores-1 threads and the guard's
  own one-thread instance (the design before llama-server)

Cases per kind:

- warm:       turn N of a session whose previous prompt is cached (stable context order)
- perturbed:  the same turn with one byte changed at the start of the prompt (cache miss)
- guard-same: warm, with the topic guard running in parallel on the *same* server (the
  time is the later of the reply's first token and the verdict: the reply is held for it)
- guard-own:  warm, with the guard on its own server instance (python only)
- guard-combined: warm, the reply's and the guard's prompts in one llama-server ``/completion``
  request (native only), so the server queues both at once and prefills them in one batch;
  "guard-same" sends two chat requests, and the server starts whichever it has read first
  alone. The time is to the reply's first token or the guard's verdict, whichever is later.

Prints a table and JSON with TTFT p50/p95 per case and the ratios the issue asks for
(warm/perturbed ≤ 0.3, guard overhead ≤ 10 %), prebuilt over native, and native over python.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from bench.context import build_messages, state_text
from bench.prompts import system_prompt
from bench.stats import percentile
from voicebot import localllm
from voicebot.brain.business.profile import load_profile
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.runtime.session_store import Turn
from voicebot.devstack import Stack, free_port, main_llm_threads

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


# How far the guard's request is sent ahead of the reply's, as in the agent (it starts before the
# main loop has even assembled its prompt).
GUARD_HEAD_START_S = 0.01

LEADS = ("Quick question:", "Also,", "By the way,", "Just asking:", "One more thing:")


async def ttft(chat: OpenAIChatClient, messages) -> float:
    """Time to the first text token. The (short) stream is read to its end: llama.cpp's server
    does not take an aborted stream well, and a real turn reads it all anyway."""
    started = time.perf_counter()
    first = None
    async for chunk in chat(messages, max_tokens=8):
        if first is None and chunk.text.strip():
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


async def combined_ttft(base_url: str, messages, guard: TopicGuard, question: str) -> float:
    """Both prompts in one llama-server ``/completion`` request (rendered by its own chat
    template, ``/apply-template``); each finds its slot by prompt similarity. The stream tells
    them apart by ``index``; the guard's verdict is its first token's alternatives."""
    root = base_url.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=300) as http:
        started = time.perf_counter()
        rendered = await asyncio.gather(*(http.post(f"{root}/apply-template", json={"messages": m})
                                          for m in (messages, guard.messages(question))))
        prompts = [r.json()["prompt"] for r in rendered]
        firsts: dict[int, float] = {}
        body = {"prompt": prompts, "stream": True, "n_predict": 8, "temperature": 0.3, "n_probs": 5,
                "id_slot": -1, "cache_prompt": True}
        async with http.stream("POST", f"{root}/completion", json=body) as response:
            async for line in response.aiter_lines():
                event = json.loads(line[5:]) if line.startswith("data:") else None
                if not isinstance(event, dict):
                    continue  # the stream opens with "data: null"
                index = event.get("index", 0)
                seen = event.get("completion_probabilities") if index else event.get("content", "").strip()
                if seen and index not in firsts:
                    firsts[index] = time.perf_counter() - started
    return max(firsts.values()) if len(firsts) == 2 else time.perf_counter() - started


def turn_messages(system: str, turns: int, question: str) -> list[dict]:
    history = [Turn(f"t{i}", q, a) for i, (q, a) in enumerate(HISTORY[:turns])]
    return build_messages(system, history, question, [], state_text({"dialog_state": "listen"}))


async def measure(main: OpenAIChatClient, guard_same: TopicGuard, guard_own: TopicGuard | None,
                  rounds: int, combined_url: str | None = None) -> dict[str, list[float]]:
    system = system_prompt(PROFILE)
    results: dict[str, list[float]] = {"warm": [], "perturbed": [], "guard-same": [], "guard-own": [],
                                       "guard-combined": []}
    for index in range(rounds):
        question = QUESTIONS[index % len(QUESTIONS)]
        prime = turn_messages(system, 5, HISTORY[5][0])
        cases = [("warm", None), ("guard-same", guard_same), ("guard-own", guard_own),
                 ("guard-combined", guard_same if combined_url else None), ("perturbed", None)]
        for (name, guard), lead in zip(cases, LEADS, strict=True):
            if name in ("guard-own", "guard-combined") and guard is None:
                continue
            await ttft(main, prime)  # the previous turn's prompt is what the server has cached
            # Each case asks its own question: an identical prompt would be a full cache hit
            # for the cases that come after the first.
            asked = f"{lead} {question[0].lower()}{question[1:]}"
            messages = full = turn_messages(system, 6, asked)
            if name == "perturbed":
                messages = [{"role": "system", "content": f"[{index}] " + system}, *full[1:]]
            if name == "guard-combined":
                results[name].append(await combined_ttft(combined_url, messages, guard, asked))
            elif guard is not None:
                check = asyncio.create_task(guard.check(asked))  # its own words: nothing cached
                await asyncio.sleep(GUARD_HEAD_START_S)
                first = await ttft(main, messages)
                # The reply is held until the verdict: the later of the two is what a caller waits for.
                results[name].append(max(first, (await check).seconds - GUARD_HEAD_START_S))
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
    if "guard-combined" in summary:
        combined = summary["guard-combined"]["p50_ms"]
        summary["ratios"]["guard_combined_overhead"] = round(combined / warm - 1, 3)
    if "guard-own" in summary:
        summary["ratios"]["guard_own_overhead"] = round(summary["guard-own"]["p50_ms"] / warm - 1, 3)
    return summary


def print_table(summaries: dict[str, dict]) -> None:
    print(f"{'server':<8} {'case':<12} {'p50 ms':>8} {'p95 ms':>8} {'n':>3}")
    for kind, summary in summaries.items():
        if kind == "ratios":
            continue
        for name, row in summary.items():
            if name != "ratios":
                print(f"{kind:<8} {name:<12} {row['p50_ms']:>8} {row['p95_ms']:>8} {row['n']:>3}")
        for name, value in summary["ratios"].items():
            print(f"{kind:<8} {name}: {value}")
    for name, value in summaries.get("ratios", {}).items():
        print(f"{name}: {value}")


class SlotClient(OpenAIChatClient):
    """The brain's client with llama-server's extra request fields (``id_slot``, ``grammar``)."""

    def __init__(self, *args, fields: dict | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields = fields or {}

    def payload(self, *args, **kwargs) -> dict:
        return {**super().payload(*args, **kwargs), **self.fields}


async def run_kind(kind: str, args) -> dict:
    """One server kind as `make run` starts it: native or prebuilt = one llama.cpp server for
    main and guard; python = the main llama-cpp-python server and the guard's own instance."""
    stack = Stack(Path(".run/bench-brain"), quiet=False)
    clients: list[OpenAIChatClient] = []

    def client(url: str, fields: dict | None = None) -> OpenAIChatClient:
        clients.append(SlotClient(url, "voicebot-llm", deadline_s=60, first_token_timeout_s=300,
                                  fields=fields))
        return clients[-1]

    try:
        native = kind != "python"  # llama.cpp's own server, built here or prebuilt
        main_port = free_port()
        threads = args.main_threads or (main_llm_threads() if native else max(1, (os.cpu_count() or 2) - 1))
        stack.start_llm(main_port, threads=threads, kind=kind)
        url = f"http://127.0.0.1:{main_port}/v1"
        main = client(url, localllm.main_request_fields() if native else None)
        guard_same = TopicGuard(client(url, localllm.guard_request_fields() if native else None),
                                DOMAIN, timeout_s=60)
        guard_own = None
        if not native:
            guard_port = free_port()
            stack.start_llm(guard_port, name="llm-guard", n_ctx=1024, threads=1, kind="python")
            guard_own = TopicGuard(client(f"http://127.0.0.1:{guard_port}/v1"), DOMAIN, timeout_s=60)
        for guard in (guard_same, guard_own):
            if guard is not None:
                await guard.check("warm up")
        return report(await measure(main, guard_same, guard_own, args.rounds, url if native else None))
    finally:
        for chat in clients:
            await chat.aclose()
        stack.stop()


async def run(args) -> dict:
    summaries: dict[str, dict] = {}
    for kind in args.servers.split(","):
        print(f"== {kind}", file=sys.stderr, flush=True)
        summaries[kind] = await run_kind(kind, args)
    summaries["ratios"] = {}
    if "native" in summaries and "prebuilt" in summaries:
        summaries["ratios"].update({
            f"prebuilt_over_native_{case}_p50": round(
                summaries["prebuilt"][case]["p50_ms"] / summaries["native"][case]["p50_ms"], 3)
            for case in ("warm", "perturbed", "guard-same", "guard-combined")})
    if "native" in summaries and "python" in summaries:
        native, python = summaries["native"], summaries["python"]
        summaries["ratios"].update({
            f"native_over_python_{case}_p50": round(native[case]["p50_ms"] / python[case]["p50_ms"], 3)
            for case in ("warm", "perturbed", "guard-same")})
        summaries["ratios"]["native_guard_same_over_python_guard_own_p50"] = round(
            native["guard-same"]["p50_ms"] / python["guard-own"]["p50_ms"], 3)
    return summaries


def default_servers() -> str:
    kinds = []
    if localllm.server_binary() is not None:
        kinds.append("native")
    if localllm.prebuilt_server() is not None:
        kinds.append("prebuilt")
    if importlib.util.find_spec("llama_cpp") is not None:
        kinds.append("python")
    return ",".join(kinds) or "native"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--servers", default=default_servers(),
                        help="comma-separated: native, prebuilt, python (default: those installed)")
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
