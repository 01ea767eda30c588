"""Generated test speech: the packaged piper voice (through services/tts), plus silence."""

from __future__ import annotations

import functools

import numpy as np

from voicebot.common.audio import resample


@functools.lru_cache(maxsize=1)
def _engine():
    from services.tts.engine import PiperEngine, packaged_voice

    return PiperEngine(*packaged_voice())


@functools.lru_cache(maxsize=32)
def _speech_16k(text: str) -> np.ndarray:
    engine = _engine()
    audio = np.concatenate(list(engine.synthesize(text)))
    # Trim piper's own leading/trailing silence so the pauses a test adds are exact.
    loud = np.where(np.abs(audio) > 0.02)[0]
    audio = audio[max(0, loud[0] - 100): loud[-1] + 100]
    return resample(audio * 0.8, engine.sample_rate, 16000).astype(np.float32)


def speech(text: str, rate: int = 16000) -> np.ndarray:
    return resample(_speech_16k(text), 16000, rate).astype(np.float32)


def silence(ms: int, rate: int = 16000) -> np.ndarray:
    return np.zeros(rate * ms // 1000, dtype=np.float32)


def noise(ms: int, rate: int = 16000, level: float = 0.3, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(rate * ms // 1000) * level).astype(np.float32)
