"""TTS benchmark (``make bench-tts``): time to first audio, real-time factor, and concurrency.

Starts the TTS service as `make run` does (a process on free ports) and drives it over gRPC:

- ttfa:  from writing a complete first sentence (the segmenter cuts it at once) to its first
         audio chunk, measured by the client, so it includes gRPC and the segmenter
- rtf:   wall time from the first write to the last chunk, over the audio's duration, for a
         four-sentence reply streamed in word-sized deltas
- with 1, 2 and 4 calls at once (all started together)
- a long first sentence rendered whole (TTS_MIN_PHRASE_PHONEMES=0) and in phrases (the default)

Prints a table and JSON (p50/p95 over the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import grpc

from bench.stats import percentile
from voicebot.common.internal_auth import internal_channel
from voicebot.devstack import ROOT, Stack
from voicebot.v1 import tts_pb2, tts_pb2_grpc

RATE = 16000
FIRST_SENTENCES = [
    "Sure, I can book that for you.",
    "Tuesday at ten works.",
    "Of course, a table for four.",
    "Sorry, we are closed on Mondays.",
    "Great, see you tomorrow at seven.",
    "Yes, the terrace is open tonight.",
]
REPLY = ("Sure, I can book that for you. We have a table by the window at seven thirty. "
         "The terrace is heated, so you can sit outside if you like. Shall I confirm it now?")
LONG_FIRST = ("For a party of eight on a Saturday evening, we would need a deposit of fifty dollars, "
              "which is refundable up to a day before.")


async def one_call(stub, deltas: list[str]) -> tuple[float, float]:
    """(ttfa seconds, rtf) of one call that sends ``deltas`` at once."""
    call = stub.StreamingSynthesize(timeout=120)
    await call.write(tts_pb2.SynthesizeRequest(config=tts_pb2.SynthesisConfig(sample_rate=RATE)))
    started = time.perf_counter()
    for delta in deltas:
        await call.write(tts_pb2.SynthesizeRequest(text=delta))
    await call.done_writing()
    first, samples = None, 0
    while (event := await call.read()) is not grpc.aio.EOF:
        if event.WhichOneof("event") == "audio":
            first = first or time.perf_counter()
            samples += len(event.audio.pcm16) // 2
    elapsed = time.perf_counter() - started
    return (first or started) - started, elapsed / max(1e-9, samples / RATE)


async def rounds(addr: str, concurrency: int, count: int, deltas_for) -> dict[str, float]:
    ttfas, rtfs = [], []
    async with internal_channel(addr) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        await one_call(stub, ["Warm up, please."])
        for index in range(count):
            results = await asyncio.gather(*(one_call(stub, deltas_for(index + n))
                                             for n in range(concurrency)))
            ttfas += [r[0] for r in results]
            rtfs += [r[1] for r in results]
    return {"ttfa_p50_ms": percentile(ttfas, 0.5) * 1000, "ttfa_p95_ms": percentile(ttfas, 0.95) * 1000,
            "rtf_p50": percentile(rtfs, 0.5), "rtf_p95": percentile(rtfs, 0.95), "calls": len(ttfas)}


def first_sentence(index: int) -> list[str]:
    return [FIRST_SENTENCES[index % len(FIRST_SENTENCES)] + " "]


def streamed_reply(_index: int) -> list[str]:
    return [word + " " for word in REPLY.split(" ")]


async def run(count: int) -> dict:
    results: dict = {}
    logs = ROOT / ".run" / "bench-tts"
    stack = Stack(Path(logs), quiet=True)
    try:
        tts = stack.start_service("tts", "voicebot.tts.server", {"TTS_PORT": "0", "TTS_METRICS_PORT": "0"})
        addr = f"127.0.0.1:{tts.ready['grpc']}"
        for concurrency in (1, 2, 4):
            ttfa = await rounds(addr, concurrency, count, first_sentence)
            reply = await rounds(addr, concurrency, max(2, count // 3), streamed_reply)
            results[f"concurrency_{concurrency}"] = {
                "ttfa_p50_ms": ttfa["ttfa_p50_ms"], "ttfa_p95_ms": ttfa["ttfa_p95_ms"],
                "rtf_p50": reply["rtf_p50"], "rtf_p95": reply["rtf_p95"], "calls": ttfa["calls"]}
        results["long_first_sentence_phrases"] = await rounds(addr, 1, count, lambda _i: [LONG_FIRST + " "])
        whole = stack.start_service("tts-whole", "voicebot.tts.server", {
            "TTS_PORT": "0", "TTS_METRICS_PORT": "0", "TTS_MIN_PHRASE_PHONEMES": "0"})
        results["long_first_sentence_whole"] = await rounds(
            f"127.0.0.1:{whole.ready['grpc']}", 1, count, lambda _i: [LONG_FIRST + " "])
    finally:
        stack.stop()
    return results


def table(results: dict) -> str:
    rows = ["case                          calls  ttfa p50 ms  ttfa p95 ms  rtf p50  rtf p95",
            "----------------------------  -----  -----------  -----------  -------  -------"]
    for name, r in results.items():
        rows.append(f"{name:<28}  {r['calls']:>5}  {r['ttfa_p50_ms']:>11.0f}  {r['ttfa_p95_ms']:>11.0f}  "
                    f"{r['rtf_p50']:>7.3f}  {r['rtf_p95']:>7.3f}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="rounds per case (N calls at once each)")
    args = parser.parse_args()
    results = asyncio.run(run(args.rounds))
    print(table(results))
    print(json.dumps({"tts": results, "rounds": args.rounds}))


if __name__ == "__main__":
    main()
