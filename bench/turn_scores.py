"""``make bench-turn-scores``: the calibration of the end-of-turn decision, per voice set.

What the two judges of a pause say about a sentence the speaker finished and about one cut at a
real pause inside it (where the speaker went on after a breath or a thought):

- the audio model (Smart Turn v3) on the speech up to the pause and a tail of silence after it,
  for several tail lengths (the model's score rises with the silence it hears);
- the words: the Whisper decode of the same speech, judged by the language's data
  (``voicebot/stt/turn_text.py``): finished, or reads as going on.

Voice sets, never one voice alone: people (``bench/human_speech.py``: read prompts of one speaker
from a Debian package, none of those ``make bench-turns`` uses, and a LibriSpeech sentence and
spontaneous speech from a PyPI sdist's test data, cut at their own pauses), the packaged piper
voice (a comma where the speaker stops) and espeak-ng voices at several speeds (an SSML break).
A *cut* ends at a real pause inside the sentence: the longest stretch of silence between its
words for the generated voices, every pause of at least ``MIN_GAP_MS`` for people.

Then each candidate decision (tail, threshold, short wait) is replayed on these scores: how long
each complete sentence waits, and which cuts end before ``PAUSE_MS`` of silence (a caller's
thinking pause) — so settings are chosen by measurement, on every voice set at once. Prints a
table per voice set and JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.stats import percentile

RATE = 16000
FRAME = RATE // 100  # 10 ms, for finding pauses
MIN_GAP_MS = 120  # a pause of a person, not a stop consonant's closure
MIN_SIDE_S = 0.5  # speech on both sides of a cut
TAILS_MS = (96, 128, 160, 192, 256, 320, 512)  # whole 32 ms frames, as the service counts
THRESHOLDS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.97)
SHORT_WAITS_MS = (320, 400, 512, 600)
PAUSE_MS = 700  # the thinking pause a cut must survive
# An endpoint to the reply's first audio at the client, at the least (make bench-turns: v2v minus
# endpoint): a turn ended sooner than PAUSE_MS - REPLY_MS into the pause is answered before the
# caller goes on.
REPLY_MS = 150
MIN_PAUSE_MS = 160  # a comma inside fluent speech pauses ~200 ms; its words trail off anyway
CUT_KINDS = ("goes_on", "boundary", "cut")
# Sentences a caller says, with "|" where one stops to think: where the words so far cannot end
# a sentence ("goes_on") and where they could ("boundary": neither judge can tell, so such a cut
# must end no sooner than a resumed turn can take it back). None are make bench-turns' own.
SENTENCES = [
    ("goes_on", "My phone number is | oh seven seven, double four."),
    ("goes_on", "I'd like to book a table for | six people on Saturday."),
    ("goes_on", "The appointment was for | my husband, not for me."),
    ("goes_on", "There will be | three adults and two children."),
    ("goes_on", "Could you put me down for | the earliest slot you have?"),
    ("goes_on", "I wanted to ask about | your opening hours at Easter."),
    ("goes_on", "We would like to come on | Thursday, around eight."),
    ("goes_on", "My surname is | Fitzgerald, with a z."),
    ("goes_on", "Can I change my booking to | next Tuesday?"),
    ("goes_on", "I need an appointment with | the dentist this week."),
    ("boundary", "I'd like to change the time | of my appointment."),
    ("boundary", "Do you have a table | for six on Saturday night?"),
    ("boundary", "We are celebrating | my mother's birthday."),
    ("boundary", "I need to see a doctor | about my knee."),
    ("boundary", "Could I get a haircut | on Thursday afternoon?"),
    ("boundary", "We will probably arrive | around half past eight."),
]
ESPEAK = [("en-us", 165), ("en-gb", 180), ("en-us+f3", 150), ("en-us+m3", 190)]


@dataclass
class Item:
    voice_set: str
    name: str
    kind: str  # complete | goes_on | boundary | cut (a person's own pause)
    audio: np.ndarray = field(repr=False)  # speech ending at its last voiced sample (+ 20 ms)
    words: str = ""
    scores: dict[int, float] = field(default_factory=dict)  # tail ms -> probability


# ---- speech and pauses ---------------------------------------------------------
def _frame_level(audio: np.ndarray) -> np.ndarray:
    frames = audio[: len(audio) // FRAME * FRAME].reshape(-1, FRAME)
    return 20 * np.log10(np.sqrt((frames ** 2).mean(axis=1)) + 1e-6)


def pauses(audio: np.ndarray, min_gap_ms: int = MIN_GAP_MS) -> list[tuple[int, int]]:
    """(start, end) samples of each stretch of silence inside ``audio`` of at least ``min_gap_ms``,
    with ``MIN_SIDE_S`` of speech on both sides: a level 35 dB under the loudest frame's."""
    level = _frame_level(audio)
    quiet = level < level.max() - 35
    out, run_start = [], None
    for i, q in enumerate([*quiet, False]):
        if q and run_start is None:
            run_start = i
        elif not q and run_start is not None:
            if (i - run_start) * 10 >= min_gap_ms:
                out.append((run_start * FRAME, i * FRAME))
            run_start = None
    voiced = np.where(~quiet)[0]
    if len(voiced) == 0:
        return []
    first, last = voiced[0] * FRAME, (voiced[-1] + 1) * FRAME
    side = int(MIN_SIDE_S * RATE)
    return [(s, e) for s, e in out if s - first >= side and last - e >= side]


def speech_only(audio: np.ndarray) -> np.ndarray:
    """``audio`` from 100 ms before its first voiced frame to 20 ms after its last."""
    level = _frame_level(audio)
    voiced = np.where(level >= level.max() - 35)[0]
    return audio[max(0, voiced[0] * FRAME - RATE // 10): (voiced[-1] + 1) * FRAME + RATE // 50]


def _cuts(voice_set: str, name: str, audio: np.ndarray, longest_only: bool, kind: str = "cut") -> list[Item]:
    found = pauses(audio)
    if longest_only and found:
        found = [max(found, key=lambda p: p[1] - p[0])]
    return [Item(voice_set, f"{name}@{s / RATE:.2f}s", kind, speech_only(audio[:s + RATE // 50]))
            for s, _ in found]


def human_items(prompts: int) -> list[Item]:
    from bench import human_speech
    from bench.turns import human_requests

    used = {r.text for r in human_requests()}
    clips = [c for c in human_speech.read_prompts(prompts + 16) if c.text not in used][:prompts]
    items = []
    for clip in clips:
        items.append(Item("human", clip.name, "complete", speech_only(clip.audio)))
        items += _cuts("human", clip.name, clip.audio, longest_only=False)
    for clip in human_speech.read_aloud() + human_speech.spontaneous():
        items += _cuts("human", clip.name, clip.audio, longest_only=False)
        if clip.text:
            items.append(Item("human", clip.name, "complete", speech_only(clip.audio)))
    return items


def piper_items() -> list[Item]:
    from bench.stt import piper_speech

    items = []
    for i, (kind, sentence) in enumerate(SENTENCES):
        first, rest = (s.strip() for s in sentence.split("|"))
        items.append(Item("piper", f"s{i}", "complete", speech_only(piper_speech(f"{first} {rest}"))))
        items += _cuts("piper", f"s{i}", piper_speech(f"{first}, {rest}"), longest_only=True, kind=kind)
    return items


def espeak_items() -> list[Item]:
    from bench.stt import espeak_speech
    from bench.turns import _espeak_ssml

    items = []
    for i, (kind, sentence) in enumerate(SENTENCES):
        voice, speed = ESPEAK[i % len(ESPEAK)]
        first, rest = (s.strip() for s in sentence.split("|"))
        items.append(Item("espeak", f"s{i} {voice}", "complete",
                          speech_only(espeak_speech(f"{first} {rest}", voice, speed))))
        held = _espeak_ssml(f"{first} <break time='600ms'/> {rest}", voice, speed)
        items += _cuts("espeak", f"s{i} {voice}", held, longest_only=True, kind=kind)
    return items


# ---- the judges ------------------------------------------------------------------
def vad_speech_end(audio: np.ndarray, vad) -> int:
    """Where the service's VAD puts the end of the speech in ``audio`` (a sample index, a whole
    32 ms frame): after the last frame at or above the endpointer's lower threshold."""
    from voicebot.stt.endpointer import EndpointConfig
    from voicebot.stt.vad import FRAME_SAMPLES

    stream, neg = vad.new_stream(), EndpointConfig().neg_threshold
    padded = np.concatenate([audio, np.zeros(RATE // 2, np.float32)])
    probs = [stream.probability(padded[k:k + FRAME_SAMPLES])
             for k in range(0, len(padded) - FRAME_SAMPLES + 1, FRAME_SAMPLES)]
    speech = [k for k, p in enumerate(probs) if p >= neg]
    return (speech[-1] + 1 if speech else len(probs)) * FRAME_SAMPLES


def score_all(items: list[Item], tails: tuple[int, ...]) -> list[float]:
    """Each item's Smart Turn score per tail of silence after the speech's end as the service's
    VAD finds it; the model's seconds per run."""
    from voicebot.stt.models import silero_vad_path
    from voicebot.stt.turn_model import SmartTurnModel, packaged_model_path
    from voicebot.stt.vad import SileroVad

    model, vad = SmartTurnModel(packaged_model_path()), SileroVad(silero_vad_path())
    seconds = []
    for item in items:
        end = vad_speech_end(item.audio, vad)
        for tail in tails:
            heard = np.concatenate([item.audio, np.zeros(RATE, np.float32)])[:end + RATE * tail // 1000]
            audio = np.concatenate([np.zeros(RATE // 5, np.float32), heard])  # the pre-roll
            started = time.perf_counter()
            item.scores[tail] = round(model.probability(audio), 4)
            seconds.append(time.perf_counter() - started)
    return seconds


def decode_all(items: list[Item], context: str) -> None:
    """The words Whisper writes for the speech up to the pause, as the service's speculative
    decode does (the packaged base model, the business's context)."""
    from voicebot.stt.engine import FasterWhisperEngine
    from voicebot.stt.models import resolve_whisper_model

    model_dir, multilingual = resolve_whisper_model("base", "~/.cache/voicebot/models")
    engine = FasterWhisperEngine(model_dir, multilingual, cpu_threads=2, context=context)
    for item in items:
        item.words = engine.transcribe(np.concatenate([item.audio, np.zeros(RATE // 10, np.float32)]), "en")


# ---- the decision, replayed ------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    tail_ms: int  # the silence the model hears after the speech (fixed, whenever it is asked)
    threshold: float
    short_ms: int  # words finished, the model unsure
    long_ms: int = 1200  # the words go on

    @property
    def pause_ms(self) -> int:
        """When both judges are asked: once the tail was heard, and not inside a comma's pause."""
        return max(self.tail_ms, MIN_PAUSE_MS)


def wait_ms(item: Item, d: Decision, unfinished) -> int:
    """The silence after which this decision ends the turn."""
    if unfinished(item.words, "en"):
        return d.long_ms
    if item.scores[d.tail_ms] >= d.threshold:
        return d.pause_ms
    return d.short_ms


def cut_off(wait: int) -> bool:
    """A turn ended ``wait`` ms into a pause of PAUSE_MS: its reply reaches the caller before the
    caller goes on (later, the gateway cancels it unheard and the turn continues)."""
    return wait + REPLY_MS < PAUSE_MS


def replay(items: list[Item], d: Decision, unfinished) -> dict[str, Any]:
    done = [wait_ms(i, d, unfinished) for i in items if i.kind == "complete"]
    cuts = {k: [wait_ms(i, d, unfinished) for i in items if i.kind == k] for k in CUT_KINDS}
    return {"complete_wait_p50": percentile(done, 0.5), "complete_wait_p95": percentile(done, 0.95),
            "complete_long": sum(w >= d.long_ms for w in done), "complete": len(done),
            "cut_off": {k: f"{sum(map(cut_off, w))}/{len(w)}" for k, w in cuts.items() if w},
            "cut_off_count": sum(cut_off(w) for k, ws in cuts.items() for w in ws if k != "boundary"),
            "cut_off_boundary": sum(map(cut_off, cuts["boundary"]))}


def search(items: list[Item], unfinished) -> list[dict[str, Any]]:
    """Every candidate, best first: the fewest cut-offs on any voice set where the words go on or
    the pause is a person's own, then on phrase boundaries, then the shortest complete wait on
    the worst set (p50, then p95)."""
    sets = sorted({i.voice_set for i in items})
    rows = []
    for tail in TAILS_MS:
        for threshold in THRESHOLDS:
            for short in SHORT_WAITS_MS:
                d = Decision(tail, threshold, short)
                per_set = {s: replay([i for i in items if i.voice_set == s], d, unfinished) for s in sets}
                key = tuple(max(r[k] for r in per_set.values()) for k in (
                    "cut_off_count", "cut_off_boundary", "complete_wait_p50", "complete_wait_p95"))
                rows.append({"decision": {**d.__dict__, "pause_ms": d.pause_ms}, "sets": per_set, "key": key})
    rows.sort(key=lambda r: r["key"])
    return rows


# ---- report -------------------------------------------------------------------------
def distribution(values: list[float]) -> str:
    if not values:
        return "-"
    q = [percentile(values, x) for x in (0.05, 0.25, 0.5, 0.75, 0.95)]
    return " ".join(f"{v:.2f}" for v in q)


def report(items: list[Item], unfinished) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in sorted({i.voice_set for i in items}):
        mine = [i for i in items if i.voice_set == s]
        kinds = [k for k in ("complete", *CUT_KINDS) if any(i.kind == k for i in mine)]
        out[s] = {k: {"n": sum(i.kind == k for i in mine),
                      "words_go_on": sum(unfinished(i.words, "en") for i in mine if i.kind == k),
                      "scores_p5_25_50_75_95": {t: distribution([i.scores[t] for i in mine if i.kind == k])
                                                for t in TAILS_MS}}
                  for k in kinds}
    return out


def print_tables(summary: dict[str, Any]) -> None:
    for s, kinds in summary.items():
        counts = ", ".join(f"{k} {r['n']} (words go on: {r['words_go_on']})" for k, r in kinds.items())
        print(f"\n{s}: {counts}")
        print(f"  {'tail ms':>8}  " + "".join(f"{k + ' p5 p25 p50 p75 p95':32}" for k in kinds))
        for t in TAILS_MS:
            print(f"  {t:>8}  " + "".join(f"{r['scores_p5_25_50_75_95'][t]:32}" for r in kinds.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=40, help="read prompts of people (complete ones)")
    parser.add_argument("--json-out", help="also write every item's words and scores here")
    parser.add_argument("--top", type=int, default=8, help="candidate decisions to print")
    parser.add_argument("--replay", metavar="JSON", help="judge the items of an earlier --json-out again "
                        "(their words and scores; after a change to the language data)")
    args = parser.parse_args()

    from voicebot.devstack import speech_env
    from voicebot.stt.turn_text import unfinished

    if args.replay:
        items = [Item(i["set"], i["name"], i["kind"], np.zeros(0, np.float32), i["words"],
                      {int(t): v for t, v in i["scores"].items()})
                 for i in json.loads(Path(args.replay).read_text())["items"]]
        seconds = []
    else:
        items = human_items(args.prompts) + piper_items() + espeak_items()
        print(f"{len(items)} items; scoring ...", file=sys.stderr, flush=True)
        seconds = score_all(items, TAILS_MS)
        print("decoding ...", file=sys.stderr, flush=True)
        decode_all(items, speech_env("restaurant")["STT_CONTEXT"])
    summary = report(items, unfinished)
    print_tables(summary)
    rows = search(items, unfinished)
    print(f"\nbest decisions (cut off in a {PAUSE_MS} ms pause per kind; complete: wait p50/p95 ms, "
          f"held to the limit):")
    for row in rows[: args.top]:
        d = row["decision"]
        cells = "  ".join(f"{s} {' '.join(f'{k} {v}' for k, v in r['cut_off'].items())} complete "
                          f"{r['complete_wait_p50']}/{r['complete_wait_p95']} long {r['complete_long']}"
                          for s, r in row["sets"].items())
        print(f"  tail {d['tail_ms']:>3} thr {d['threshold']:.2f} short {d['short_ms']:>3}:  {cells}")
    if seconds:
        model_ms = [s * 1000 for s in seconds]
        print(f"\nmodel ms (one stream) p50 {percentile(model_ms, 0.5):.0f} "
              f"p95 {percentile(model_ms, 0.95):.0f}")
    result = {"summary": summary, "best": rows[: args.top]}
    print(json.dumps(result, indent=1, default=str))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {**result, "items": [{"set": i.voice_set, "name": i.name, "kind": i.kind,
                                  "words": i.words, "scores": i.scores} for i in items]}, indent=1))


if __name__ == "__main__":
    main()
