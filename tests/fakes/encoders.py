"""A deterministic sentence encoder for retrieval logic: no model, predictable similarities."""

from __future__ import annotations

import re
import threading
import zlib

import numpy as np

from voicebot.brain.read.sentence_encoder import SentenceEncoder

# Words every question has; without them "Do you have X?" would be close to "Do you have Y?".
STOP_WORDS = frozenset("a an the i you we my your is are do does can could to of in on for it and or "
                       "there what how".split())


class BagOfWordsEncoder(SentenceEncoder):
    """Each word (lowercased, stop words dropped) adds 1 to a crc32-hashed slot of a ``width``-wide
    vector, then the vector is scaled to unit length: the cosine of two texts is their word
    overlap. Texts with no words are the zero vector (similar to nothing). Records every call,
    from whichever thread, so a test can count the encoding work."""

    name = "bag-of-words"

    def __init__(self, width: int = 512) -> None:
        self.width = width
        self.calls: list[list[str]] = []
        self.threads: list[str] = []
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
            self.threads.append(threading.current_thread().name)
        vectors = np.zeros((len(texts), self.width), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                if word not in STOP_WORDS:
                    vectors[row, zlib.crc32(word.encode()) % self.width] += 1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    @property
    def encoded_texts(self) -> list[str]:
        return [text for call in self.calls for text in call]
