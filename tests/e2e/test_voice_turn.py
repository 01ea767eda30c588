"""The main job, end to end with real models: speech in, transcript, an LLM reply, speech out.

Real Whisper base (STT), the real local LLM (llama.cpp serving the packaged
Qwen2.5-Coder-1.5B GGUF), real piper (TTS), real redis-server; the audio goes
through the same CLI client a person uses (``voicebot call``), at real-time pace.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.audio import silence, speech
from tests.conftest import LOG_ROOT, TOKENS
from voicebot.common.audio import float_to_pcm16, read_wav, write_wav
from voicebot.devstack import (
    Stack,
    start_brain_and_gateway,
    start_local_llm,
    start_mcp_servers,
)

pytestmark = pytest.mark.e2e
SENTENCE = "I would like to book a table for two tomorrow at seven."


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
    audio = np.concatenate([silence(500), speech(SENTENCE), silence(300)])
    path = tmp_path_factory.mktemp("audio") / "booking.wav"
    write_wav(path, float_to_pcm16(audio), 16000)
    return path


def test_spoken_booking_request_gets_a_spoken_reply(real_llm_gateway, booking_wav, tmp_path):
    out = tmp_path / "reply.wav"
    cli = subprocess.run(
        [sys.executable, "-m", "voicebot.gateway.cli", "call", str(booking_wav), "--url", real_llm_gateway,
         "--token", "tok-alice", "--out", str(out), "--timeout", "120"],
        capture_output=True, text=True, timeout=180,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    lines = dict(line.split(":", 1) for line in cli.stdout.splitlines()
                 if line.startswith(("transcript", "reply:")))
    transcript = lines["transcript"].lower()
    assert "book" in transcript and "table" in transcript
    assert lines["reply"].strip() not in ("", "-")
    for stage in ("endpoint", "stt", "llm_ttft", "tts_ttfa", "voice_to_voice"):
        row = next(line for line in cli.stdout.splitlines() if line.startswith(stage))
        assert row.split()[-1].isdigit(), f"stage {stage} has no figure: {row}"
    pcm, rate = read_wav(out)
    assert len(pcm) / 2 / rate >= 0.5
    print(cli.stdout)
