"""llama.cpp's server from the prebuilt ``xllamacpp`` wheel, started with llama-server's options.

``make run`` needs an LLM server before anything can answer. Compiling llama-server for this
CPU takes minutes, so until that build exists (``scripts/build-llama-server.sh``, which
``make run`` starts in the background) the same server code runs from a wheel PyPI ships ready
made: xllamacpp embeds llama.cpp's own HTTP server (OpenAI-compatible ``/v1``, slots,
``/completion``, ``n_probs``, ``/metrics``), so the brain and the guard see the same API either
way. The wheel is built for any x86-64 with AVX2 (no AVX-512), which is why the CPU's own build
replaces it once it is there (``make bench-brain`` compares both in one run).

This module takes the subset of llama-server's command line that ``voicebot.localllm`` gives
(``native_server_command``), so one argv builder serves both::

    python -m voicebot.llm_prebuilt --model M.gguf --port 8088 --parallel 2 --ctx-size 8192 ...
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def parser() -> argparse.ArgumentParser:
    # Each option means what it means to llama-server (llama.cpp's tools/server README).
    p = argparse.ArgumentParser(prog="python -m voicebot.llm_prebuilt", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--alias", default="")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--ctx-size", type=int, default=4096)
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--cont-batching", action="store_true")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--threads-batch", type=int, default=0)
    p.add_argument("--jinja", action="store_true")
    p.add_argument("--cache-reuse", type=int, default=0)
    p.add_argument("--cache-ram", type=int, default=-1)
    p.add_argument("--flash-attn", choices=("on", "off", "auto"), default="auto")
    p.add_argument("--metrics", action="store_true")
    p.add_argument("--no-webui", action="store_true")
    p.add_argument("--no-repack", action="store_true")
    p.add_argument("--spec-type", choices=("ngram-simple", "none"), default="none")
    p.add_argument("--spec-ngram-simple-size-n", type=int, default=2)
    p.add_argument("--spec-ngram-simple-size-m", type=int, default=4)
    p.add_argument("--spec-draft-n-max", type=int, default=4)
    return p


def common_params(args: argparse.Namespace):
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = args.model
    if args.alias:
        params.model_alias = {args.alias}  # a set: llama-server takes several, comma-separated
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cont_batching = args.cont_batching
    if args.threads:
        params.cpuparams.n_threads = args.threads
    if args.threads_batch:
        params.cpuparams_batch.n_threads = args.threads_batch
    params.use_jinja = args.jinja
    params.n_cache_reuse = args.cache_reuse
    if args.cache_ram >= 0:
        params.cache_ram_mib = args.cache_ram
    params.flash_attn_type = getattr(xlc.llama_flash_attn_type, {
        "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED", "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED",
        "auto": "LLAMA_FLASH_ATTN_TYPE_AUTO"}[args.flash_attn])
    params.endpoint_metrics = args.metrics
    params.ui = not args.no_webui
    params.no_extra_bufts = args.no_repack
    if args.spec_type == "ngram-simple":
        spec = params.speculative
        spec.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        spec.ngram_simple.size_n = args.spec_ngram_simple_size_n
        spec.ngram_simple.size_m = args.spec_ngram_simple_size_m
        spec.draft.n_max = args.spec_draft_n_max
    return params


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import xllamacpp
    except ImportError:
        print("xllamacpp is not installed (make setup installs it)", file=sys.stderr)
        return 2
    server = xllamacpp.Server(common_params(args))  # loads the model, then serves HTTP on its own threads
    print(f"llama.cpp server (xllamacpp {xllamacpp.__version__}) listening on {server.listening_address}",
          flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
