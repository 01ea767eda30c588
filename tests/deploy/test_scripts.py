"""The helper scripts baked into the images, run for real: the container health
check (gRPC health and HTTP) and the gateway's preStop wait."""

from __future__ import annotations

import contextlib
import http.server
import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.deploy.support import ROOT

HEALTHCHECK = ROOT / "docker" / "healthcheck.py"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docker" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _healthcheck(*args: str, env: dict[str, str]) -> int:
    return subprocess.run([sys.executable, str(HEALTHCHECK), *args], env={**os.environ, **env},
                          capture_output=True, timeout=30).returncode


@contextlib.contextmanager
def grpc_health_server(status) -> Iterator[int]:
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    servicer.set("", status)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(None)


@contextlib.contextmanager
def http_server(routes: dict[str, tuple[int, str]]) -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = routes.get(self.path, (404, "not found"))
            data = body.encode() if isinstance(body, str) else body()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_grpc_healthcheck_follows_the_health_service():
    with grpc_health_server(health_pb2.HealthCheckResponse.SERVING) as port:
        assert _healthcheck("grpc", "STT_PORT", "1", env={"STT_PORT": str(port)}) == 0
    with grpc_health_server(health_pb2.HealthCheckResponse.NOT_SERVING) as port:
        assert _healthcheck("grpc", "STT_PORT", "1", env={"STT_PORT": str(port)}) == 1
    # The default port is used when the variable is unset; nothing listens there.
    with grpc_health_server(health_pb2.HealthCheckResponse.SERVING) as port:
        assert _healthcheck("grpc", "NO_SUCH_PORT_VAR", str(port), env={}) == 0
    assert _healthcheck("grpc", "STT_PORT", "1", env={"STT_PORT": "1"}) == 1


def test_http_healthcheck():
    with http_server({"/healthz": (200, "ok"), "/bad": (503, "no")}) as port:
        env = {"GATEWAY_PORT": str(port)}
        assert _healthcheck("http", "GATEWAY_PORT", "1", "/healthz", env=env) == 0
        assert _healthcheck("http", "GATEWAY_PORT", "1", "/bad", env=env) == 1
    assert _healthcheck("http", "GATEWAY_PORT", "1", "/healthz", env={"GATEWAY_PORT": "1"}) == 1
    assert _healthcheck("bogus", env={}) == 2


METRICS = """# HELP voicebot_active_sessions Open WebSocket sessions
# TYPE voicebot_active_sessions gauge
voicebot_active_sessions {n}
voicebot_turns_total{{outcome="ok"}} 7.0
"""


def test_metric_value_parses_the_prometheus_text_format():
    wait_idle = _load("wait_idle")
    assert wait_idle.metric_value(METRICS.format(n="3.0"), "voicebot_active_sessions") == 3.0
    assert wait_idle.metric_value(METRICS.format(n="0.0"), "voicebot_turns_total") == 7.0
    assert wait_idle.metric_value('x{a="1"} 2\nx{a="2"} 3\n', "x") == 5.0
    assert wait_idle.metric_value(METRICS.format(n="1"), "voicebot_active") is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(("sessions", "expected", "elapsed"), [
    ([2, 1, 0], "idle", 5 + 2 * 2),  # min wait, then polls until the calls are gone
    ([0], "idle", 5),  # never returns before --min-seconds (endpoint removal propagates)
    ([4] * 1000, "timeout", 60),  # gives up at --max-seconds
])
def test_wait_idle_waits_for_calls_to_end(sessions, expected, elapsed):
    wait_idle = _load("wait_idle")
    values = iter(sessions)
    current = {"n": sessions[0]}

    def body() -> bytes:
        current["n"] = next(values, current["n"])
        return METRICS.format(n=float(current["n"])).encode()

    clock = FakeClock()
    with http_server({"/metrics": (200, body)}) as port:
        why = wait_idle.wait_idle(f"http://127.0.0.1:{port}/metrics", "voicebot_active_sessions",
                                  min_seconds=5, max_seconds=60, interval=2, clock=clock, sleep=clock.sleep)
    assert why == expected
    assert clock.now == elapsed


def test_wait_idle_returns_when_the_server_is_gone():
    wait_idle = _load("wait_idle")
    clock = FakeClock()
    why = wait_idle.wait_idle("http://127.0.0.1:1/metrics", "voicebot_active_sessions", 5, 60, 2,
                              clock=clock, sleep=clock.sleep)
    assert why == "unreachable"


def test_wait_idle_command_line():
    with http_server({"/metrics": (200, METRICS.format(n="0"))}) as port:
        result = subprocess.run(
            [sys.executable, str(ROOT / "docker" / "wait_idle.py"), f"--url=http://127.0.0.1:{port}/metrics",
             "--metric=voicebot_active_sessions", "--min-seconds=0", "--max-seconds=5"],
            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "wait_idle: idle" in result.stderr
