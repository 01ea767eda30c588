"""Shared fixtures: a real redis-server, a scripted LLM over HTTP, and real services on random ports."""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.fakes.fake_llm import FakeLLM
from voicebot.common.redis import connect_redis_sync
from voicebot.devstack import (
    Proc,
    Stack,
    ensure_internal_token,
    free_port,
    redis_url_for,
    start_brain_and_gateway,
    start_speech,
)

TOKENS = "tok-alice=alice,tok-bob=bob"
# Each pytest-xdist worker (PYTEST_XDIST_WORKER: gw0, gw1, ...) starts its own session fixtures:
# their logs and pid files go under a folder of the worker's own.
LOG_ROOT = Path(os.environ.get("VOICEBOT_TEST_LOGS", "/tmp/voicebot-test-logs")) / os.environ.get(
    "PYTEST_XDIST_WORKER", "")
# Internal gRPC calls are authenticated in tests as in production: one token for the session,
# in this process's environment (in-process servers and clients) and every child's.
INTERNAL_TOKEN = ensure_internal_token()
REDIS_PASSWORD = secrets.token_urlsafe(18)
# /v1/twilio's per-deployment secret for the shared gateway (Twilio streams carry it in the URL).
TWILIO_SECRET = secrets.token_urlsafe(18)


@pytest.fixture(scope="session")
def redis_url():
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    stack = Stack(LOG_ROOT / "redis", quiet=True)
    port = free_port()
    stack.start_redis(port, password=REDIS_PASSWORD)  # the URL carries it, as make run's does
    yield redis_url_for(port, REDIS_PASSWORD)
    stack.stop()


@pytest.fixture
def redis_client(redis_url) -> redis.Redis:
    client = connect_redis_sync(redis_url)
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
    fake_llm.fail_next, fake_llm.delay_s, fake_llm.fail_status = 0, 0.0, 503
    fake_llm.fail_headers = {}
    fake_llm.requests.clear()
    yield fake_llm
    fake_llm.script = FakeLLM.script
    fake_llm.fail_next, fake_llm.delay_s = 0, 0.0


@dataclass
class RunningStack:
    stack: Stack
    redis_url: str
    stt: Proc
    tts: Proc
    brain_addr: str
    gateway_port: int
    metrics_ports: dict[str, int]

    @property
    def stt_addr(self) -> str:
        return f"127.0.0.1:{self.stt.ready['grpc']}"

    @property
    def tts_addr(self) -> str:
        return f"127.0.0.1:{self.tts.ready['grpc']}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.gateway_port}/v1/call"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"


# The test stack's business: FAQ answers, no tools (tests/fakes/profiles/stack.yaml).
STACK_PROFILE = Path(__file__).parent / "fakes" / "profiles" / "stack.yaml"


@pytest.fixture(scope="session")
def services(redis_url, fake_llm):
    """STT (Whisper base), TTS (piper), brain (scripted LLM) and gateway as real processes."""
    stack = Stack(LOG_ROOT / "services", quiet=True)
    try:
        stt, tts = start_speech(stack)
        brain, gateway = start_brain_and_gateway(
            stack, redis_url=redis_url, llm_base_url=fake_llm.base_url, tokens=TOKENS, stt=stt, tts=tts,
            brain_env={"BRAIN_LLM_DEADLINE_S": "2", "BRAIN_PROFILE": str(STACK_PROFILE)},
            env={"GATEWAY_TWILIO_SECRET": TWILIO_SECRET},
            name="fake")
        yield RunningStack(stack, redis_url, stt, tts, f"127.0.0.1:{brain.ready['grpc']}",
                           gateway.ready["http"], {"stt": stt.ready["metrics"], "tts": tts.ready["metrics"],
                                                   "brain": brain.ready["metrics"]})
    finally:
        stack.stop()


# The suites that start whole stacks come first: with pytest-xdist's `--dist loadfile` (scripts/test.sh)
# the workers take them early and the many short unit files fill the gaps at the end, instead of one
# worker starting a stack while the others have nothing left to do.
_FIRST = ("e2e", "faults", "browser", "observability", "reliability", "deploy", "integration")


def pytest_collection_modifyitems(config, items) -> None:
    def rank(item) -> int:
        parts = item.nodeid.split("/")
        return _FIRST.index(parts[1]) if len(parts) > 2 and parts[1] in _FIRST else len(_FIRST)
    items.sort(key=rank)  # stable: a file's tests keep their order
