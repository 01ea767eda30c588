"""The main job, end to end with real models: speech in, transcript, an LLM reply, speech out.

Real Whisper base (STT), the real local LLM (llama.cpp serving the packaged
Qwen2.5-Coder-1.5B GGUF), real piper (TTS), real redis-server; the audio goes
through the same CLI client a person uses (``voicebot call``), at real-time pace; the WAV and
the checks are tests/e2e/spoken_turn.py's, which `make test-compose` gives the compose stack.
"""

from __future__ import annotations

import pytest

from tests.conftest import LOG_ROOT, TOKENS
from tests.e2e.spoken_turn import assert_spoken_reply, write_booking_wav
from voicebot.devstack import (
    Stack,
    start_brain_and_gateway,
    start_local_llm,
    start_mcp_servers,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def real_llm_gateway(services):
    stack = Stack(LOG_ROOT / "e2e", quiet=True)
    try:
        # As `make run` has it: the main LLM, the guard's own instance, the reservation demo.
        llm_url, llm_env = start_local_llm(stack)
        _, profile_env = start_mcp_servers(stack, "restaurant", {"RESERVATIONS_DB": ":memory:"})
        _, gateway = start_brain_and_gateway(
            stack, redis_url=services.redis_url, llm_base_url=llm_url,
            tokens=TOKENS, stt=services.stt, tts=services.tts, name="real", brain_env={
                **profile_env, **llm_env},
        )
        gateway_port = gateway.ready["http"]
        yield f"ws://127.0.0.1:{gateway_port}/v1/call"
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def booking_wav(tmp_path_factory):
    return write_booking_wav(tmp_path_factory.mktemp("audio") / "booking.wav")


def test_spoken_booking_request_gets_a_spoken_reply(real_llm_gateway, booking_wav, tmp_path):
    print(assert_spoken_reply(real_llm_gateway, "tok-alice", booking_wav, tmp_path / "reply.wav"))
