"""Generated test speech: the packaged piper voice (through voicebot/tts), plus silence."""

from __future__ import annotations

import functools

import numpy as np

from voicebot.common.audio import resample


@functools.lru_cache(maxsize=1)
def _engine():
    from voicebot.tts.engine import PiperEngine, packaged_voice

    return PiperEngine(*packaged_voice())


@functools.lru_cache(maxsize=1)
def _steady_engine():
    """The same voice with its sampling noise off: the same audio on every run, for a test
    that asserts a model's score on it (piper draws new noise, and new prosody, per render)."""
    from piper import SynthesisConfig

    engine = _engine.__wrapped__()
    engine._syn = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    return engine


@functools.lru_cache(maxsize=32)
def _speech_16k(text: str, steady: bool = False) -> np.ndarray:
    engine = _steady_engine() if steady else _engine()
    audio = np.concatenate(list(engine.synthesize(text)))
    # Trim piper's own leading/trailing silence so the pauses a test adds are exact.
    loud = np.where(np.abs(audio) > 0.02)[0]
    audio = audio[max(0, loud[0] - 100): loud[-1] + 100]
    return resample(audio * 0.8, engine.sample_rate, 16000).astype(np.float32)


def speech(text: str, rate: int = 16000) -> np.ndarray:
    return resample(_speech_16k(text), 16000, rate).astype(np.float32)


def steady_speech(text: str, rate: int = 16000) -> np.ndarray:
    """``speech`` that is the same on every run (see ``_steady_engine``)."""
    return resample(_speech_16k(text, steady=True), 16000, rate).astype(np.float32)


def silence(ms: int, rate: int = 16000) -> np.ndarray:
    return np.zeros(rate * ms // 1000, dtype=np.float32)


def noise(ms: int, rate: int = 16000, level: float = 0.3, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(rate * ms // 1000) * level).astype(np.float32)


def vowel(ms: int, f0: float = 130.0, rate: int = 16000) -> np.ndarray:
    """A synthetic 'uh': voiced enough for the VAD to start an utterance, too short to be words."""
    t = np.arange(rate * ms // 1000) / rate
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.03 * np.sin(2 * np.pi * 5 * t))) / rate
    formants = ((700, 130), (1220, 150), (2600, 250))
    gains = [sum(np.exp(-((f0 * k - f) / b) ** 2) for f, b in formants) + 0.05 for k in range(1, 30)]
    out = sum(gain / k ** 0.5 * np.sin(k * phase) for k, gain in enumerate(gains, start=1))
    out = out * np.minimum(1, np.minimum(t / 0.02, (t[-1] - t) / 0.02))
    return (out / np.abs(out).max() * 0.5).astype(np.float32)
