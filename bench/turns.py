"""``make bench-turns``: the end-of-turn model against the fixed silence timer, in one run, at the client.

The stack ``make run`` starts (local LLM, brain, TTS, the restaurant's MCP server), with two STT
services side by side: one as configured (the end-of-turn model, the default) and one with
``STT_TURN_MODEL=off`` (the fixed ``STT_MIN_SILENCE_MS`` timer), each behind its own brain and
gateway. Each request goes to both, one after the other, in a fresh session, streamed over the
WebSocket in real-time 20 ms frames:

- voices: real people (``bench/human_speech.py``: read prompts from a Debian package, spontaneous
  speech from a PyPI sdist's test data) and two synthetic families (piper, espeak-ng);
- held back: one sentence with a thinking pause of 300-900 ms inside ("My name is … Jordan
  Blake"), piper (its comma pause stretched to the length), a person's read prompt (its longest
  inner gap stretched), a person's own pauses, and espeak-ng voices at several
  speeds (an SSML break); the caller is *cut off* when the reply to half the sentence reaches
  their ears: reply audio of a turn whose ``transcript.final`` came before the caller's last
  voiced frame (an early final whose reply the gateway cancelled unheard, the turn going on with
  both parts, is a *resumed* turn, not a cut-off; ``early final`` counts those finals alone);
- complete: a question or request said in one go; the *endpoint delay* is the caller's last
  voiced frame → the first ``transcript.final`` at the client, and voice to voice is the last
  voiced frame → the reply's first audio.

Then four callers at once stream the complete requests straight to each STT (gRPC): the
model's inference time from the service's histogram (``voicebot_stt_turn_model_seconds``,
interpolated in its buckets) and, for both services, SpeechStarted after the true onset (how
late audio frames are handled while the model runs). Per side, the gateway's count of replies
cancelled unheard (``voicebot_gateway_replies_cancelled_unheard_total``). Prints a table and JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.stats import percentile
from voicebot.common.audio import float_to_pcm16
from voicebot.devstack import (
    Stack,
    free_port,
    redis_url_for,
    speech_env,
    start_brain_and_gateway,
    start_local_llm,
    start_mcp_servers,
)

RATE = 16000
FRAME = RATE // 50 * 2  # 20 ms of PCM16
TOKEN = "tok-turns"
VOICES: list[tuple[str, str, int]] = [("piper", "", 0), ("espeak", "en-us", 165), ("espeak", "en-gb", 180),
                                      ("espeak", "en-us+f3", 150)]
# Where people stop to think: after "my name is", before the time, inside a list.
HELD_BACK = [("My name is", "Jordan Blake."), ("A table for two,", "tomorrow at seven."),
             ("I would like to book a table for", "four people on Friday."),
             ("Could you move my reservation to", "Saturday evening?")]
PAUSES_MS = (300, 500, 700, 900)
COMPLETE = ["Do you have vegetarian dishes?", "Can I bring my dog?", "Is there parking nearby?",
            "What time do you close on Sundays?", "My name is Jordan Blake.",
            "A table for two tomorrow at seven."]
SIDES = ("model", "timer")


# ---- speech ----------------------------------------------------------------
def _espeak_ssml(text: str, voice: str, speed: int) -> np.ndarray:
    from bench.stt import _cached_wav, _trim

    def make(out: Path) -> None:
        subprocess.run(["espeak-ng", "-m", "-v", voice, "-s", str(speed), "-w", str(out),
                        f"<speak>{text}</speak>"], check=True, capture_output=True)

    return _trim(_cached_wav(f"espeak-ssml|{voice}|{speed}|{text}", make) * 0.8)


def _longest_gap(audio: np.ndarray, level: float = 0.02) -> tuple[int, int]:
    loud = np.where(np.abs(audio) > level)[0]
    steps = np.diff(loud)
    k = int(np.argmax(steps))
    return int(loud[k]) + 80, int(loud[k + 1]) - 80


def held_back(first: str, rest: str, pause_ms: int, voice: tuple[str, str, int]) -> np.ndarray:
    """One sentence with exactly ``pause_ms`` of silence where the speaker stops to think."""
    from bench.stt import piper_speech

    kind, name, speed = voice
    if kind == "piper":  # piper has no break: its comma pause, stretched, is the thinking pause
        audio = piper_speech(f"{first.rstrip(',')}, {rest}")
    else:
        audio = _espeak_ssml(f"{first} <break time='{pause_ms}ms'/> {rest}", name, speed)
    start, end = _longest_gap(audio)
    return np.concatenate([audio[:start], np.zeros(RATE * pause_ms // 1000, np.float32), audio[end:]])


def complete(text: str, voice: tuple[str, str, int]) -> np.ndarray:
    from bench.stt import espeak_speech, piper_speech

    kind, name, speed = voice
    return piper_speech(text) if kind == "piper" else espeak_speech(text, name, speed)


@dataclass
class Request:
    kind: str  # held_back | complete
    text: str
    voice: str
    pause_ms: int
    audio: np.ndarray


def human_requests() -> list[Request]:
    """Real people (bench/human_speech.py): read prompts said in one go (complete), some of them
    with a thinking pause stretched into their longest inner gap (held back), and spontaneous
    speech whose pauses are the speaker's own (held back, its longest inner pause as the pause)."""
    from bench import human_speech

    prompts = human_speech.read_prompts(12)
    out = [Request("complete", c.text, "human read", 0, c.audio) for c in prompts[:8]]
    out += [Request("complete", c.text, "human read", 0, c.audio) for c in human_speech.read_aloud()]
    for j, clip in enumerate(c for c in prompts[8:]):
        pause = PAUSES_MS[j % len(PAUSES_MS)]
        start, end = _longest_gap(clip.audio)
        audio = np.concatenate([clip.audio[:start], np.zeros(RATE * pause // 1000, np.float32),
                                clip.audio[end:]])
        out.append(Request("held_back", clip.text, "human read", pause, audio))
    for clip in human_speech.spontaneous():
        start, end = _longest_gap(clip.audio)
        pause = round((end - start + 160) * 1000 / RATE)  # _longest_gap leaves 80 samples either side
        out.append(Request("held_back", clip.name, "human spontaneous", pause, clip.audio))
    return out


def requests() -> list[Request]:
    out = human_requests()
    for i, (first, rest) in enumerate(HELD_BACK):
        for j, pause in enumerate(PAUSES_MS):
            voice = VOICES[(i + j) % len(VOICES)]
            out.append(Request("held_back", f"{first} … {rest}", f"{voice[0]} {voice[1]}".strip(), pause,
                               held_back(first, rest, pause, voice)))
    for i, text in enumerate(COMPLETE):
        for voice in (VOICES[i % len(VOICES)], VOICES[(i + 2) % len(VOICES)]):
            out.append(Request("complete", text, f"{voice[0]} {voice[1]}".strip(), 0, complete(text, voice)))
    return out


# ---- the client --------------------------------------------------------------
@dataclass
class Outcome:
    side: str
    kind: str
    text: str
    voice: str
    pause_ms: int
    finals: list[str]
    cut_off: bool  # the reply to half the sentence reached the caller
    early_final: bool  # a final before the caller's last voiced frame (heard or not)
    resumed: bool  # an early final's turn went on: a later final holds its words and more
    endpoint_ms: float | None
    v2v_ms: float | None
    cancelled_unheard: int = 0  # the gateway's replies cancelled unheard during this call


async def call(url: str, request: Request, side: str, timeout: float = 30.0) -> Outcome:
    """One session: a little silence, the request at real-time pace, then silence until the
    reply is heard (complete) or the final of the sentence's end came (held back)."""
    import websockets

    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"},
                                  max_size=2**22) as ws:
        await ws.send(json.dumps({"type": "session.start", "session_id": None, "language": "en",
                                  "audio": {"encoding": "pcm16", "sample_rate": RATE}}))
        while json.loads(await asyncio.wait_for(ws.recv(), 10)).get("type") != "session.started":
            pass
        received: list[tuple[float, str, Any]] = []

        async def listen() -> None:
            async for message in ws:
                now = time.perf_counter()
                if isinstance(message, bytes):
                    received.append((now, "audio", None))
                else:
                    event = json.loads(message)
                    received.append((now, event["type"], event))

        listener = asyncio.create_task(listen())
        pcm = float_to_pcm16(np.concatenate([np.zeros(RATE // 2, np.float32), request.audio]))
        last_voiced = await _speak(ws, pcm, request.audio)
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            kinds = [k for _, k, _ in received]
            # Held back: listen until the final of the sentence's end has come (however slow the
            # machine) and 2 s after the caller's last word, so a reply to its first half is heard.
            ended = [t for t, k, _ in received if k == "transcript.final" and t >= last_voiced]
            if request.kind == "held_back" and ended and time.perf_counter() > max(last_voiced + 2.0,
                                                                                     ended[0] + 0.5):
                break
            if "turn.metrics" in kinds and ("audio.end" in kinds or "audio" not in kinds):
                break
            await ws.send(bytes(FRAME))
            await asyncio.sleep(0.02)
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await listener
    return outcome(received, last_voiced, request, side)


def outcome(received: list[tuple[float, str, Any]], last_voiced: float, request: Request,
            side: str) -> Outcome:
    """What the caller got: the finals, whether the reply to an early one was heard, the delays.
    Audio frames belong to the turn of the ``audio.start`` before them."""
    finals = [(t, e.get("text", ""), e.get("turn_id")) for t, k, e in received if k == "transcript.final"]
    early = {turn for t, _, turn in finals if t < last_voiced}
    heard_turns, turn = set(), None
    for _t, kind, event in received:
        if kind == "audio.start":
            turn = event.get("turn_id")
        elif kind == "audio" and turn is not None:
            heard_turns.add(turn)
    texts = [text for _, text, _ in finals]
    resumed = any(later.startswith(earlier.rstrip(".?!,").strip()) and len(later) > len(earlier)
                  for i, earlier in enumerate(texts) for later in texts[i + 1:])
    # The endpoint: the first final after the last voiced frame (an early one was no endpoint of
    # the whole request), else the first.
    late = [t for t, _, _ in finals if t >= last_voiced]
    endpoint = late[0] if late else (finals[0][0] if finals else None)
    audio = next((t for t, k, _ in received if k == "audio" and t > last_voiced), None)
    ms = lambda t: None if t is None else round((t - last_voiced) * 1000, 1)  # noqa: E731
    return Outcome(side, request.kind, request.text, request.voice, request.pause_ms, texts,
                   cut_off=bool(early & heard_turns), early_final=bool(early), resumed=resumed,
                   endpoint_ms=ms(endpoint), v2v_ms=ms(audio))


async def _speak(ws, pcm: bytes, audio: np.ndarray) -> float:
    """Send ``pcm`` in 20 ms frames at real time; the send time of the last frame with speech in it."""
    loud = np.where(np.abs(audio) > 0.02)[0]
    last_frame = (RATE // 2 + int(loud[-1])) * 2 // FRAME
    due, last_voiced = time.perf_counter(), time.perf_counter()
    for k, start in enumerate(range(0, len(pcm), FRAME)):
        await ws.send(pcm[start:start + FRAME].ljust(FRAME, b"\0"))
        if k == last_frame:
            last_voiced = time.perf_counter()
        due += 0.02
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
    return last_voiced


# ---- four streams straight to STT ------------------------------------------------
async def concurrent_stt(addr: str, metrics_port: int, streams: int = 4) -> dict[str, Any]:
    from bench import stt as stt_bench

    clips = [c for c in stt_bench.build_clips() if "-pause" not in c.name]
    before = _histogram(metrics_port)
    results = await stt_bench.run_level(addr, clips, streams, "en")
    after = _histogram(metrics_port)
    started = [r.started_ms for r in results if r.started_ms is not None]
    return {"speech_started_ms": _stat(started), "turn_model_ms": _bucket_quantiles(before, after)}


CANCELLED_UNHEARD = "voicebot_gateway_replies_cancelled_unheard_total"


def _counter(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as reply:
        body = reply.read().decode()
    found = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(found.group(1)) if found else 0.0


def _histogram(port: int) -> dict[float, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        body = reply.read().decode()
    found = re.findall(r'voicebot_stt_turn_model_seconds_bucket\{le="([^"]+)"\} (\S+)', body)
    return {float(le): float(v) for le, v in found}


def _bucket_quantiles(before: dict[float, float], after: dict[float, float]) -> dict[str, float | None]:
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1] if counts else 0

    def quantile(q: float) -> float | None:
        if not total:
            return None
        lower, below = 0.0, 0.0
        for le, cumulative in counts:
            if cumulative >= q * total:
                if le == float("inf"):
                    return round(lower * 1000, 1)
                share = (q * total - below) / max(cumulative - below, 1e-9)
                return round((lower + (le - lower) * share) * 1000, 1)
            lower, below = le, cumulative
        return None

    return {"p50": quantile(0.5), "p95": quantile(0.95), "n": int(total)}


# ---- report ------------------------------------------------------------------------
def _stat(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}


def summarise(outcomes: list[Outcome], side: str) -> dict[str, Any]:
    mine = [o for o in outcomes if o.side == side]
    held = [o for o in mine if o.kind == "held_back"]
    done = [o for o in mine if o.kind == "complete"]
    by_pause = {p: f"{sum(o.cut_off for o in held if o.pause_ms == p)}/{sum(o.pause_ms == p for o in held)}"
                for p in PAUSES_MS}
    upto_700 = [o for o in held if o.pause_ms <= 700]
    families = sorted({o.voice.split()[0] for o in held})
    return {
        "by_voice_set": {f: _voice_set([o for o in mine if o.voice.startswith(f)])
                         for f in sorted({o.voice.split()[0] for o in mine})},
        "cut_off": f"{sum(o.cut_off for o in held)}/{len(held)}",
        "cut_off_by_voice": {f: f"{sum(o.cut_off for o in held if o.voice.startswith(f))}/"
                                f"{sum(o.voice.startswith(f) for o in held)}" for f in families},
        "early_final": f"{sum(o.early_final for o in held)}/{len(held)}",
        "resumed": f"{sum(o.resumed for o in mine)}/{len(mine)}",
        "cut_off_upto_700ms": f"{sum(o.cut_off for o in upto_700)}/{len(upto_700)}",
        "cut_off_by_pause": by_pause,
        "endpoint_ms": _stat([o.endpoint_ms for o in done if o.endpoint_ms is not None]),
        "v2v_ms": _stat([o.v2v_ms for o in done if o.v2v_ms is not None]),
        "complete_misses": sum(o.endpoint_ms is None or o.cut_off or (len(o.finals) != 1 and not o.resumed)
                               for o in done),
    }


def _voice_set(mine: list[Outcome]) -> dict[str, Any]:
    """One voice set's figures: cut-offs by a pause of at most 700 ms, resumed turns, delays on
    complete requests, replies cancelled unheard."""
    upto_700 = [o for o in mine if o.kind == "held_back" and o.pause_ms <= 700]
    done = [o for o in mine if o.kind == "complete"]
    return {"cut_off_upto_700ms": f"{sum(o.cut_off for o in upto_700)}/{len(upto_700)}",
            "resumed": f"{sum(o.resumed for o in mine)}/{len(mine)}",
            "endpoint_ms": _stat([o.endpoint_ms for o in done if o.endpoint_ms is not None]),
            "v2v_ms": _stat([o.v2v_ms for o in done if o.v2v_ms is not None]),
            "complete": len(done), "cancelled_unheard": sum(o.cancelled_unheard for o in mine)}


def _pair(d: dict) -> str:
    return f"{d['p50']:.0f}/{d['p95']:.0f}" if d.get("p50") is not None else "-"


def voice_table(report: dict[str, Any]) -> str:
    rows = [["side", "voice set", "cut off ≤700 ms", "resumed", "endpoint p50/p95", "v2v p50/p95",
             "complete", "cancelled unheard"]]
    for side in report["sides"]:
        for family, v in report["sides"][side]["by_voice_set"].items():
            rows.append([side, family, v["cut_off_upto_700ms"], v["resumed"], _pair(v["endpoint_ms"]),
                         _pair(v["v2v_ms"]), str(v["complete"]), str(v["cancelled_unheard"])])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows)


def table(report: dict[str, Any]) -> str:
    pair = _pair

    rows = [["", "cut off (all)", "cut off ≤700 ms", "by pause 300/500/700/900", "early final", "resumed",
             "cancelled unheard", "endpoint p50/p95", "v2v p50/p95", "model ms p50/p95 (4 streams)",
             "SpeechStarted p50/p95 (4 streams)"]]
    for side in report["sides"]:
        s, c = report["sides"][side], report["concurrent"][side]
        by_voice = " ".join(f"{f} {v}" for f, v in s["cut_off_by_voice"].items())
        rows.append([side, f"{s['cut_off']} ({by_voice})", s["cut_off_upto_700ms"],
                     " ".join(s["cut_off_by_pause"].values()),
                     s["early_final"], s["resumed"], f"{report['cancelled_unheard'][side]:g}",
                     pair(s["endpoint_ms"]), pair(s["v2v_ms"]),
                     pair(c["turn_model_ms"]) if side == "model" else "-", pair(c["speech_started_ms"])])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows)


# ---- main --------------------------------------------------------------------------
async def main_async(model_env: dict[str, str], sides: tuple[str, ...] = SIDES,
                     limit: int = 0) -> dict[str, Any]:
    stack = Stack(Path(tempfile.mkdtemp(prefix="bench-turns-")), quiet=False)
    try:
        redis_port = free_port()
        stack.start_redis(redis_port)
        redis_url = redis_url_for(redis_port)
        llm_url, llm_env = start_local_llm(stack)
        env = speech_env("restaurant")
        tts = stack.start_service("tts", "voicebot.tts.server",
                                  {**env, "TTS_PORT": "0", "TTS_METRICS_PORT": "0"})
        timer = {"STT_TURN_MODEL": "off"}
        stts = {side: stack.start_service(f"stt-{side}", "voicebot.stt.server", {
            **env, "STT_PORT": "0", "STT_METRICS_PORT": "0", **(timer if side == "timer" else model_env)})
            for side in sides}
        _, profile_env = start_mcp_servers(stack, "restaurant", {"RESERVATIONS_DB": ":memory:",
                                                                "RESERVATIONS_TODAY": "2026-11-30"})
        urls, metrics = {}, {}
        for side in sides:
            _, gateway = start_brain_and_gateway(
                stack, redis_url=redis_url, llm_base_url=llm_url, tokens=f"{TOKEN}=bench", stt=stts[side],
                tts=tts, name=side, brain_env={**profile_env, **llm_env, "BRAIN_TODAY": "2026-11-30"})
            urls[side] = f"ws://127.0.0.1:{gateway.ready['http']}/v1/call"
            metrics[side] = f"http://127.0.0.1:{gateway.ready['http']}/metrics"
        cancelled_before = {side: _counter(metrics[side], CANCELLED_UNHEARD) for side in sides}
        todo = await asyncio.to_thread(requests)
        if 0 < limit < len(todo):
            todo = [todo[round(k * len(todo) / limit)] for k in range(limit)]
        outcomes: list[Outcome] = []
        for i, request in enumerate(todo):
            # Both sides hear each request back to back, in alternating order.
            for side in (sides if i % 2 == 0 else sides[::-1]):
                before = _counter(metrics[side], CANCELLED_UNHEARD)
                o = await call(urls[side], request, side)
                o.cancelled_unheard = round(_counter(metrics[side], CANCELLED_UNHEARD) - before)
                outcomes.append(o)
                flag = "CUT" if o.cut_off else ("RES" if o.resumed else "   ")
                print(f"  {side:5s} {request.kind:9s} {request.pause_ms:4d} {flag} ep {o.endpoint_ms!s:>7} "
                      f"v2v {o.v2v_ms!s:>7}  {request.voice:16s} {request.text[:40]:40s} → {o.finals}",
                      flush=True)
        cancelled = {side: _counter(metrics[side], CANCELLED_UNHEARD) - cancelled_before[side]
                     for side in sides}
        concurrent = {side: await concurrent_stt(f"127.0.0.1:{stts[side].ready['grpc']}",
                                                 stts[side].ready["metrics"]) for side in sides}
    finally:
        stack.stop()
    return {"sides": {side: summarise(outcomes, side) for side in sides}, "concurrent": concurrent,
            "cancelled_unheard": cancelled, "outcomes": [asdict(o) for o in outcomes]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json-out", help="also write every request's outcome here")
    parser.add_argument("--model-env", action="append", default=[], metavar="STT_X=V",
                        help="settings for the model side's STT, e.g. STT_TURN_THRESHOLD=0.3")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help="which STT services to run: model, timer or both (model,timer)")
    parser.add_argument("--limit", type=int, default=0,
                        help="at most this many requests, spread evenly over the set (0: all)")
    args = parser.parse_args()
    sides = tuple(s for s in args.sides.split(",") if s)
    if not sides or set(sides) - set(SIDES):
        parser.error(f"--sides: one or more of {', '.join(SIDES)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    model_env = dict(item.split("=", 1) for item in args.model_env)
    report = asyncio.run(main_async(model_env, sides, args.limit))
    report["model_env"] = model_env
    print(table(report))
    print(voice_table(report))
    print("(cut off: reply audio of a turn whose transcript.final came before the caller's last voiced "
          "frame; early final: such a final, heard or not; resumed: a later final holds an earlier one's "
          "words and more; endpoint: last voiced frame → the first transcript.final after it; v2v: → "
          "first reply audio; ms)")
    print(json.dumps({k: v for k, v in report.items() if k != "outcomes"}, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
