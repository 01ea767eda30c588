"""Fake engines for logic tests: they record what they were asked and answer by rule."""

from __future__ import annotations

import threading
import time

import numpy as np

from services.stt.engine import EngineCapabilities, SttEngine


class FakeSttEngine(SttEngine):
    """Answers with the utterance length, e.g. "speech 1.2 s"; can be slow or English-only."""

    def __init__(self, multilingual: bool = True, delay_s: float = 0.0) -> None:
        self.capabilities = EngineCapabilities(multilingual=multilingual,
                                               languages=None if multilingual else frozenset({"en"}))
        self.delay_s = delay_s
        self.calls: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def transcribe(self, audio: np.ndarray, language: str) -> str:
        if self.delay_s:
            time.sleep(self.delay_s)
        seconds = round(len(audio) / 16000, 1)
        with self._lock:
            self.calls.append((seconds, language))
        return f"speech {seconds} s"
