"""The CLI speaks either protocol: v1 (/v1/call) or the OpenAI Realtime API (/v1/realtime)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.audio import silence, speech
from tests.fakes.stack_profile import PARKING, TABLE, answer
from voicebot.common.audio import float_to_pcm16, write_wav
from voicebot.gateway.cli_realtime import call_realtime

pytestmark = pytest.mark.integration


async def test_a_spoken_turn_over_the_realtime_protocol(services, scripted_llm, tmp_path):
    path = tmp_path / "q.wav"
    write_wav(path, float_to_pcm16(np.concatenate([silence(300), speech(PARKING),
                                                    silence(300)])), 16000)
    result = await call_realtime(services.ws_url, "tok-alice", wav=str(path))
    assert [t.lower().strip(" .?") for t in result.transcripts] == ["do you have parking"]
    assert result.replies == [answer(PARKING)]  # the business's answer, spoken by code
    assert len(result.audio) / 2 / result.audio_rate > 0.5  # 24 kHz reply audio
    assert result.metrics and result.metrics[0].get("voice_to_voice") is not None


def test_the_cli_takes_protocol_realtime(services, scripted_llm):
    cli = subprocess.run([sys.executable, "-m", "voicebot.gateway.cli", "call", "--protocol", "realtime",
                          "--text", "a table for two", "--url", services.ws_url, "--token", "tok-alice"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f"reply:      {answer(TABLE)}" in cli.stdout
