"""Fake engines for logic tests: they record what they were asked and answer by rule."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from voicebot.brain.read.sentence_encoder import SentenceEncoder
from voicebot.stt.engine import EngineCapabilities, SttEngine


class FakeSttEngine(SttEngine):
    """Answers with the utterance length, e.g. "speech 1.2 s"; can be slow or English-only."""

    def __init__(self, multilingual: bool = True, delay_s: float = 0.0) -> None:
        self.capabilities = EngineCapabilities(multilingual=multilingual,
                                               languages=None if multilingual else frozenset({"en"}))
        self.delay_s = delay_s
        self.calls: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def transcribe(self, audio: np.ndarray, language: str, draft: bool = False) -> str:
        if self.delay_s:
            time.sleep(self.delay_s)
        seconds = round(len(audio) / 16000, 1)
        with self._lock:
            self.calls.append((seconds, language))
        return f"speech {seconds} s"


class GatedSttEngine(FakeSttEngine):
    """Like FakeSttEngine, but every decode blocks until the test opens the gate.

    ``entered`` counts decodes that started, so a test can wait for a worker to
    be busy before it queues more work behind it.
    """

    def __init__(self, multilingual: bool = True) -> None:
        super().__init__(multilingual=multilingual)
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)
        self.started: list[tuple[int, str]] = []  # (samples, language) of each decode begun

    def transcribe(self, audio: np.ndarray, language: str, draft: bool = False) -> str:
        with self._lock:
            self.started.append((len(audio), language))
        self.entered.release()
        if not self.gate.wait(timeout=60):
            raise TimeoutError("the test never opened the gate")
        return super().transcribe(audio, language, draft)

    async def wait_entered(self, timeout: float = 30) -> None:
        """Wait (without blocking the event loop) until one more decode has started."""
        if not await asyncio.to_thread(self.entered.acquire, True, timeout):
            raise TimeoutError("no decode started")


class LoudnessVad:
    """Stands in for SileroVad in logic tests: a frame is speech when it is loud."""

    def new_stream(self) -> LoudnessVad:
        return self

    def probability(self, frame: np.ndarray) -> float:
        return 0.9 if float(np.sqrt(np.mean(frame**2))) > 0.01 else 0.0


class FakeSentenceEncoder(SentenceEncoder):
    """Each text's vector is given: the guard screen's logic without a model. Unknown texts are
    orthogonal to everything (nothing close, nothing blocked), and ``fail`` raises instead."""

    name = "fake"

    def __init__(self, vectors: dict[str, list[float]], fail: bool = False) -> None:
        self.vectors = {text: np.asarray(v, dtype=np.float32) / np.linalg.norm(v)
                        for text, v in vectors.items()}
        self.width = len(next(iter(vectors.values())))
        self.fail = fail

    def encode(self, texts: list[str]) -> np.ndarray:
        if self.fail:
            raise RuntimeError("encoder broke")
        return np.stack([self.vectors.get(t, np.zeros(self.width, dtype=np.float32)) for t in texts])
