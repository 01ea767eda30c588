"""``make bench-answerable``: does a passage answer the question? Candidate checks side by side.

Pairs come from the shipped profiles: every question of bench/questions.yaml and
bench/answerable.yaml is searched as the brain searches (the packaged MiniLM encoder, the
in-process index, ``Answers``' own filter), and each of its best ``--passages`` passages is a
pair. Labels follow from the questions: a known question's passage answers it when it holds the
expected fact (as spoken words); an unknown question (the business never answered it) is
answered by no passage, however near.

Candidates, on the same pairs in one run:

- ``always``: no check, every passage found is spoken (the brain with ``BRAIN_ANSWER_CHECK=off``);
- ``encoder``: the encoder's cosine of question and passage at or above ``--encoder-above``;
- ``model``: the packaged LLM's yes/no under a JSON schema (``act/answerable.py``), on the
  side slot of a llama-server started here, as ``make run`` starts it.

Prints accuracy, how many answering passages were kept and non-answering ones refused, and the
check's time per pair (p50/p95), as a table and JSON. ``--profile`` picks profiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.dialog import words
from bench.knowledge import QUESTIONS
from bench.stats import percentile
from voicebot.brain.act.answerable import ModelAnswerCheck
from voicebot.brain.act.answers import Answers, for_the_ear
from voicebot.brain.business.knowledge import open_knowledge
from voicebot.brain.business.profile import load_profile
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.sentence_encoder import CachingEncoder, MiniLMEncoder
from voicebot.devstack import ROOT, Stack, free_port, main_llm_threads

MORE_QUESTIONS = ROOT / "bench/answerable.yaml"
PROFILES = ("restaurant", "clinic", "salon")


def questions(profile: str) -> tuple[list[dict[str, Any]], list[str]]:
    known: list[dict[str, Any]] = []
    unknown: list[str] = []
    for source in (QUESTIONS, MORE_QUESTIONS):
        spec = yaml.safe_load(source.read_text())[profile]
        known += spec["known"]
        unknown += spec["unknown"]
    return known, unknown


def shown(passage: Any) -> str:
    """The passage as the check sees it (``Answers._answering``)."""
    return f"{passage.title}: {passage.text}" if passage.title else passage.text


async def pairs_of(profile: str, encoder: CachingEncoder, depth: int) -> list[dict[str, Any]]:
    business = load_profile(profile)
    index = await open_knowledge(business.knowledge, Path(business.base_dir or "."), encoder)
    answers = Answers(index, business.sentences, lambda: "", min_score=business.knowledge.min_score)
    known, unknown = questions(profile)
    asked = [(item["q"], item["expect"]) for item in known] + [(q, None) for q in unknown]
    rows = []
    try:
        for question, expect in asked:
            for rank, passage in enumerate((await answers._search(question))[:depth]):
                said = words(for_the_ear(passage.text))
                answering = expect is not None and any(words(fact) in said for fact in expect)
                rows.append({"profile": profile, "q": question, "kind": "known" if expect else "unknown",
                             "rank": rank, "passage": shown(passage), "score": round(passage.score, 3),
                             "answers": answering})
    finally:
        await index.aclose()
    return rows


def encoder_check(encoder: CachingEncoder, above: float):
    def check(question: str, passage: str) -> tuple[bool, float]:
        started = time.perf_counter()
        vectors = encoder.encode([question, passage])
        return float(vectors[0] @ vectors[1]) >= above, (time.perf_counter() - started) * 1000
    return check


async def judge(pairs: list[dict[str, Any]], encoder: CachingEncoder, above: float,
                model: ModelAnswerCheck | None) -> dict[str, list[dict[str, Any]]]:
    verdicts: dict[str, list[dict[str, Any]]] = {"always": [], "encoder": [], "model": []}
    by_encoder = encoder_check(encoder, above)
    for pair in pairs:
        verdicts["always"].append({"yes": True, "ms": 0.0})
        said, ms = by_encoder(pair["q"], pair["passage"])
        verdicts["encoder"].append({"yes": said, "ms": ms})
        if model is not None:
            verdict = await model(pair["q"], pair["passage"])
            verdicts["model"].append({"yes": verdict.answers, "ms": verdict.ms})
            mark = {True: "yes", False: "no ", None: "---"}[verdict.answers]
            truth = "answers" if pair["answers"] else "does not"
            print(f"  model {mark} ({truth}, {verdict.ms:4.0f} ms) {pair['profile']}: {pair['q']} "
                  f"| {pair['passage'][:90]}", flush=True)
    return {name: rows for name, rows in verdicts.items() if rows}


def summary(name: str, pairs: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    answering = [v for p, v in zip(pairs, verdicts, strict=True) if p["answers"]]
    beside = [v for p, v in zip(pairs, verdicts, strict=True) if not p["answers"]]
    right = sum(v["yes"] is p["answers"] for p, v in zip(pairs, verdicts, strict=True))
    ms = [v["ms"] for v in verdicts]
    return {"check": name, "pairs": len(pairs), "accuracy": round(right / max(1, len(pairs)), 3),
            "answering_kept": f"{sum(v['yes'] is True for v in answering)}/{len(answering)}",
            "beside_refused": f"{sum(v['yes'] is False for v in beside)}/{len(beside)}",
            "no_verdict": sum(v["yes"] is None for v in verdicts),
            "ms_p50": round(percentile(ms, 0.5), 1), "ms_p95": round(percentile(ms, 0.95), 1)}


async def main_async(args: argparse.Namespace) -> int:
    encoder = CachingEncoder(MiniLMEncoder(None))
    pairs = [pair for profile in args.profile for pair in await pairs_of(profile, encoder, args.passages)]
    print(f"{len(pairs)} pairs, {sum(p['answers'] for p in pairs)} answering", flush=True)
    model, stack, client = None, None, None
    if not args.no_model:
        from voicebot import localllm

        stack = Stack(Path(tempfile.mkdtemp(prefix="bench-answerable-")), quiet=False)
        llm = stack.start_llm(free_port(), threads=args.threads or main_llm_threads())
        client = OpenAIChatClient(f"http://127.0.0.1:{llm.ready['http']}/v1", "local", deadline_s=30,
                                  first_token_timeout_s=60, extra_body=localllm.side_request_fields())
        model = ModelAnswerCheck(client, timeout_s=args.timeout)
        await model("Is there parking?", "Parking: free spaces behind the shop.")  # the prompt cached
    try:
        verdicts = await judge(pairs, encoder, args.encoder_above, model)
    finally:
        if client is not None:
            await client.aclose()
        if stack is not None:
            stack.stop()
    rows = [summary(name, pairs, found) for name, found in verdicts.items()]
    print("\n| check | pairs | accuracy | answering kept | beside the point refused | no verdict "
          "| ms p50 | ms p95 |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['check']} | {row['pairs']} | {row['accuracy']:.0%} | {row['answering_kept']} "
              f"| {row['beside_refused']} | {row['no_verdict']} | {row['ms_p50']} | {row['ms_p95']} |")
    mistakes = {name: [f"{p['q']} | {p['passage'][:60]}" for p, v in zip(pairs, found, strict=True)
                       if v["yes"] is not p["answers"]]
                for name, found in verdicts.items() if name != "always"}
    print(json.dumps({"bench": "answerable", "results": rows, "mistakes": mistakes}, indent=2))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", action="append", choices=PROFILES, help="repeatable; default: all")
    parser.add_argument("--passages", type=int, default=2, help="passages per question (best first)")
    parser.add_argument("--encoder-above", type=float, default=0.6,
                        help="the encoder candidate's cosine at or above which a passage answers")
    parser.add_argument("--timeout", type=float, default=30.0, help="the model check's timeout, s")
    parser.add_argument("--threads", type=int, default=0,
                        help="the LLM server's threads (default: as make run; 1 on a machine others load)")
    parser.add_argument("--no-model", action="store_true", help="only the candidates without the LLM")
    args = parser.parse_args()
    args.profile = args.profile or list(PROFILES)
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
