"""Turn-taking benchmark (``make bench-bargein``): barge-in reaction and false starts.

Starts redis, STT (Whisper base), TTS (piper), the brain (with the tests' scripted LLM, so
the figures are the pipeline's, not a model's) and the gateway as processes, then plays a
person over WebSocket at real-time pace, microphone always on:

- barge-in trials: a typed question gets a long spoken reply; after 1.5 s of it the person
  says "Make it three people please." The gateway logs, per barge-in, the time from
  SpeechStarted reaching it to the last reply frame it sent, to the barge-in being confirmed,
  and to `interrupt` being sent; the client measures from its first speech frame to the last
  reply frame and to `interrupt` it received. The interrupting question is a spoken turn,
  whose `turn.metrics` stages are reported too.
- false-start trials: a 150 ms "uh" over the reply; counted as interrupted or not.

Prints tables and JSON (p50/p95).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time

import numpy as np
import websockets

from bench.stats import percentile
from tests.audio import silence, speech, vowel
from tests.fakes.fake_llm import FakeLLM, is_guard, last_user_text
from voicebot.common.audio import float_to_pcm16
from voicebot.devstack import ROOT, Stack, free_port, start_brain_and_gateway, start_speech

RATE = 16000
FRAME = RATE * 20 // 1000 * 2
QUESTION = "A table for two on Tuesday, please."
LONG_REPLY = ("Tuesday at ten works for a table of two. The terrace is heated in the evening, so you can "
              "sit outside. We also have a quiet room at the back for larger groups. Parking is free after "
              "six on the street. Shall I book the terrace for you?")
STAGES = ("endpoint", "stt", "llm_ttft", "tts_ttfa", "voice_to_voice")


class Person:
    """Microphone on (20 ms frames, real time), everything received time-stamped."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.events: list[tuple[float, str, dict | int]] = []
        self.queue: list[bytes] = []
        self.first_speech_at: float | None = None
        self._speech_frames = 0
        self._tasks = [asyncio.create_task(self._mic()), asyncio.create_task(self._receive())]

    async def _mic(self) -> None:
        due = time.perf_counter()
        while True:
            if self.queue:
                data = self.queue.pop(0)
                if self._speech_frames == 0:
                    self.first_speech_at = time.perf_counter()
                self._speech_frames += 1
            else:
                data = bytes(FRAME)
            await self.ws.send(data)
            due = max(due + 0.02, time.perf_counter())
            await asyncio.sleep(due - time.perf_counter())

    async def _receive(self) -> None:
        async for message in self.ws:
            now = time.perf_counter()
            if isinstance(message, bytes):
                self.events.append((now, "audio", len(message)))
            else:
                data = json.loads(message)
                self.events.append((now, data["type"], data))

    def say(self, pcm: bytes) -> None:
        self._speech_frames = 0
        self.queue += [pcm[i:i + FRAME].ljust(FRAME, b"\0") for i in range(0, len(pcm), FRAME)]

    def audio_ms(self) -> float:
        return sum(n for _, kind, n in self.events if kind == "audio") / (2 * RATE) * 1000

    async def wait(self, check, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def has(self, kind: str) -> bool:
        return any(k == kind for _, k, _ in self.events)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def person(url: str):
    async with websockets.connect(url, additional_headers={"Authorization": "Bearer tok-bench"}) as ws:
        await ws.send(json.dumps({"type": "session.start", "session_id": None, "language": "en",
                                  "audio": {"encoding": "pcm16", "sample_rate": RATE}}))
        json.loads(await asyncio.wait_for(ws.recv(), 10))
        p = Person(ws)
        try:
            yield p
        finally:
            await p.close()


async def barge_in_trial(url: str, interruption: bytes) -> dict | None:
    async with person(url) as p:
        await p.ws.send(json.dumps({"type": "input.text", "text": QUESTION}))
        if not await p.wait(lambda: p.audio_ms() >= 1500, 60):
            return None
        p.say(interruption)
        if not await p.wait(lambda: p.has("interrupt"), 30):
            return None
        interrupt_at = next(t for t, k, _ in p.events if k == "interrupt")
        last_audio = max(t for t, k, _ in p.events if k == "audio" and t < interrupt_at)
        await p.wait(lambda: p.has("turn.metrics"), 60)
        metrics = next((d["ms"] for _, k, d in p.events if k == "turn.metrics"), None)
        return {"speech_to_last_audio_ms": max(0.0, last_audio - p.first_speech_at) * 1000,
                "speech_to_interrupt_ms": (interrupt_at - p.first_speech_at) * 1000, "metrics": metrics}


async def false_start_trial(url: str, sound: bytes) -> bool:
    """True when the short sound interrupted the reply."""
    async with person(url) as p:
        await p.ws.send(json.dumps({"type": "input.text", "text": QUESTION}))
        if not await p.wait(lambda: p.audio_ms() >= 1500, 60):
            raise RuntimeError("no reply audio")
        p.say(sound)
        await asyncio.sleep(2.5)
        return p.has("interrupt")


def gateway_barge_ins(log_path) -> list[dict]:
    records = []
    for line in log_path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            record = json.loads(line)
            if record.get("msg") == "barge-in":
                records.append(record)
    return records


def start_stack(stack: Stack, llm: FakeLLM) -> tuple[str, object]:
    redis_port = free_port()
    stack.start_redis(redis_port)
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    stt, tts = start_speech(stack)
    _, gateway = start_brain_and_gateway(stack, redis_url=redis_url, llm_base_url=llm.base_url,
                                         tokens="tok-bench=bench", stt=stt, tts=tts)
    return f"ws://127.0.0.1:{gateway.ready['http']}/v1/call", gateway.log_path


async def run(trials: int, false_starts: int) -> dict:
    llm = FakeLLM(script=lambda body: "ALLOW" if is_guard(body) else (
        LONG_REPLY if last_user_text(body) == QUESTION else "Okay, three people then.")).start()
    stack = Stack(ROOT / ".run" / "bench-bargein", quiet=True)
    try:
        url, gateway_log = start_stack(stack, llm)
        interruption = float_to_pcm16(np.concatenate([speech("Make it three people please."), silence(200)]))
        uh = float_to_pcm16(np.concatenate([vowel(150), silence(200)]))
        client = [r for r in [await barge_in_trial(url, interruption) for _ in range(trials)] if r]
        interrupted = [await false_start_trial(url, uh) for _ in range(false_starts)]
        await asyncio.sleep(0.5)
        server = gateway_barge_ins(gateway_log)
    finally:
        stack.stop()
        llm.stop()
    return summarise(client, server, interrupted)


def summarise(client: list[dict], server: list[dict], interrupted: list[bool]) -> dict:
    def stats(values: list[float]) -> dict:
        def pct(q: float) -> float:
            value = percentile(values, q)
            return float("nan") if value is None else value  # the table prints "nan" for none

        return {"p50": pct(0.5), "p95": pct(0.95), "n": len(values)}

    return {
        "gateway": {key: stats([r[key] for r in server]) for key in
                    ("last_audio_ms", "confirmed_ms", "interrupt_ms", "onset_to_speech_started_ms")},
        "client": {key: stats([r[key] for r in client]) for key in
                   ("speech_to_last_audio_ms", "speech_to_interrupt_ms")},
        "spoken_turn_stages_ms": {stage: stats([r["metrics"][stage] for r in client
                                                if r["metrics"] and r["metrics"].get(stage) is not None])
                                  for stage in STAGES},
        "confirmed_by": {reason: sum(r["reason"] == reason for r in server)
                         for reason in ("partial", "min_speech", "final")},
        "false_starts": {"trials": len(interrupted), "interrupted": sum(interrupted)},
    }


def table(results: dict) -> str:
    rows = ["measure                                             p50 ms   p95 ms    n",
            "--------------------------------------------------  -------  -------  ---"]
    labels = {
        ("gateway", "last_audio_ms"): "SpeechStarted at gateway -> last reply frame sent",
        ("gateway", "confirmed_ms"): "SpeechStarted at gateway -> barge-in confirmed",
        ("gateway", "interrupt_ms"): "SpeechStarted at gateway -> interrupt sent",
        ("gateway", "onset_to_speech_started_ms"): "speech onset -> SpeechStarted (stream time)",
        ("client", "speech_to_last_audio_ms"): "client: first speech frame -> last reply frame",
        ("client", "speech_to_interrupt_ms"): "client: first speech frame -> interrupt",
    }
    for (group, key), label in labels.items():
        s = results[group][key]
        rows.append(f"{label:<50}  {s['p50']:>7.1f}  {s['p95']:>7.1f}  {s['n']:>3}")
    rows += ["", "spoken turn stage   p50 ms   p95 ms    n", "------------------  -------  -------  ---"]
    for stage, s in results["spoken_turn_stages_ms"].items():
        rows.append(f"{stage:<18}  {s['p50']:>7.0f}  {s['p95']:>7.0f}  {s['n']:>3}")
    fs = results["false_starts"]
    rows += ["", f"confirmed by: {results['confirmed_by']}",
             f"false starts (150 ms 'uh' over the reply): {fs['interrupted']} of {fs['trials']} interrupted"]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--false-starts", type=int, default=5)
    args = parser.parse_args()
    results = asyncio.run(run(args.trials, args.false_starts))
    print(table(results))
    print(json.dumps({"bargein": results}))


if __name__ == "__main__":
    main()
