"""Load benchmark (``make bench-load``): N concurrent real-time callers through the real stack.

Starts redis, the real STT (Whisper base) and TTS (piper), the brain with the scripted LLM in a
process of its own (tests/fakes/llm_server.py: the LLM tier is not what is measured here) and
the gateway, all on random ports. Then, for each N (``--sessions``, default 10,25,50,75), opens N
WebSocket sessions that send 20 ms frames of silence at real-time pace, as open microphones do;
``--speakers`` of them (default 10 %, at least 2) say a generated sentence (piper, a separate
voice process: bench/stt.py) every ``--period`` seconds. Over ``--seconds`` it counts:

- sessions refused at connect (the gateway's ``GATEWAY_MAX_SESSIONS``: error ``overloaded``,
  close 1013) and sessions dropped afterwards (closed by the server mid-call);
- error events by code (``overloaded`` from the STT stream cap, once per refused stream, and
  ``rate_limited``, ``upstream_unavailable``);
- spoken turns: end of speech (the last speech frame sent) -> first reply audio, p50/p95/p99,
  and turns with no reply audio within 10 s (missed);
- the gateway's own ``voice_to_voice`` from ``turn.metrics``, and the client's send lag (a
  late sender would make every figure look worse than the stack is).

The capacity line names the largest N with nothing refused, dropped or missed and no error
event. Everything shares this machine's cores (the client too); on the 2-core CI box the figures
are an upper bound. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field

import httpx
import numpy as np
import websockets

from bench.stats import percentile
from voicebot.common.audio import float_to_pcm16
from voicebot.devstack import ROOT, Stack, free_port, redis_url_for, start_brain_and_gateway, start_speech

RATE = 16000
FRAME_MS = 20
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
SILENCE = bytes(FRAME_BYTES)
TOKEN = "tok-load"
MISSED_AFTER_S = 10.0
CLOSING_FRAMES = 1000 // FRAME_MS  # 1 s of silence after each sentence: the endpointer closes it
SENTENCES = (
    "Do you have a table for two tonight?",
    "What time do you open on Friday?",
    "Can I bring my dog to the restaurant?",
    "I would like to book a table for four people.",
)


def utterances() -> list[list[bytes]]:
    """The sentences as 20 ms PCM16 frames, with 1 s of closing silence (the endpoint)."""
    from bench.stt import piper_speech

    out = []
    for text in SENTENCES:
        closing = np.zeros(CLOSING_FRAMES * FRAME_BYTES // 2, np.float32)
        pcm = float_to_pcm16(np.concatenate([piper_speech(text), closing]))
        out.append([pcm[i:i + FRAME_BYTES].ljust(FRAME_BYTES, b"\0")
                    for i in range(0, len(pcm), FRAME_BYTES)])
    return out


@dataclass
class Caller:
    ws: websockets.ClientConnection
    phase: int
    speaker: bool
    next_turn_at: float
    queued: list[bytes] = field(default_factory=list)
    speech_end_at: float | None = None  # the last speech frame of the pending turn went out then
    turns_ms: list[float] = field(default_factory=list)
    v2v_ms: list[float] = field(default_factory=list)
    missed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    closed: int | None = None

    def frame(self, now: float, speech: list[list[bytes]], period: tuple[float, float]) -> bytes:
        if self.queued:
            frame = self.queued.pop(0)
            if len(self.queued) == CLOSING_FRAMES:  # only the closing silence is left: speech ended
                self.speech_end_at = now
            return frame
        if self.speech_end_at is not None and now - self.speech_end_at > MISSED_AFTER_S:
            self.missed += 1
            self.speech_end_at = None
        if self.speaker and self.speech_end_at is None and now >= self.next_turn_at:
            self.queued = list(random.choice(speech))
            self.next_turn_at = now + random.uniform(*period)
            return self.queued.pop(0)
        return SILENCE

    async def receive(self) -> None:
        try:
            async for message in self.ws:
                if isinstance(message, bytes):
                    if self.speech_end_at is not None:
                        self.turns_ms.append((time.perf_counter() - self.speech_end_at) * 1000)
                        self.speech_end_at = None
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    self.errors[event["code"]] = self.errors.get(event["code"], 0) + 1
                elif event["type"] == "turn.metrics" and event["ms"].get("voice_to_voice") is not None:
                    self.v2v_ms.append(event["ms"]["voice_to_voice"])
        except websockets.ConnectionClosed as closed:
            self.closed = closed.rcvd.code if closed.rcvd else 1006


async def open_caller(url: str, phase: int, speaker: bool, first_turn_at: float) -> Caller | tuple[str, int]:
    """A started session, or ("refused", close code or error code) when the gateway said no."""
    ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"},
                                  max_size=2**22, ping_interval=None, open_timeout=30)
    # A gateway at its cap says why and closes at once, maybe before this send: the reason is
    # still there to read.
    with contextlib.suppress(websockets.ConnectionClosed):
        await ws.send(json.dumps({"type": "session.start", "session_id": None, "language": "en",
                                  "audio": {"encoding": "pcm16", "sample_rate": RATE}}))
    try:
        first = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if first.get("type") == "error":  # the refusal's reason comes before its close
            with contextlib.suppress(websockets.ConnectionClosed, TimeoutError):
                await asyncio.wait_for(ws.recv(), 5)
            return ("refused", first.get("code", "?"))
    except websockets.ConnectionClosed as closed:
        return ("refused", closed.rcvd.code if closed.rcvd else 1006)
    return Caller(ws, phase, speaker, first_turn_at)


async def run_level(url: str, count: int, speakers: int, seconds: float, period: tuple[float, float],
                    speech: list[list[bytes]], warmup_s: float = 3.0) -> dict:
    phases = 5  # frames spread over the 20 ms, as independent clients' are
    start = time.perf_counter()
    opened = await asyncio.gather(*(
        open_caller(url, i % phases, i < speakers, start + warmup_s + random.uniform(0, period[0]))
        for i in range(count)), return_exceptions=True)
    callers = [c for c in opened if isinstance(c, Caller)]
    refused = [c[1] for c in opened if isinstance(c, tuple)]
    failed = [repr(c) for c in opened if isinstance(c, BaseException)]
    receivers = [asyncio.create_task(c.receive()) for c in callers]
    lag_ms: list[float] = []
    measure_from = time.perf_counter() + warmup_s
    end = measure_from + seconds
    tick = time.perf_counter()
    measuring = False
    while (now := time.perf_counter()) < end:
        # Errors count from the session's start: a refused STT stream is told then, once.
        measuring = measuring or now >= measure_from
        phase = int((now - tick) * 1000 // (FRAME_MS / phases)) % phases
        for c in callers:
            if c.phase == phase and c.closed is None:
                with contextlib.suppress(websockets.ConnectionClosed):
                    await c.ws.send(c.frame(now, speech, period))
        if measuring:
            lag_ms.append(max(0.0, (time.perf_counter() - now) * 1000))
        await asyncio.sleep(max(0.0, FRAME_MS / phases / 1000 - (time.perf_counter() - now)))
    # A turn still waiting when the window closes gets its reply's chance: up to MISSED_AFTER_S.
    for _ in range(int(MISSED_AFTER_S / 0.05)):
        if not any(c.speech_end_at is not None and c.closed is None for c in callers):
            break
        await asyncio.sleep(0.05)
    missed_at_end = sum(c.speech_end_at is not None for c in callers)
    dropped = sum(c.closed is not None for c in callers)
    for c in callers:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(c.ws.close(), 2)
    for task in receivers:
        task.cancel()
    await asyncio.gather(*receivers, return_exceptions=True)
    turns = [t for c in callers for t in c.turns_ms]
    v2v = [t for c in callers for t in c.v2v_ms]
    errors: dict[str, int] = {}
    for c in callers:
        for code, n in c.errors.items():
            errors[code] = errors.get(code, 0) + n
    refused_codes: dict[str, int] = {}
    for code in refused:
        refused_codes[str(code)] = refused_codes.get(str(code), 0) + 1
    return {
        "sessions": count, "speakers": min(speakers, count), "admitted": len(callers),
        "refused": len(refused), "refused_by": refused_codes, "connect_failures": failed,
        "dropped": dropped, "errors": errors, "failed": len(failed),
        "sessions_with_errors": {code: sum(code in c.errors for c in callers) for code in errors},
        "turns": len(turns), "missed_turns": sum(c.missed for c in callers) + missed_at_end,
        "turn_p50_ms": percentile(turns, 0.5), "turn_p95_ms": percentile(turns, 0.95),
        "turn_p99_ms": percentile(turns, 0.99), "v2v_p50_ms": percentile(v2v, 0.5),
        "v2v_p95_ms": percentile(v2v, 0.95), "send_lag_p99_ms": percentile(lag_ms, 0.99),
    }


async def until_idle(http_url: str, timeout: float = 30.0) -> None:
    """Wait until the gateway has closed the last level's sessions (they hold slots and streams)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            text = (await http.get(f"{http_url}/metrics")).text
            if "\nvoicebot_active_sessions 0.0" in text and "\nvoicebot_gateway_stt_streams 0.0" in text:
                return
            await asyncio.sleep(0.2)


def clean(level: dict) -> bool:
    return not (level["refused"] or level["dropped"] or level["missed_turns"] or level["errors"]
                or level["connect_failures"])


def fmt(value, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def table(results: dict) -> str:
    rows = [f"stack: real STT (max {results['stt_max_streams']} streams) and TTS, scripted LLM; gateway cap "
            f"{results['max_sessions'] or 'none'}; {results['machine']['cores']} cores, load "
            f"{results['machine']['load_avg_at_start'][0]:.1f} at start; "
            f"{results['seconds']:.0f} s per level",
            "   N  speak  admitted  refused  dropped  turns  missed  p50 ms  p95 ms  p99 ms  v2v p50  "
            "send lag p99  errors (code:events/sessions)",
            "----  -----  --------  -------  -------  -----  ------  ------  ------  ------  -------  "
            "------------  ----------------------------"]
    for r in results["levels"]:
        errors = ", ".join(f"{code}:{n}/{r['sessions_with_errors'][code]}"
                           for code, n in sorted(r["errors"].items())) or "0"
        refused = f"{r['refused']}" + (f" ({','.join(f'{k}:{v}' for k, v in r['refused_by'].items())})"
                                       if r["refused"] else "")
        if r["failed"]:  # neither admitted nor refused with a reason: a failure of its own
            errors += f"; {r['failed']} connects failed: {r['connect_failures'][0][:80]}"
        rows.append(
            f"{r['sessions']:>4}  {r['speakers']:>5}  {r['admitted']:>8}  {refused:>7}  {r['dropped']:>7}  "
            f"{r['turns']:>5}  {r['missed_turns']:>6}  {fmt(r['turn_p50_ms']):>6}  "
            f"{fmt(r['turn_p95_ms']):>6}  "
            f"{fmt(r['turn_p99_ms']):>6}  {fmt(r['v2v_p50_ms']):>7}  {fmt(r['send_lag_p99_ms'], '.1f'):>12}  "
            f"{errors}")
    rows += ["", "p50/p95/p99: end of speech (last speech frame sent) -> first reply audio at the client; "
             "v2v: the gateway's voice_to_voice", f"capacity: {results['capacity']}"]
    return "\n".join(rows)


def capacity_line(levels: list[dict]) -> str:
    ok = [r["sessions"] for r in levels if clean(r)]
    best = max(ok) if ok else None
    over = [r for r in levels if best is None or r["sessions"] > best]
    said = f"{best} sessions clean (nothing refused, dropped or missed, no error event)" if best \
        else "no level was clean"
    if over:
        first = over[0]
        said += (f"; at {first['sessions']}: {first['refused']} refused at connect, errors "
                 f"{first['errors'] or 0}, {first['dropped']} dropped, {first['missed_turns']} missed turns")
    return said


async def main_async(args) -> dict:
    os.environ.setdefault("VOICEBOT_INTERNAL_TOKEN", secrets.token_urlsafe(32))
    speech = await asyncio.to_thread(utterances)
    stack = Stack(ROOT / ".run" / "bench-load", env={"LOG_JSON": "true"}, quiet=True)
    results: dict = {"machine": {"cores": os.cpu_count(), "load_avg_at_start": os.getloadavg()},
                     "seconds": args.seconds, "max_sessions": args.max_sessions,
                     "stt_max_streams": args.stt_max_streams, "levels": []}
    try:
        redis_port = free_port()
        stack.start_redis(redis_port)
        llm = stack.start_service("fake-llm", "tests.fakes.llm_server", {}, timeout=30)
        stt, tts = start_speech(stack, env={"STT_MAX_STREAMS": str(args.stt_max_streams),
                                            "STT_LOG_LEVEL": "WARNING", "TTS_LOG_LEVEL": "WARNING"})
        _brain, gateway = start_brain_and_gateway(
            stack, redis_url=redis_url_for(redis_port), llm_base_url=f"http://127.0.0.1:{llm.ready['http']}/v1",
            tokens=f"{TOKEN}=load", stt=stt, tts=tts,
            brain_env={"BRAIN_PROFILE": "", "BRAIN_LOG_LEVEL": "WARNING"},
            # One token plays every caller: no per-user cap (GATEWAY_MAX_SESSIONS_PER_USER).
            env={"GATEWAY_MAX_SESSIONS": str(args.max_sessions), "GATEWAY_LOG_LEVEL": "WARNING",
                 "GATEWAY_MAX_SESSIONS_PER_USER": "0"})
        url = f"ws://127.0.0.1:{gateway.ready['http']}/v1/call"
        http_url = f"http://127.0.0.1:{gateway.ready['http']}"
        for count in args.sessions:
            await until_idle(http_url)
            speakers = args.speakers if args.speakers is not None else max(2, round(count * 0.1))
            period = (args.period * 0.75, args.period * 1.25)
            level = await run_level(url, count, speakers, args.seconds, period, speech)
            results["levels"].append(level)
            print(f"  N={count} done", file=sys.stderr, flush=True)
    finally:
        stack.stop()
    results["capacity"] = capacity_line(results["levels"])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=lambda s: [int(x) for x in s.split(",")], default=[10, 25, 50, 75])
    parser.add_argument("--speakers", type=int, default=None,
                        help="callers that speak, per level (default: 10 %% of N, at least 2)")
    parser.add_argument("--period", type=float, default=8.0,
                        help="seconds between a speaker's turns (±25 %%)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window per level")
    parser.add_argument("--max-sessions", type=int, default=200, help="GATEWAY_MAX_SESSIONS (0 = no cap)")
    parser.add_argument("--stt-max-streams", type=int, default=32, help="STT_MAX_STREAMS")
    args = parser.parse_args()
    # A SIGTERM (timeout, kill) unwinds like Ctrl-C, so the stack this bench started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = asyncio.run(main_async(args))
    print(table(results))
    print(json.dumps({"bench_load": results}))


if __name__ == "__main__":
    main()
