"""Shared fixtures: a real redis-server, a scripted LLM over HTTP, and real services on random ports."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.fakes.fake_llm import FakeLLM
from voicebot.devstack import Stack, free_port

TOKENS = "tok-alice=alice,tok-bob=bob"
LOG_ROOT = Path(os.environ.get("VOICEBOT_TEST_LOGS", "/tmp/voicebot-test-logs"))


@pytest.fixture(scope="session")
def redis_url():
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    stack = Stack(LOG_ROOT / "redis", quiet=True)
    port = free_port()
    stack.start_redis(port)
    yield f"redis://127.0.0.1:{port}/0"
    stack.stop()


@pytest.fixture
def redis_client(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def fake_llm():
    llm = FakeLLM().start()
    yield llm
    llm.stop()


@pytest.fixture(autouse=False)
def scripted_llm(fake_llm):
    """The session's fake LLM, reset to its defaults for one test."""
    fake_llm.script = FakeLLM.script
    fake_llm.fail_next, fake_llm.delay_s = 0, 0.0
    fake_llm.requests.clear()
    yield fake_llm
    fake_llm.script = FakeLLM.script
    fake_llm.fail_next, fake_llm.delay_s = 0, 0.0


@dataclass
class RunningStack:
    stack: Stack
    redis_url: str
    stt_addr: str
    tts_addr: str
    brain_addr: str
    gateway_port: int
    metrics_ports: dict[str, int]

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.gateway_port}/v1/call"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"


def start_brain_and_gateway(stack: Stack, name: str, redis_url: str, llm_url: str,
                            stt_addr: str, tts_addr: str,
                            brain_env: dict[str, str] | None = None) -> tuple[str, int, int]:
    brain = stack.start_service(f"brain-{name}", "services.brain.server", {
        "BRAIN_PORT": "0", "BRAIN_METRICS_PORT": "0", "BRAIN_REDIS_URL": redis_url,
        "BRAIN_LLM_BASE_URL": llm_url, "BRAIN_LLM_DEADLINE_S": "2", **(brain_env or {}),
    })
    brain_addr = f"127.0.0.1:{brain.ready['grpc']}"
    gateway = stack.start_service(f"gateway-{name}", "gateway.app", {
        "GATEWAY_PORT": "0", "GATEWAY_TOKENS": TOKENS, "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_STT_ADDR": stt_addr, "GATEWAY_BRAIN_ADDR": brain_addr, "GATEWAY_TTS_ADDR": tts_addr,
    })
    return brain_addr, gateway.ready["http"], brain.ready["metrics"]


@pytest.fixture(scope="session")
def services(redis_url, fake_llm):
    """STT (Whisper base), TTS (piper), brain (scripted LLM) and gateway as real processes."""
    stack = Stack(LOG_ROOT / "services", quiet=True)
    try:
        stt = stack.start_service("stt", "services.stt.server",
                                  {"STT_PORT": "0", "STT_METRICS_PORT": "0"})
        tts = stack.start_service("tts", "services.tts.server",
                                  {"TTS_PORT": "0", "TTS_METRICS_PORT": "0"})
        stt_addr, tts_addr = f"127.0.0.1:{stt.ready['grpc']}", f"127.0.0.1:{tts.ready['grpc']}"
        brain_addr, gw_port, brain_metrics = start_brain_and_gateway(
            stack, "fake", redis_url, fake_llm.base_url, stt_addr, tts_addr)
        yield RunningStack(stack, redis_url, stt_addr, tts_addr, brain_addr, gw_port, {
            "stt": stt.ready["metrics"], "tts": tts.ready["metrics"], "brain": brain_metrics,
        })
    finally:
        stack.stop()
