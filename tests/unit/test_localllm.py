"""The local LLM server's command line (no model, no server needed) and which server runs."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from voicebot import devstack, localllm
from voicebot.devstack import ROOT


def flags(argv: list[str]) -> dict[str, str | None]:
    """``--name value`` pairs; a flag followed by another flag (or nothing) maps to None."""
    out: dict[str, str | None] = {}
    for index, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[index + 1] if index + 1 < len(argv) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def executable(path):
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_binary(tmp_path, monkeypatch):
    name = f"llama-server-{localllm.LLAMA_CPP_PYTHON_VERSION}-{localllm.cpu_tag()}-{localllm.TUNED_RECIPE}"
    binary = executable(tmp_path / "bin" / name)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.delenv("LLM_SERVER_BIN", raising=False)
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(binary.parent))
    monkeypatch.setenv("LLM_MODEL_PATH", str(gguf))
    return binary, gguf


def test_native_command_is_one_server_with_three_slots_on_every_core(fake_binary):
    binary, gguf = fake_binary
    argv = localllm.server_command("127.0.0.1", 4321, n_ctx=4096, threads=2)
    assert argv[0] == str(binary) and localllm.is_native(argv)
    f = flags(argv)
    assert f["--model"] == str(gguf) and f["--alias"] == "voicebot-llm"
    assert f["--host"] == "127.0.0.1" and f["--port"] == "4321"
    # Three slots of 4096 tokens each: the main reply's prompt, the guard's, the side calls'.
    assert f["--parallel"] == str(localllm.SLOTS) == "3" and f["--ctx-size"] == "12288"
    assert f["--threads"] == "2" and f["--threads-batch"] == "2"
    assert f["--cache-reuse"] == "256" and f["--cache-ram"] == "1024"
    for switch in ("--jinja", "--cont-batching", "--metrics", "--no-webui"):
        assert switch in f and f[switch] is None, switch
    # Each kind of call has a slot of its own: none evicts another's cached prompt.
    slots = (localllm.MAIN_SLOT, localllm.GUARD_SLOT, localllm.SIDE_SLOT)
    assert all(0 <= slot < localllm.SLOTS for slot in slots) and len(set(slots)) == 3
    assert localllm.side_request_fields()["id_slot"] == localllm.SIDE_SLOT


AVX512_HOST = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_vnni\nbogomips\t: 4000\n"
AVX2_HOST = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\nbogomips\t: 4000\n"


def test_the_cpu_tag_names_the_instruction_sets_so_a_shared_cache_never_runs_another_cpus_build():
    tag = localllm.cpu_tag(AVX512_HOST, "x86_64")
    assert re.fullmatch(r"x86_64-[0-9a-f]{10}", tag)
    # The same instruction sets in another order, on another core count or clock: the same build.
    assert localllm.cpu_tag(AVX512_HOST.replace("avx2 fma", "fma avx2").replace("4000", "3000") * 2,
                            "x86_64") == tag
    # Fewer instruction sets or another machine: another name, so it builds its own.
    assert localllm.cpu_tag(AVX2_HOST, "x86_64") != tag
    assert localllm.cpu_tag(AVX512_HOST, "aarch64").startswith("aarch64-")
    # ARM's /proc/cpuinfo says "Features".
    arm = localllm.cpu_tag("processor\t: 0\nFeatures\t: fp asimd sve\n", "aarch64")
    assert arm != localllm.cpu_tag("processor\t: 0\nFeatures\t: fp asimd\n", "aarch64")


def test_the_build_for_this_cpu_comes_before_a_portable_one(fake_binary, tmp_path):
    tuned, _ = fake_binary
    portable = executable(tuned.parent / f"llama-server-{localllm.LLAMA_CPP_PYTHON_VERSION}")
    assert localllm.tuned_binary_path() == tuned and localllm.portable_binary_path() == portable
    assert localllm.server_binary() == tuned
    tuned.unlink()  # a cache from before the tuned build, or LLAMA_PORTABLE=1: still native
    assert localllm.server_binary() == portable
    # A build for another CPU in the same cache is never picked.
    executable(tuned.parent / f"llama-server-{localllm.LLAMA_CPP_PYTHON_VERSION}-x86_64-0000000000")
    portable.unlink()
    assert localllm.server_binary() is None


def test_llm_server_bin_names_any_build(fake_binary, tmp_path, monkeypatch):
    other = tmp_path / "custom-llama-server"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.setenv("LLM_SERVER_BIN", str(other))
    assert localllm.server_command("0.0.0.0", 8000)[0] == str(other)
    monkeypatch.setenv("LLM_SERVER_BIN", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="LLM_SERVER_BIN"):
        localllm.server_binary()


def only_installed(monkeypatch, *names):
    """Pretend only these optional server packages are installed."""
    monkeypatch.setattr(localllm.importlib.util, "find_spec",
                        lambda name: object() if name in names else None)


def test_without_this_cpus_build_the_prebuilt_wheel_serves_with_the_same_options(fake_binary, tmp_path,
                                                                                 monkeypatch):
    native = localllm.server_command("127.0.0.1", 4321, n_ctx=2048, threads=1)
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path / "empty"))
    only_installed(monkeypatch, "xllamacpp")
    localllm.server_flags.cache_clear()
    argv = localllm.server_command("127.0.0.1", 4321, n_ctx=2048, threads=1)
    assert argv[:3] == [sys.executable, "-m", "voicebot.llm_prebuilt"] and localllm.is_native(argv)
    def shared(command):
        return {k: v for k, v in flags(command).items() if not k.startswith("--spec")}

    assert shared(argv) == shared(native)
    assert "prebuilt" in localllm.describe(argv)


def test_the_prebuilt_launcher_takes_every_option_the_native_command_gives(fake_binary):
    from voicebot import llm_prebuilt

    argv = localllm.native_server_command(["x"], "m.gguf", "127.0.0.1", 4321, n_ctx=2048, threads=2)
    args = llm_prebuilt.parser().parse_args([*argv[1:], *localllm.SPECULATIVE["ngram"]])
    assert args.parallel == localllm.SLOTS and args.ctx_size == 2048 * localllm.SLOTS
    assert args.spec_type == "ngram-simple" and args.jinja and args.cache_reuse == 256


def test_without_llama_cpps_server_the_python_server_is_the_fallback(fake_binary, tmp_path, monkeypatch):
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path / "empty"))
    only_installed(monkeypatch, "llama_cpp")
    argv = localllm.server_command("127.0.0.1", 4321, n_ctx=2048, threads=1)
    assert argv[:3] == [sys.executable, "-m", "llama_cpp.server"] and not localllm.is_native(argv)
    f = flags(argv)
    assert f["--n_ctx"] == "2048" and f["--n_threads"] == "1" and f["--interrupt_requests"] == "false"
    only_installed(monkeypatch)
    with pytest.raises(FileNotFoundError, match="make setup"):
        localllm.server_command("127.0.0.1", 4321)
    with pytest.raises(FileNotFoundError, match="no native"):
        localllm.server_command("127.0.0.1", 4321, kind="native")


def test_threads_follow_the_server_kind(fake_binary, tmp_path, monkeypatch):
    monkeypatch.setattr(devstack.os, "cpu_count", lambda: 2)
    assert devstack.main_llm_threads() == 2  # native: the guard shares the process
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path / "empty"))
    only_installed(monkeypatch, "xllamacpp")
    assert devstack.main_llm_threads() == 2  # the prebuilt llama-server: the same
    only_installed(monkeypatch, "llama_cpp")
    assert devstack.main_llm_threads() == 1  # fallback: one core for the guard's own instance


def test_guard_shares_the_native_server(fake_binary, tmp_path):
    stack = devstack.Stack(tmp_path / "logs", quiet=True)

    stack.shared_llm = SimpleNamespace(ready={"http": 4321})  # type: ignore[assignment]
    assert devstack.start_guard_llm(stack, 9999) == "http://127.0.0.1:4321/v1"


def test_setup_compiles_nothing_and_make_run_builds_for_this_cpu_in_the_background(tmp_path, monkeypatch):
    """make setup installs the prebuilt server; the first make run starts the CPU's own build
    once, at the lowest priority, and never when told not to or when a build exists."""
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert "build-llama-server.sh\n" not in bootstrap and "llm-prebuilt" in bootstrap
    started: list[list[str]] = []
    monkeypatch.setattr(devstack.subprocess, "Popen", lambda argv, **kw: started.append(argv))
    monkeypatch.setattr(devstack.shutil, "which", lambda name: "/usr/bin/c++")
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path / "bin"))
    monkeypatch.delenv("LLM_SERVER_BIN", raising=False)
    stack = devstack.Stack(tmp_path / "logs", quiet=True)
    monkeypatch.setenv("LLM_NATIVE_BUILD", "off")
    devstack.start_native_llm_build(stack)
    assert started == []
    monkeypatch.setenv("LLM_NATIVE_BUILD", "auto")
    devstack.start_native_llm_build(stack)
    assert started == [[sys.executable, "-m", "voicebot.native_build"]]
    job = (ROOT / "voicebot" / "native_build.py").read_text()
    assert "os.nice(19)" in job and "build_lock()" in job and "scripts/build-llama-server.sh" in job
    monkeypatch.setenv("LLM_QUANT", "packaged")
    executable(localllm.tuned_binary_path())
    executable(localllm.tuned_quantize_path())
    devstack.start_native_llm_build(stack)
    assert len(started) == 1  # built, and nothing to derive
    monkeypatch.setenv("LLM_QUANT", "iq4_nl")
    monkeypatch.setenv("LLM_MODEL_CACHE_DIR", str(tmp_path / "models"))
    devstack.start_native_llm_build(stack)
    assert len(started) == 2  # built, but the derivation did not finish: the job goes on with it


def test_the_build_script_builds_what_localllm_looks_for():
    build = (ROOT / "scripts" / "build-llama-server.sh").read_text()
    assert "LLAMA_CPP_PYTHON_VERSION" in build
    assert "llama-server-$LLAMA_VERSION" in build and "--target llama-server" in build
    # The tuned build goes where localllm looks: the script asks it for the path.
    assert "-m voicebot.localllm --binary-path" in build and "-DGGML_NATIVE=ON" in build
    assert "-mno-amx-tile" in build  # its kernels crashed llama-server on a VM listing amx_tile


def test_the_build_script_asks_for_this_cpus_binary_path(tmp_path):
    import subprocess

    out = subprocess.run([sys.executable, "-m", "voicebot.localllm", "--binary-path"], cwd=ROOT,
                         env={"VOICEBOT_BIN_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(tmp_path / localllm.tuned_name("llama-server"))
    quantize = subprocess.run([sys.executable, "-m", "voicebot.localllm", "--quantize-path"], cwd=ROOT,
                              env={"VOICEBOT_BIN_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, check=True).stdout.strip()
    assert quantize == str(tmp_path / localllm.tuned_name("llama-quantize"))
    build = (ROOT / "scripts" / "build-llama-server.sh").read_text()
    assert "--quantize-path" in build and "llama-quantize" in build


@pytest.mark.parametrize(("machine", "cpuinfo", "quant"), [
    ("x86_64", AVX512_HOST, "iq4_nl"),
    ("x86_64", AVX2_HOST, "iq4_nl"),
    ("x86_64", "processor\t: 0\nflags\t\t: fpu sse2 avx fma f16c\n", "packaged"),  # no AVX2: no repack
    ("aarch64", "processor\t: 0\nFeatures\t: fp asimd asimddp sve\n", "iq4_nl"),
    ("aarch64", "processor\t: 0\nFeatures\t: fp asimd\n", "packaged"),
    ("riscv64", "isa\t: rv64imafdc\n", "packaged"),
])
def test_the_model_is_re_laid_only_where_llama_cpp_repacks_it(machine, cpuinfo, quant):
    assert localllm.default_quant(cpuinfo, machine) == quant


def test_llm_quant_names_the_model_or_stops_with_the_choices(monkeypatch):
    monkeypatch.setenv("LLM_QUANT", "packaged")
    assert localllm.configured_quant() == "packaged"
    monkeypatch.setenv("LLM_QUANT", "Q4_0")
    assert localllm.configured_quant() == "q4_0"
    monkeypatch.setenv("LLM_QUANT", "auto")
    assert localllm.configured_quant() == localllm.default_quant()
    monkeypatch.setenv("LLM_QUANT", "q2_k")
    with pytest.raises(ValueError, match="auto, packaged or one of iq4_nl, q4_0"):
        localllm.configured_quant()


FAKE_QUANTIZE = """#!/bin/sh
# Records its arguments and copies the model, like llama-quantize writing its output file.
echo "$@" >> "$(dirname "$0")/calls"
[ -n "$FAIL" ] && { echo "llama_model_quantize: failed to quantize: $FAIL" >&2; exit 1; }
cp "$4" "$5"
"""


@pytest.fixture
def packaged_model(tmp_path, monkeypatch):
    """A stand-in for the assembled packaged file, and a bin cache with this CPU's quantizer."""
    packaged = tmp_path / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    packaged.parent.mkdir()
    packaged.write_bytes(b"GGUF packaged")
    monkeypatch.setattr(localllm, "assemble_qwen_gguf", lambda cache_dir: packaged)
    monkeypatch.delenv("LLM_MODEL_PATH", raising=False)
    monkeypatch.setenv("VOICEBOT_BIN_CACHE", str(tmp_path / "bin"))
    monkeypatch.setenv("LLM_QUANT", "iq4_nl")
    return packaged


def test_the_packaged_model_is_derived_once_for_this_cpus_kernels(packaged_model, capsys):
    quantize = executable(localllm.tuned_quantize_path())
    quantize.write_text(FAKE_QUANTIZE)
    served = localllm.model_path()
    assert served == packaged_model.with_name("qwen2.5-coder-1.5b-instruct-iq4_nl.gguf")
    assert served.read_bytes() == b"GGUF packaged"
    assert "deriving the LLM model's IQ4_NL copy" in capsys.readouterr().err  # long work says so
    calls = (quantize.parent / "calls").read_text().splitlines()
    # Requantized from the packaged file, its token embeddings (looked up, never multiplied) kept.
    assert calls == [f"--allow-requantize --token-embedding-type q4_K {packaged_model} "
                     f"{served}.{localllm.os.getpid()}.tmp IQ4_NL {localllm.os.cpu_count() or 2}"]
    assert localllm.model_path() == served and len((quantize.parent / "calls").read_text().splitlines()) == 1
    # A copy made from another source or by another llama.cpp is made again.
    served.with_suffix(".derived").write_text("another source")
    assert localllm.model_path() == served and len((quantize.parent / "calls").read_text().splitlines()) == 2


def test_a_failed_derivation_leaves_no_half_file_and_says_how_to_go_on(packaged_model, monkeypatch):
    executable(localllm.tuned_quantize_path()).write_text(FAKE_QUANTIZE)
    monkeypatch.setenv("FAIL", "out of disk")
    with pytest.raises(RuntimeError, match=r"(?s)LLM_QUANT=packaged.*failed to quantize: out of disk"):
        localllm.model_path()
    assert sorted(p.name for p in packaged_model.parent.iterdir()) == [packaged_model.name]


def test_without_a_quantizer_or_with_packaged_the_file_as_shipped_is_served(packaged_model, monkeypatch,
                                                                           capsys):
    assert localllm.model_path() == packaged_model  # no llama-quantize build in the cache
    assert "no llama-quantize build" in capsys.readouterr().err
    executable(localllm.tuned_quantize_path()).write_text(FAKE_QUANTIZE)
    monkeypatch.setenv("LLM_QUANT", "packaged")
    assert localllm.model_path() == packaged_model


# A stand-in llama-server: serves /v1/models, unless its kernels "fault" (it kills itself with
# the signal named in FAULT) without --no-repack, or always when FAULT_ALWAYS is set.
FAULTING_SERVER = """#!{python}
import http.server, os, signal, sys
if "{fault}" and ("--no-repack" not in sys.argv or {always}):
    os.kill(os.getpid(), getattr(signal, "{fault}"))
if "{fault}" == "":
    sys.exit(1)
port = int(sys.argv[sys.argv.index("--port") + 1])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{{}}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


@pytest.mark.parametrize(("fault", "always", "serves"), [
    ("SIGSEGV", False, True),   # AMX on one VM: the plain kernels serve
    ("SIGILL", False, True),    # an instruction the CPU lists but does not run
    ("SIGSEGV", True, False),   # faults with the plain kernels too: the start fails, once
    ("", False, False),         # an ordinary exit is not a CPU fault: no second try
])
def test_a_llama_server_killed_by_a_cpu_fault_starts_again_on_plain_kernels(fake_binary, tmp_path,
                                                                            fault, always, serves):
    binary, _ = fake_binary
    binary.write_text(FAULTING_SERVER.format(python=sys.executable, fault=fault, always=always))
    stack = devstack.Stack(tmp_path / "logs", quiet=True)
    try:
        if serves:
            proc = stack.start_llm(devstack.free_port(), timeout=20)
            assert "--no-repack" in proc.popen.args and proc.popen.poll() is None
        else:
            with pytest.raises(devstack.StartupError, match="exited"):
                stack.start_llm(devstack.free_port(), timeout=20)
    finally:
        stack.stop()


def test_the_fault_of_a_process_is_named_only_for_cpu_faults():
    assert devstack.cpu_fault(-11) == "SIGSEGV" and devstack.cpu_fault(-4) == "SIGILL"
    assert devstack.cpu_fault(-9) is None and devstack.cpu_fault(1) is None
    assert devstack.cpu_fault(None) is None


# A stand-in llama-server's --help: a build that lists the speculative options, or one too old to.
HELP = "#!/bin/sh\necho '--model FNAME'\n{extra}\n"


@pytest.mark.parametrize(("setting", "listed", "expected"), [
    (None, True, ["ngram-simple", "2", "4", "4"]),   # the default: n-gram drafts, n 2, m 4, 4 at most
    ("ngram", True, ["ngram-simple", "2", "4", "4"]),
    ("none", True, None),                            # turned off by the operator
    (None, False, None),                             # a build (LLM_SERVER_BIN) without the options
])
def test_speculative_decoding_is_asked_for_only_where_wanted_and_the_build_has_it(
        fake_binary, monkeypatch, setting, listed, expected):
    binary, _ = fake_binary
    binary.write_text(HELP.format(extra="echo '--spec-type, --spec-draft-n-max N'" if listed else ""))
    localllm.server_flags.cache_clear()
    if setting is None:
        monkeypatch.delenv("LLM_SPECULATIVE", raising=False)
    else:
        monkeypatch.setenv("LLM_SPECULATIVE", setting)
    f = flags(localllm.server_command("127.0.0.1", 4321))
    if expected is None:
        assert not any(name.startswith("--spec") for name in f)
    else:
        assert [f["--spec-type"], f["--spec-ngram-simple-size-n"], f["--spec-ngram-simple-size-m"],
                f["--spec-draft-n-max"]] == expected
    localllm.server_flags.cache_clear()


def test_an_unknown_speculative_setting_is_refused_by_name(fake_binary, monkeypatch):
    monkeypatch.setenv("LLM_SPECULATIVE", "eagle")
    with pytest.raises(ValueError, match="LLM_SPECULATIVE='eagle': expected one of ngram, none"):
        localllm.server_command("127.0.0.1", 4321)


def test_a_build_that_cannot_list_its_options_gets_none_of_the_optional_ones(tmp_path):
    assert localllm.server_flags(str(tmp_path / "missing")) == frozenset()


# A llama-quantize that writes half its output, then waits for a file named "go" beside it.
SLOW_QUANTIZE = """#!/bin/sh
here="$(dirname "$0")"
echo half > "$5"
touch "$here/writing"
while [ ! -e "$here/go" ]; do sleep 0.05; done
cat "$4" > "$5"
"""


def wait_for_file(path, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_start_during_the_background_derivation_serves_the_packaged_model(tmp_path, monkeypatch, capsys):
    """The background job derives under the build lock; a start meanwhile serves the packaged,
    verified file at once (never the half-written copy, never a second quantizer beside it), a
    second job exits, and the next start after the job serves the finished copy."""
    models = tmp_path / "models"
    models.mkdir()
    packaged = models / localllm.PACKAGED_NAME
    packaged.write_bytes(b"GGUF packaged")
    packaged.with_suffix(".verified").write_text(localllm.QWEN_GGUF_SHA256)
    for name, value in {"LLM_MODEL_CACHE_DIR": str(models), "VOICEBOT_BIN_CACHE": str(tmp_path / "bin"),
                        "LLM_QUANT": "iq4_nl"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LLM_MODEL_PATH", raising=False)
    quantize = executable(localllm.tuned_quantize_path())
    quantize.write_text(SLOW_QUANTIZE)
    derive = "from voicebot import localllm; print(localllm.model_path())"
    job = subprocess.Popen([sys.executable, "-c", derive], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        wait_for_file(quantize.parent / "writing")
        half = [path for path in models.iterdir() if path.name.endswith(".tmp")]
        assert [path.name for path in half] == [f"qwen2.5-coder-1.5b-instruct-iq4_nl.gguf.{job.pid}.tmp"]
        assert localllm.derivation_pending()
        assert localllm.model_path() == packaged  # at once: the lock is the job's
        assert "still deriving the model's iq4_nl copy" in capsys.readouterr().err
        assert localllm.model_path(derive=False) == packaged
        second = subprocess.run([sys.executable, "-m", "voicebot.native_build"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and "another build holds the lock" in second.stdout
        assert [path for path in models.iterdir() if path.name.endswith(".tmp")] == half
    finally:
        (quantize.parent / "go").touch()
        out, _ = job.communicate(timeout=60)
    derived = packaged.with_name("qwen2.5-coder-1.5b-instruct-iq4_nl.gguf")
    assert job.returncode == 0 and out.strip() == str(derived)
    assert localllm.model_path(derive=False) == derived and derived.read_bytes() == b"GGUF packaged"
    assert not localllm.derivation_pending()
    assert not [path for path in models.iterdir() if path.name.endswith(".tmp")]
