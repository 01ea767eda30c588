"""Start the whole stack as local processes: ``make run``, and the tests' fixture.

redis-server, the llama.cpp LLM server (unless BRAIN_LLM_BASE_URL points at
another OpenAI-compatible server), STT, brain, TTS and the gateway. Each
service prints one ``READY name grpc=PORT ...`` line when it serves; the
launcher waits for it, so port 0 (pick a free port) works everywhere.
Ctrl-C stops everything this launcher started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex((host, port)) == 0


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path
    ready: dict[str, int] = field(default_factory=dict)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


class StartupError(RuntimeError):
    pass


class Stack:
    """Processes started by this launcher, stopped in reverse order."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None, quiet: bool = False) -> None:
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.procs: list[Proc] = []
        self.quiet = quiet

    def say(self, message: str) -> None:
        if not self.quiet:
            print(message, flush=True)

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        log_path = self.log_dir / f"{name}.log"
        log_file = log_path.open("w")
        popen = subprocess.Popen(
            argv, cwd=ROOT, env={**self.env, **(env or {})}, stdout=subprocess.PIPE,
            stderr=log_file, text=True, start_new_session=True,
        )
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def start_service(self, name: str, module: str, env: dict[str, str], timeout: float = 180) -> Proc:
        """Start ``python -m module`` and wait for its READY line."""
        self.say(f"starting {name} ...")
        proc = self.spawn(name, [sys.executable, "-m", module], env)
        ready = self._wait_ready(proc, timeout)
        proc.ready = ready
        self.say(f"  {name} ready {ready}")
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

    def start_redis(self, port: int) -> Proc:
        binary = shutil.which("redis-server")
        if binary is None:
            raise StartupError("redis-server is not installed")
        proc = self.spawn("redis", [binary, "--port", str(port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no"])
        self._wait_port(proc, port, 20)
        proc.ready = {"port": port}
        return proc

    def start_llm(self, port: int, timeout: float = 300, name: str = "llm", n_ctx: int = 4096,
                  threads: int | None = None) -> Proc:
        from voicebot import localllm

        self.say(f"starting the local LLM server (llama.cpp) as {name} ...")
        proc = self.spawn(name, localllm.server_command("127.0.0.1", port, n_ctx=n_ctx, threads=threads))
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{port}/v1/models"
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise StartupError(f"LLM server exited; log {proc.log_path}:\n{proc.log_tail()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if reply.status == 200:
                        proc.ready = {"http": port}
                        self.say(f"  {name} ready on {port}")
                        return proc
            time.sleep(0.3)
        raise StartupError(f"LLM server not ready after {timeout}s; log {proc.log_path}")

    def _wait_port(self, proc: Proc, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise StartupError(f"{proc.name} exited; log {proc.log_path}:\n{proc.log_tail()}")
            if port_open(port):
                return
            time.sleep(0.1)
        raise StartupError(f"{proc.name} did not open port {port}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
        self.procs.clear()


def start_guard_llm(stack: Stack, port: int) -> str:
    """The topic guard's own llama.cpp instance. On the CPU default the guard on the main
    server waits behind (or, by llama.cpp's default, aborts) the main reply; on its own
    instance it adds nothing measurable to time to first token (make bench-brain)."""
    # One thread: llama.cpp's threads spin while they wait, so two instances that together
    # ask for more threads than there are cores slow each other down many times over.
    proc = stack.start_llm(port, name="llm-guard", n_ctx=1024, threads=1)
    return f"http://127.0.0.1:{proc.ready['http']}/v1"


def main_llm_threads() -> int:
    """Cores left for the main LLM next to the guard's one-thread instance."""
    return max(1, (os.cpu_count() or 2) - 1)


def start_speech(stack: Stack, ports: dict[str, int] | None = None,
                 env: dict[str, str] | None = None) -> tuple[Proc, Proc]:
    """STT and TTS (port 0 = any free port)."""
    ports, env = ports or {}, env or {}
    stt = stack.start_service("stt", "services.stt.server", {
        **env, "STT_PORT": str(ports.get("stt", 0)), "STT_METRICS_PORT": str(ports.get("stt_metrics", 0)),
    })
    tts = stack.start_service("tts", "services.tts.server", {
        **env, "TTS_PORT": str(ports.get("tts", 0)), "TTS_METRICS_PORT": str(ports.get("tts_metrics", 0)),
    })
    return stt, tts


def start_brain_and_gateway(stack: Stack, *, redis_url: str, llm_base_url: str, tokens: str,
                            stt: Proc, tts: Proc, ports: dict[str, int] | None = None,
                            brain_env: dict[str, str] | None = None, env: dict[str, str] | None = None,
                            name: str = "") -> tuple[Proc, Proc]:
    """The brain and a gateway in front of the given STT and TTS (``name`` tells pairs apart)."""
    ports, env, suffix = ports or {}, env or {}, f"-{name}" if name else ""
    brain = stack.start_service(f"brain{suffix}", "services.brain.server", {
        **env, "BRAIN_PORT": str(ports.get("brain", 0)),
        "BRAIN_METRICS_PORT": str(ports.get("brain_metrics", 0)),
        "BRAIN_REDIS_URL": redis_url, "BRAIN_LLM_BASE_URL": llm_base_url, **(brain_env or {}),
    })
    gateway = stack.start_service(f"gateway{suffix}", "gateway.app", {
        **env, "GATEWAY_PORT": str(ports.get("gateway", 0)), "GATEWAY_TOKENS": tokens,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_STT_ADDR": f"127.0.0.1:{stt.ready['grpc']}",
        "GATEWAY_BRAIN_ADDR": f"127.0.0.1:{brain.ready['grpc']}",
        "GATEWAY_TTS_ADDR": f"127.0.0.1:{tts.ready['grpc']}",
    })
    return brain, gateway


def start_voicebot(stack: Stack, *, redis_url: str, llm_base_url: str, tokens: str,
                   ports: dict[str, int], guard_llm_url: str = "") -> dict[str, Proc]:
    """STT, TTS, the reservation demo's MCP server, brain and gateway: what `make run` serves."""
    env = {"LOG_JSON": "true"}
    stt, tts = start_speech(stack, ports, env)
    # The reservation demo's backend: an MCP server the brain takes its tools from.
    reservations = stack.start_service("reservations", "services.reservations.server", {
        **env, "RESERVATIONS_PORT": str(ports.get("reservations", 0)),
    })
    brain, gateway = start_brain_and_gateway(
        stack, redis_url=redis_url, llm_base_url=llm_base_url, tokens=tokens, stt=stt, tts=tts,
        ports=ports, env=env, brain_env={
            "BRAIN_RESERVATIONS_URL": f"http://127.0.0.1:{reservations.ready['http']}/mcp",
            "BRAIN_GUARD_LLM_BASE_URL": guard_llm_url,
        })
    return {"stt": stt, "tts": tts, "reservations": reservations, "brain": brain, "gateway": gateway}


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


def main() -> int:
    stack = Stack(ROOT / ".run" / "logs")
    token = os.environ.get("VOICEBOT_DEV_TOKEN") or secrets.token_urlsafe(16)
    tokens = os.environ.get("GATEWAY_TOKENS") or f"{token}=dev-user"
    gateway_port = int(os.environ.get("GATEWAY_PORT", "8080"))
    try:
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            redis_port = int(os.environ.get("REDIS_PORT", "6379"))
            if not port_open(redis_port):
                ensure_redis_server()
                stack.say(f"starting redis-server on {redis_port} ...")
                stack.start_redis(redis_port)
            else:
                stack.say(f"using the Redis already listening on {redis_port}")
            redis_url = f"redis://127.0.0.1:{redis_port}/0"
        llm_url = os.environ.get("BRAIN_LLM_BASE_URL")
        guard_url = os.environ.get("BRAIN_GUARD_LLM_BASE_URL", "")
        if not llm_url:
            llm_port = int(os.environ.get("LLM_PORT", "8000"))
            stack.start_llm(llm_port, threads=None if guard_url else main_llm_threads())
            llm_url = f"http://127.0.0.1:{llm_port}/v1"
            if not guard_url:
                guard_url = start_guard_llm(stack, int(os.environ.get("LLM_GUARD_PORT", "8001")))
        start_voicebot(stack, redis_url=redis_url, llm_base_url=llm_url, tokens=tokens,
                       guard_llm_url=guard_url, ports={
            "stt": int(os.environ.get("STT_PORT", "50051")),
            "brain": int(os.environ.get("BRAIN_PORT", "50052")),
            "tts": int(os.environ.get("TTS_PORT", "50053")),
            "gateway": gateway_port,
            "reservations": int(os.environ.get("RESERVATIONS_PORT", "8090")),
            "stt_metrics": 9101, "brain_metrics": 9102, "tts_metrics": 9103,
        })
    except (StartupError, OSError) as exc:
        print(f"\nstartup failed: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    dev_token = tokens.split(",")[0].split("=")[0]
    url_option = "" if gateway_port == 8080 else f" --url ws://127.0.0.1:{gateway_port}/v1/call"
    print(f"""
voicebot is running.
  Browser:  http://127.0.0.1:{gateway_port}/?token={dev_token}
  CLI:      .venv/bin/voicebot call my.wav --token {dev_token} --out reply.wav{url_option}
  Token:    {dev_token}   (user dev-user; set GATEWAY_TOKENS=TOKEN=USER to choose your own)
  Logs:     {stack.log_dir}
Press Ctrl-C to stop everything.""", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    while not stopped.wait(1.0):
        for proc in stack.procs:
            if proc.popen.poll() is not None:
                print(f"{proc.name} exited unexpectedly; log {proc.log_path}:\n{proc.log_tail()}")
                stopped.set()
    print("stopping ...", flush=True)
    stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
