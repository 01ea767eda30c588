"""Start the whole stack as local processes: ``make run``, and the tests' fixture.

redis-server, the llama.cpp LLM server (unless BRAIN_LLM_BASE_URL points at
another OpenAI-compatible server), STT, brain, TTS and the gateway. Each
service prints one ``READY name grpc=PORT ...`` line when it serves; the
launcher waits for it, so port 0 (pick a free port) works everywhere.

Under ``make run`` a ``Supervisor`` restarts a process that exits, on the same
ports, with exponential backoff, while the others keep serving (the gateway's
``/readyz`` names the missing upstream meanwhile). Redis keeps an append-only
file (fsync every second) under ``.run/redis`` and requires a password. Every
process gets the same generated ``VOICEBOT_INTERNAL_TOKEN``. Ctrl-C stops
everything this launcher started.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from voicebot.common.grpc_env import grpc_environment
from voicebot.common.internal_auth import TOKEN_ENV
from voicebot.rundir import AlreadyRunning, RunDir

ROOT = Path(__file__).resolve().parent.parent


# Live sessions and pending actions all carry a TTL: a volatile-* policy would evict them first
# under memory pressure. With noeviction a full Redis refuses writes, loudly (docker-compose.yml
# and k8s/base/redis.yaml run the same; a test keeps them equal).
REDIS_EVICTION_POLICY = "noeviction"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex((host, port)) == 0


def ensure_internal_token() -> str:
    """The internal token of this launcher's processes: ``VOICEBOT_INTERNAL_TOKEN``, generated
    (and put in this process's environment, for in-process clients) when unset."""
    token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)
    os.environ[TOKEN_ENV] = token
    return token


def redis_url_for(port: int, password: str | None = None, host: str = "127.0.0.1") -> str:
    auth = f":{urllib.parse.quote(password, safe='')}@" if password else ""
    return f"redis://{auth}{host}:{port}/0"


# The signals of a CPU fault: an instruction the CPU (or the VM) does not run, or a bad access.
CPU_FAULTS = {signal.SIGILL: "SIGILL", signal.SIGSEGV: "SIGSEGV", signal.SIGBUS: "SIGBUS"}


def cpu_fault(returncode: int | None) -> str | None:
    """The fault's name when a process was killed by one (``Popen.returncode`` -N), else None."""
    if returncode is None or returncode >= 0:
        return None
    return CPU_FAULTS.get(-returncode)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path
    ready: dict[str, int] = field(default_factory=dict)
    # Starts this process again (same ports, same arguments) and waits until it is ready.
    relaunch: Callable[[], Proc] | None = None
    started_at: float = field(default_factory=time.monotonic)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


class StartupError(RuntimeError):
    pass


class Stack:
    """Processes started by this launcher, stopped in reverse order."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None, quiet: bool = False,
                 run_dir: RunDir | None = None, derive_model: bool = True) -> None:
        self.log_dir = log_dir
        # make run's: a pid file per process, so the next start finds what a crash left running.
        self.run_dir = run_dir
        # False (make run): the LLM serves the packaged model until the background job re-laid it.
        self.derive_model = derive_model
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **grpc_environment(os.environ), "PYTHONUNBUFFERED": "1",
                    TOKEN_ENV: ensure_internal_token(), **(env or {})}
        self.procs: list[Proc] = []
        self.quiet = quiet
        self._open_line = False  # a step's line waits for its time (``begin``, ``done``)
        # spawn and stop take it, so a restart racing Ctrl-C cannot leave a process behind.
        self._lock = threading.Lock()
        self._stopping = False
        self._closed = False
        # The native llama-server that serves the main reply and the guard (in their own slots).
        self.shared_llm: Proc | None = None

    def say(self, message: str) -> None:
        if not self.quiet:
            print(("\n" if self._open_line else "") + message, flush=True)
            self._open_line = False

    def begin(self, what: str) -> float:
        """The first half of a step's one line (``what ...``); ``done`` ends it with its time."""
        if not self.quiet:
            print(f"{what} ... ", end="", flush=True)
            self._open_line = True
        return time.monotonic()

    def done(self, started: float, detail: str = "", log: Path | None = None) -> None:
        """The step's time, what it got and its log: ``starting stt ... 4.2 s (grpc 50051; log …)``."""
        extra = "; ".join(part for part in (detail, f"log {log}" if log else "") if part)
        line = f"{time.monotonic() - started:.1f} s" + (f" ({extra})" if extra else "")
        if self.quiet:
            return
        if self._open_line:
            print(line, flush=True)
            self._open_line = False
        else:  # another line came between (a restart's note): say which step this is
            self.say(f"  ready in {line}")

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              replace: Proc | None = None) -> Proc:
        """Start a process; ``replace``: a restart of that (exited) one, its log appended to."""
        log_path = self.log_dir / f"{name}.log"
        with self._lock:
            if self._stopping:
                raise StartupError(f"not starting {name}: the stack is stopping")
            with log_path.open("a" if replace else "w") as log_file:
                popen = subprocess.Popen(
                    argv, cwd=ROOT, env={**self.env, **(env or {})}, stdout=subprocess.PIPE,
                    stderr=log_file, text=True, start_new_session=True,
                )
            proc = Proc(name, popen, log_path)
            if self.run_dir is not None:
                self.run_dir.record(name, popen.pid)
            if replace is not None and replace in self.procs:
                self.procs[self.procs.index(replace)] = proc
            else:
                self.procs.append(proc)
        return proc

    def start_service(self, name: str, module: str, env: dict[str, str], timeout: float = 180,
                      prefix: str | None = None, replace: Proc | None = None) -> Proc:
        """Start ``python -m module`` and wait for its READY line.

        ``prefix`` (default: the module's package, ``voicebot.stt.server`` -> ``STT``) names the
        port variables a restart pins to the ports this start got, so port 0 stays one port.
        """
        started = self.begin(f"starting {name}")
        proc = self.spawn(name, [sys.executable, "-m", module], env, replace)
        # Set before the wait: a restart that fails to become ready is retried by the supervisor.
        proc.relaunch = lambda: self.start_service(name, module, env, timeout, prefix, replace=proc)
        try:
            proc.ready = self._wait_ready(proc, timeout)
        except StartupError:
            self._kill(proc)
            raise
        self.done(started, " ".join(f"{key} {port}" for key, port in proc.ready.items()), proc.log_path)
        pinned = {**env, **_port_env(prefix or module.split(".")[-2].upper(), proc.ready)}
        proc.relaunch = lambda: self.start_service(name, module, pinned, timeout, prefix, replace=proc)
        return proc

    def _wait_ready(self, proc: Proc, timeout: float) -> dict[str, int]:
        found: dict[str, dict[str, int]] = {}
        done = threading.Event()

        def reader() -> None:
            assert proc.popen.stdout is not None
            for line in proc.popen.stdout:
                if line.startswith("READY ") and not done.is_set():
                    fields = dict(p.split("=", 1) for p in line.split()[2:])
                    found["ports"] = {k: int(v) for k, v in fields.items()}
                    done.set()
            done.set()  # process ended

        threading.Thread(target=reader, daemon=True).start()
        if not done.wait(timeout) or "ports" not in found:
            raise StartupError(f"{proc.name} did not become ready; log {proc.log_path}:\n{proc.log_tail()}")
        return found["ports"]

    def start_redis(self, port: int, password: str | None = None, data_dir: Path | None = None,
                    name: str = "redis", maxmemory: str = "0") -> Proc:
        """redis-server on 127.0.0.1. ``data_dir``: keep an append-only file there (fsync every
        second, replayed on restart); without it nothing is persisted. ``password``: required
        of every client (written to a 0600 config file, not to the command line).
        ``maxmemory`` (``0``: none): beyond it writes fail; nothing is ever evicted
        (``REDIS_EVICTION_POLICY``, as compose and Kubernetes run it)."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise StartupError("redis-server is not installed")
        argv = [binary, str(self._redis_config(name, password)), "--port", str(port),
                "--bind", "127.0.0.1", "--save", "", "--maxmemory", maxmemory,
                "--maxmemory-policy", REDIS_EVICTION_POLICY]
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
            argv += ["--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(data_dir)]
        else:
            argv += ["--appendonly", "no"]
        return self._start_redis(name, argv, port)

    def _start_redis(self, name: str, argv: list[str], port: int, replace: Proc | None = None) -> Proc:
        proc = self.spawn(name, argv, replace=replace)
        proc.relaunch = lambda: self._start_redis(name, argv, port, replace=proc)
        try:
            self._wait_port(proc, port, 20)
        except StartupError:
            self._kill(proc)
            raise
        proc.ready = {"port": port}
        return proc

    def _redis_config(self, name: str, password: str | None) -> Path:
        path = self.log_dir / f"{name}.conf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as conf:
            if password:
                conf.write(f"requirepass {password}\n")
        return path

    def start_llm(self, port: int, timeout: float = 300, name: str = "llm", n_ctx: int = 4096,
                  threads: int | None = None, replace: Proc | None = None,
                  kind: str = "auto", plain_kernels: bool = False) -> Proc:
        """The local LLM server: llama.cpp's server (``localllm.SLOTS`` slots of ``n_ctx``
        each; the first one this stack starts is also the guard's, see ``start_guard_llm``),
        built for this CPU or else from the prebuilt wheel; ``kind`` picks one for comparisons
        (``localllm.server_command``).

        A llama-server killed by a CPU fault while it starts (a kernel this CPU lists but will
        not run: AMX on one VM faulted on its first prompt) is started once more with
        ``--no-repack``, llama.cpp's plain kernels (slower prefill, but it serves), and says so;
        ``plain_kernels`` asks for that at once."""
        from voicebot import localllm

        argv = localllm.server_command("127.0.0.1", port, n_ctx=n_ctx, threads=threads, kind=kind,
                                       derive=self.derive_model)
        native_server = localllm.is_native(argv)
        if plain_kernels and native_server:
            argv.append("--no-repack")
        model = Path(argv[argv.index("--model") + 1]).name
        started = self.begin(f"starting the local LLM server ({localllm.describe(argv)}, {model}) as {name}")
        proc = self.spawn(name, argv, replace=replace)
        proc.relaunch = lambda: self.start_llm(port, timeout, name, n_ctx, threads, replace=proc,
                                               kind=kind, plain_kernels=plain_kernels)
        try:
            # /v1/models answers 200 on both servers only once the model is loaded (llama-server
            # says 503 while loading).
            self._wait_http(proc, f"http://127.0.0.1:{port}/v1/models", timeout)
        except StartupError:
            self._kill(proc)
            fault = cpu_fault(proc.popen.returncode)
            if not (fault and native_server and not plain_kernels):
                raise
            self.say(f"  {name} was killed by {fault} while starting (log {proc.log_path}); "
                     "starting it again with llama.cpp's plain kernels (--no-repack)")
            return self.start_llm(port, timeout, name, n_ctx, threads, replace=proc, kind=kind,
                                  plain_kernels=True)
        proc.ready = {"http": port}
        if native_server and (self.shared_llm is None or self.shared_llm is replace):
            self.shared_llm = proc
        self.done(started, f"http {port}", proc.log_path)
        return proc

    def _wait_http(self, proc: Proc, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise StartupError(f"{proc.name} exited; log {proc.log_path}:\n{proc.log_tail()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if reply.status == 200:
                        return
            time.sleep(0.3)
        raise StartupError(f"{proc.name} not ready after {timeout}s; log {proc.log_path}")

    def _wait_port(self, proc: Proc, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise StartupError(f"{proc.name} exited; log {proc.log_path}:\n{proc.log_tail()}")
            if port_open(port):
                return
            time.sleep(0.1)
        raise StartupError(f"{proc.name} did not open port {port}")

    def _kill(self, proc: Proc) -> None:
        """Stop one process group now (a start that failed, or a stuck process)."""
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait()
        self._forget(proc)

    def _forget(self, proc: Proc) -> None:
        if self.run_dir is not None:
            self.run_dir.forget(proc.name, proc.popen.pid)

    def close(self) -> None:
        """Stop everything for good: a restart still under way cannot start anything after this."""
        with self._lock:
            self._closed = True
        self.stop()

    def stop(self) -> None:
        """Stop every process (the stack can start new ones afterwards, unless closed)."""
        with self._lock:
            self._stopping = True
            procs = list(reversed(self.procs))
        for proc in procs:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._kill(proc)
            self._forget(proc)
        with self._lock:
            self.procs.clear()
            self.shared_llm = None
            self._stopping = self._closed


def _port_env(prefix: str, ready: dict[str, int]) -> dict[str, str]:
    """The variables that make a restarted service listen where this one did."""
    names = {"grpc": f"{prefix}_PORT", "http": f"{prefix}_PORT", "metrics": f"{prefix}_METRICS_PORT"}
    return {names[key]: str(port) for key, port in ready.items() if key in names}


class Backoff:
    """Delay before restart number ``failures`` + 1: ``initial_s`` doubling up to ``max_s``."""

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0) -> None:
        self.initial_s, self.max_s = initial_s, max_s

    def delay(self, failures: int) -> float:
        return min(self.max_s, self.initial_s * 2 ** max(0, failures))


class Supervisor:
    """Restarts the stack's processes that exit, each in its own thread, so a slow restart of
    one does not hold the others' (and the rest keep serving). A process that ran for
    ``stable_s`` before it exited starts again from the shortest delay; one that keeps dying
    waits longer each time (``Backoff``). Every exit and restart is logged to stdout (unless
    the stack is quiet) and to ``supervisor.log`` next to the processes' logs.
    """

    def __init__(self, stack: Stack, backoff: Backoff | None = None, stable_s: float = 60.0) -> None:
        self.stack = stack
        self.backoff = backoff or Backoff()
        self.stable_s = stable_s
        self.events: list[tuple[float, str, str]] = []  # (monotonic time, process name, what)
        self._failures: dict[str, int] = {}
        self._restarting: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._log_path = stack.log_dir / "supervisor.log"

    def check(self) -> None:
        """One pass: start a restart for every process that exited and has none under way."""
        for proc in list(self.stack.procs):
            if proc.relaunch is None or proc.popen.poll() is None:
                continue
            with self._lock:
                if proc.name in self._restarting or self._stopped.is_set():
                    continue
                self._restarting.add(proc.name)
            thread = threading.Thread(target=self._restart, args=(proc,), name=f"restart-{proc.name}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def run(self, stopped: threading.Event, interval_s: float = 0.5) -> None:
        while not stopped.wait(interval_s):
            self.check()

    def stop(self, timeout_s: float = 5.0) -> None:
        """No more restarts; a restart waiting out its delay gives up at once."""
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout_s)

    def _restart(self, proc: Proc) -> None:
        try:
            lived = time.monotonic() - proc.started_at
            failures = 0 if lived >= self.stable_s else self._failures.get(proc.name, 0)
            delay = self.backoff.delay(failures)
            self._failures[proc.name] = failures + 1
            self._note(proc.name, f"exited (status {proc.popen.returncode}) after {lived:.1f} s; "
                                  f"restarting in {delay:.1f} s (attempt {failures + 1})")
            if self._stopped.wait(delay):
                return
            assert proc.relaunch is not None
            try:
                new = proc.relaunch()
            except StartupError as exc:
                if not self._stopped.is_set():
                    self._note(proc.name, f"restart failed: {exc}")
                return  # the failed process stays in the stack; the next check tries again
            self._note(proc.name, f"restarted (pid {new.popen.pid}, ready {new.ready})")
        finally:
            with self._lock:
                self._restarting.discard(proc.name)

    def _note(self, name: str, what: str) -> None:
        self.events.append((time.monotonic(), name, what))
        line = f"{time.strftime('%H:%M:%S')} {name} {what}"
        self.stack.say(line)
        with contextlib.suppress(OSError), self._log_path.open("a") as log:
            log.write(line + "\n")


def local_llm_brain_env() -> dict[str, str]:
    """The brain's request fields for the local native llama-server: the main reply in its own
    slot, the guard in the other with a one-word grammar (none for the python fallback, which
    has no slots)."""
    from voicebot import localllm

    if localllm.llama_server() is None:
        return {}
    return {"BRAIN_LLM_EXTRA_BODY": json.dumps(localllm.main_request_fields()),
            "BRAIN_GUARD_EXTRA_BODY": json.dumps(localllm.guard_request_fields()),
            "BRAIN_SIDE_EXTRA_BODY": json.dumps(localllm.side_request_fields())}


def start_local_llm(stack: Stack) -> tuple[str, dict[str, str]]:
    """The local LLM as ``make run`` has it, on free ports: the main URL, and the brain's
    environment for it (the guard's URL, the slot and grammar request fields)."""
    llm = stack.start_llm(free_port(), threads=main_llm_threads())
    guard_url = start_guard_llm(stack, free_port())
    return (f"http://127.0.0.1:{llm.ready['http']}/v1",
            {"BRAIN_GUARD_LLM_BASE_URL": guard_url, **local_llm_brain_env()})


def start_guard_llm(stack: Stack, port: int) -> str:
    """The topic guard's LLM URL.

    Native llama-server: the stack's main server (the guard's requests name their own slot,
    ``localllm.GUARD_SLOT``, so they never evict the main reply's cached prompt, and both run
    batched on all cores); a stack without one gets one here, on ``port``. The
    llama-cpp-python fallback runs one request at a time (a guard call there waits behind the
    main reply), so the guard gets its own one-thread instance on ``port``.
    """
    from voicebot import localllm

    if stack.shared_llm is not None:
        return f"http://127.0.0.1:{stack.shared_llm.ready['http']}/v1"
    if localllm.llama_server() is not None:
        proc = stack.start_llm(port)
    else:
        # One thread: llama.cpp's threads spin while they wait, so two instances that together
        # ask for more threads than there are cores slow each other down many times over.
        proc = stack.start_llm(port, name="llm-guard", n_ctx=1024, threads=1)
    return f"http://127.0.0.1:{proc.ready['http']}/v1"


def main_llm_threads() -> int:
    """Threads of the main LLM server: every core for the native server (the guard shares its
    process), one core less next to the fallback's one-thread guard instance."""
    from voicebot import localllm

    cores = os.cpu_count() or 2
    return cores if localllm.llama_server() is not None else max(1, cores - 1)


def speech_env(profile: str) -> dict[str, str]:
    """STT's settings that come from the business's profile: what its callers talk about
    (STT_CONTEXT in the environment wins, even empty: ``STT_CONTEXT= make bench-v2v``)."""
    from voicebot.brain.business.profile import load_profile

    return {"STT_CONTEXT": os.environ.get("STT_CONTEXT", load_profile(profile).stt_context)}


def page_env(profile: str | None) -> dict[str, str]:
    """The business as the gateway knows it: the profile's name and purpose for the browser
    page, and its languages (GATEWAY_AGENT_NAME, GATEWAY_AGENT_PURPOSE and GATEWAY_LANGUAGES in
    the environment win). Read from the file as it is: the variables the profile uses may be in
    the brain's environment only."""
    if not profile:
        return {}
    import yaml

    from voicebot.brain.business.profile import Profile, resolve_path

    try:
        raw = yaml.safe_load(resolve_path(profile).read_text())
    except (OSError, yaml.YAMLError):
        return {}  # the brain says what is wrong with it
    raw = raw if isinstance(raw, dict) else {}
    fields = {key: str(raw.get(key) or Profile.model_fields[key].default) for key in ("name", "purpose")}
    languages = raw.get("languages") if isinstance(raw.get("languages"), list) else ["en"]
    return {"GATEWAY_AGENT_NAME": os.environ.get("GATEWAY_AGENT_NAME", fields["name"]),
            "GATEWAY_AGENT_PURPOSE": os.environ.get("GATEWAY_AGENT_PURPOSE", fields["purpose"]),
            "GATEWAY_LANGUAGES": os.environ.get("GATEWAY_LANGUAGES", ",".join(str(c) for c in languages))}


def start_speech(stack: Stack, ports: dict[str, int] | None = None,
                 env: dict[str, str] | None = None) -> tuple[Proc, Proc]:
    """STT and TTS (port 0 = any free port)."""
    ports, env = ports or {}, env or {}
    stt = stack.start_service("stt", "voicebot.stt.server", {
        **env, "STT_PORT": str(ports.get("stt", 0)), "STT_METRICS_PORT": str(ports.get("stt_metrics", 0)),
    })
    tts = stack.start_service("tts", "voicebot.tts.server", {
        **env, "TTS_PORT": str(ports.get("tts", 0)), "TTS_METRICS_PORT": str(ports.get("tts_metrics", 0)),
    })
    return stt, tts


def start_brain_and_gateway(stack: Stack, *, redis_url: str, llm_base_url: str, tokens: str,
                            stt: Proc, tts: Proc, ports: dict[str, int] | None = None,
                            brain_env: dict[str, str] | None = None, env: dict[str, str] | None = None,
                            name: str = "") -> tuple[Proc, Proc]:
    """The brain and a gateway in front of the given STT and TTS (``name`` tells pairs apart)."""
    ports, env, suffix = ports or {}, env or {}, f"-{name}" if name else ""
    brain = stack.start_service(f"brain{suffix}", "voicebot.brain.server", {
        **env, "BRAIN_PORT": str(ports.get("brain", 0)),
        "BRAIN_METRICS_PORT": str(ports.get("brain_metrics", 0)),
        "BRAIN_REDIS_URL": redis_url, "BRAIN_LLM_BASE_URL": llm_base_url, **(brain_env or {}),
    })
    gateway = stack.start_service(f"gateway{suffix}", "voicebot.gateway.app", {
        **page_env((brain_env or {}).get("BRAIN_PROFILE")),
        **env, "GATEWAY_PORT": str(ports.get("gateway", 0)), "GATEWAY_TOKENS": tokens,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_STT_ADDR": f"127.0.0.1:{stt.ready['grpc']}",
        "GATEWAY_BRAIN_ADDR": f"127.0.0.1:{brain.ready['grpc']}",
        "GATEWAY_TTS_ADDR": f"127.0.0.1:{tts.ready['grpc']}",
    })
    return brain, gateway


def start_mcp_servers(stack: Stack, profile: str, env: dict[str, str] | None = None,
                      fixed_ports: bool = False) -> tuple[dict[str, Proc], dict[str, str]]:
    """The local MCP servers a profile names under ``launch``, each with a fresh bearer token,
    and the brain's environment that points the profile at them (BRAIN_PROFILE included)."""
    import yaml

    from voicebot.brain.business.profile import load_profile, resolve_path

    load_profile(profile)  # a bad profile fails here, with the field named
    raw = yaml.safe_load(resolve_path(profile).read_text())
    procs: dict[str, Proc] = {}
    brain_env = {"BRAIN_PROFILE": profile}
    for server in raw.get("mcp_servers") or []:
        launch = server.get("launch")
        if not launch:
            continue  # run by the deployment itself
        prefix = launch["env_prefix"]
        token_env = server.get("auth_token_env")
        token = os.environ.get(token_env or "", "") or secrets.token_urlsafe(16)
        # make run: the profile's port unless <PREFIX>_PORT names another.
        port = int(os.environ.get(f"{prefix}_PORT") or launch.get("port", 0)) if fixed_ports else 0
        # prefix: a restart by the supervisor keeps this port (and token), which the brain was given.
        proc = stack.start_service(server["name"], launch["module"], {
            **(env or {}), f"{prefix}_PORT": str(port), f"{prefix}_TOKEN": token}, prefix=prefix)
        procs[server["name"]] = proc
        url_var = re.match(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)", server["url"])
        if url_var:
            brain_env[url_var[1]] = f"http://127.0.0.1:{proc.ready['http']}/mcp"
        if token_env:
            brain_env[token_env] = token
    return procs, brain_env


def start_voicebot(stack: Stack, *, redis_url: str, llm_base_url: str, tokens: str,
                   ports: dict[str, int], guard_llm_url: str = "", profile: str = "restaurant",
                   fixed_ports: bool = True, llm_env: dict[str, str] | None = None) -> dict[str, Proc]:
    """STT, TTS, the profile's MCP servers, brain and gateway: what `make run` serves.

    Each MCP server answers only ``Authorization: Bearer <token>`` with a token made here
    (or taken from the profile's token variable); the brain gets the same value.
    """
    env = {"LOG_JSON": "true"}
    check_profile_strictly(stack, profile)  # the file, before anything starts
    stt, tts = start_speech(stack, ports, {**env, **speech_env(profile)})
    # The business's backends: MCP servers the brain takes its tools from. Their admin
    # tools (failure injection) stay off.
    servers, profile_env = start_mcp_servers(stack, profile, env, fixed_ports)
    check_profile_strictly(stack, profile, profile_env)  # its tools and tasks, as the brain will see them
    brain, gateway = start_brain_and_gateway(
        stack, redis_url=redis_url, llm_base_url=llm_base_url, tokens=tokens, stt=stt, tts=tts,
        ports=ports, env=env, brain_env={**profile_env, **(llm_env or {}),
                                         "BRAIN_GUARD_LLM_BASE_URL": guard_llm_url})
    return {"stt": stt, "tts": tts, **servers, "brain": brain, "gateway": gateway}


def check_profile_strictly(stack: Stack, profile: str, env: dict[str, str] | None = None) -> None:
    """``voicebot profile check``'s checks (``voicebot.brain.business.profile_check``): without ``env``
    the file alone; with the MCP servers' environment also their tools and the tasks built from
    them (the knowledge is indexed by the brain itself next). A mistake fails the start, named
    with its line."""
    import asyncio

    from voicebot.brain.business.profile_check import ProfileCheckFailed, check_profile

    started = stack.begin("checking the profile" + (" against its MCP servers" if env else ""))
    report = asyncio.run(check_profile(profile, env, connect=env is not None, knowledge=False))
    if report.problems:
        raise StartupError(f"{ProfileCheckFailed(str(report.path), report.problems)}\n"
                           f"(`.venv/bin/voicebot profile check {profile}` checks it without starting)")
    stack.done(started)


def ensure_redis_server() -> None:
    if shutil.which("redis-server"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("redis-server is missing; installing it with apt-get ...", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        return
    raise SystemExit(
        "redis-server is not installed. Install it (Debian/Ubuntu: `sudo apt-get install "
        "redis-server`; macOS: `brew install redis`) or set REDIS_URL to a running Redis."
    )


def ensure_espeak_ng(stack: Stack, languages: str) -> None:
    """The voice of the profile's languages that have no piper voice (Korean: espeak-ng's,
    voicebot/tts/voices.py): installed with apt-get when root, else a line saying what to do.
    Without it the service still starts and the default voice speaks those languages."""
    from voicebot.tts.voices import ESPEAK_DEFAULTS, VoicesError, parse_voices

    try:
        asked = parse_voices(os.environ.get("TTS_VOICES", ""))
    except VoicesError:
        return  # the TTS service refuses it at its start, naming it
    spoken = {code.strip().lower() for code in languages.split(",")}
    wanted = sorted({code for code in spoken & set(ESPEAK_DEFAULTS) if code not in asked}
                    | {code for code, voice in asked.items() if voice.kind == "espeak"})
    if not wanted or shutil.which("espeak-ng"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        started = stack.begin(f"installing espeak-ng (the voice for {', '.join(wanted)}) with apt-get")
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
                 "env": {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}}
        installed = all(subprocess.run(["apt-get", *args], **quiet).returncode == 0
                        for args in (["update", "-qq"], ["install", "-y", "-qq", "espeak-ng"]))
        stack.done(started, "" if installed else "failed")
        if installed:
            return
    stack.say(f"espeak-ng is not installed: {', '.join(wanted)} will be spoken by the English voice "
              "(Debian/Ubuntu: `sudo apt-get install espeak-ng`; or set TTS_VOICES, docs/models.md)")


def local_redis(stack: Stack) -> str:
    """The URL of make run's Redis: started here (append-only file in .run/redis, a password)
    unless one already listens on REDIS_PORT (then VOICEBOT_REDIS_PASSWORD is its password)."""
    port = int(os.environ.get("REDIS_PORT", "6379"))
    password = os.environ.get("VOICEBOT_REDIS_PASSWORD")
    if port_open(port):
        check_redis(port, password)
        stack.say(f"using the Redis already listening on {port} (not started by make run)")
        return redis_url_for(port, password)
    ensure_redis_server()
    # A new password each run is fine: Redis keeps it in memory only, the data stays in the AOF.
    password = password or secrets.token_urlsafe(24)
    started = stack.begin(f"starting redis-server on {port} (append-only file in .run/redis)")
    proc = stack.start_redis(port, password=password, data_dir=ROOT / ".run" / "redis")
    stack.done(started, log=proc.log_path)
    return redis_url_for(port, password)


def check_redis(port: int, password: str | None) -> None:
    """A Redis this launcher did not start must answer with the password it was given."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=3)
    try:
        client.ping()
    except redis.AuthenticationError:
        raise StartupError(
            f"a Redis make run did not start listens on {port} and refuses the password it was given "
            "(VOICEBOT_REDIS_PASSWORD): set VOICEBOT_REDIS_PASSWORD to its password, or REDIS_PORT to "
            "a free port for make run's own Redis") from None
    except redis.RedisError as exc:
        raise StartupError(f"something listens on {port} but does not answer as Redis ({exc}); "
                           "set REDIS_PORT to a free port") from None
    finally:
        client.close()


def check_ports_free(ports: dict[str, int]) -> None:
    """Fixed ports another program holds fail the start here, named, instead of as a bind error
    deep in a service's log (what a crashed make run left was stopped before this)."""
    taken = {name: port for name, port in ports.items() if port and port_open(port)}
    if taken:
        listed = ", ".join(f"{name} {port}" for name, port in taken.items())
        raise StartupError(f"ports in use by another program: {listed}; stop it, or set the ports "
                           "(STT_PORT, BRAIN_PORT, TTS_PORT, GATEWAY_PORT, LLM_PORT, LLM_GUARD_PORT, "
                           "REDIS_PORT) to free ones")


def start_native_llm_build(stack: Stack) -> None:
    """Build llama.cpp for this CPU in the background when only the prebuilt server exists.

    The prebuilt wheel lets a first ``make run`` answer within minutes; the CPU's own build
    (and the model re-laid for its kernels) is faster, so it is made here at the lowest
    priority, and the next ``make run`` serves it. ``LLM_NATIVE_BUILD=off`` never builds."""
    from voicebot import localllm

    if (os.environ.get("LLM_NATIVE_BUILD") or "auto").strip().lower() in ("off", "0", "false", "no"):
        return
    built = bool(os.environ.get("LLM_SERVER_BIN")) or localllm.server_binary() is not None
    if built and (localllm.quantize_binary() is None or not localllm.derivation_pending()):
        return
    if not shutil.which("c++"):
        stack.say("no C++ compiler: the prebuilt llama.cpp server stays in use "
                  "(Debian: apt-get install build-essential for the faster build for this CPU)")
        return
    cache = localllm.bin_cache()
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "native-build.log"
    # One build at a time however many stacks start: it holds localllm.build_lock throughout.
    with log.open("a") as out:
        subprocess.Popen([sys.executable, "-m", "voicebot.native_build"], cwd=ROOT, stdout=out,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, "VENV": str(Path(sys.executable).parent.parent)})
    stack.say("building llama.cpp for this CPU in the background, at the lowest priority (about 10 "
              f"minutes on two cores; log {log}); the next `make run` serves it")


def serve(stack: Stack, start: Callable[[], object], on_ready: Callable[[], object] = lambda: None,
          interval_s: float = 0.5) -> int:
    """Start, then supervise until Ctrl-C or SIGTERM. Every way out stops what this launcher
    started: a signal while starting, a failed start, a crash (the exception goes on after
    the stop), a signal after the start. ``kill -9`` cannot be caught: the next start finds
    what it left through the run directory's pid files (``RunDir.stop_leftovers``)."""
    stopped = threading.Event()
    starting = True

    def on_signal(signum: int, _frame: object) -> None:
        stopped.set()
        if starting:
            raise KeyboardInterrupt  # out of the start under way, into the stop below

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    supervisor = Supervisor(stack)
    try:
        try:
            start()
        except (StartupError, OSError, ValueError) as exc:  # ValueError: a bad profile
            print(f"\nstartup failed: {exc}\nstopping what was started ...", file=sys.stderr, flush=True)
            return 1
        except KeyboardInterrupt:
            print("\ninterrupted while starting; stopping what was started ...", file=sys.stderr, flush=True)
            return 130
        starting = False
        on_ready()
        # A process that exits is started again on its ports; the others keep serving.
        supervisor.run(stopped, interval_s)
        print("stopping ...", flush=True)
        return 0
    finally:
        starting = False
        supervisor.stop()
        stack.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def claim_run_dir(run_dir: RunDir, stack: Stack) -> None:
    """Hold ``.run/`` for this launcher (``AlreadyRunning`` when another holds it), and stop
    what a launcher that crashed left running there, saying what."""
    run_dir.claim()
    left = run_dir.stop_leftovers()
    if left:
        listed = ", ".join(f"{name} (pid {pid})" for name, pid in left.items())
        stack.say(f"an earlier make run ended without stopping {listed}: stopped them; "
                  "starting everything afresh")


def start_make_run(stack: Stack, profile: str, tokens: str, gateway_port: int) -> None:
    ports = {"stt": int(os.environ.get("STT_PORT", "50051")),
             "brain": int(os.environ.get("BRAIN_PORT", "50052")),
             "tts": int(os.environ.get("TTS_PORT", "50053")), "gateway": gateway_port,
             "stt_metrics": int(os.environ.get("STT_METRICS_PORT", "9101")),
             "brain_metrics": int(os.environ.get("BRAIN_METRICS_PORT", "9102")),
             "tts_metrics": int(os.environ.get("TTS_METRICS_PORT", "9103"))}
    llm_url = os.environ.get("BRAIN_LLM_BASE_URL")
    guard_url = os.environ.get("BRAIN_GUARD_LLM_BASE_URL", "")
    llm_port = int(os.environ.get("LLM_PORT", "8000"))
    guard_port = int(os.environ.get("LLM_GUARD_PORT", "8001"))
    # (The guard's port is used only beside the llama-cpp-python fallback: not checked here.)
    check_ports_free({**ports, **({} if llm_url else {"llm": llm_port})})
    stack.say(f"profile: {profile}")
    redis_url = os.environ.get("REDIS_URL") or local_redis(stack)
    ensure_espeak_ng(stack, page_env(profile).get("GATEWAY_LANGUAGES", "en"))
    llm_env: dict[str, str] = {}
    if not llm_url:
        stack.start_llm(llm_port, threads=None if guard_url else main_llm_threads())
        llm_url = f"http://127.0.0.1:{llm_port}/v1"
        if not guard_url:
            guard_url = start_guard_llm(stack, guard_port)
        llm_env = local_llm_brain_env()  # slots and the guard's grammar on the local server
    start_voicebot(stack, redis_url=redis_url, llm_base_url=llm_url, tokens=tokens,
                   guard_llm_url=guard_url, profile=profile, llm_env=llm_env, ports=ports)


def main() -> int:
    run_dir = RunDir(ROOT / ".run")
    stack = Stack(ROOT / ".run" / "logs", run_dir=run_dir, derive_model=False)
    try:
        claim_run_dir(run_dir, stack)
    except AlreadyRunning as exc:
        print(f"make run refused: {exc}", file=sys.stderr, flush=True)
        return 1
    token = os.environ.get("VOICEBOT_DEV_TOKEN") or secrets.token_urlsafe(16)
    tokens = os.environ.get("GATEWAY_TOKENS") or f"{token}=dev-user"
    gateway_port = int(os.environ.get("GATEWAY_PORT", "8080"))
    profile = os.environ.get("PROFILE") or os.environ.get("BRAIN_PROFILE") or "restaurant"

    def ready() -> None:
        dev_token = tokens.split(",")[0].split("=")[0]
        url_option = "" if gateway_port == 8080 else f" --url ws://127.0.0.1:{gateway_port}/v1/call"
        print(f"""
voicebot is running (profile {profile}).
  Browser:  http://127.0.0.1:{gateway_port}/?token={dev_token}
  CLI:      .venv/bin/voicebot call my.wav --token {dev_token} --out reply.wav{url_option}
  Token:    {dev_token}   (user dev-user; set GATEWAY_TOKENS=TOKEN=USER to choose your own)
  Logs:     {stack.log_dir}
Press Ctrl-C to stop everything.""", flush=True)
        if not os.environ.get("BRAIN_LLM_BASE_URL"):
            start_native_llm_build(stack)

    try:
        return serve(stack, lambda: start_make_run(stack, profile, tokens, gateway_port), ready)
    finally:
        run_dir.release()


if __name__ == "__main__":
    sys.exit(main())
