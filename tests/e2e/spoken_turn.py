"""One spoken turn through a running gateway, as a person makes it and as two tests check it:
the e2e test (the stack `make run` starts) and the compose test (`make test-compose`).

A booking request spoken by the packaged piper voice goes through the CLI client a person uses
(``voicebot call``) at real-time pace; the reply must be a transcript of the request, a spoken
reply that is not the fallback sentence the brain speaks when the model gives none, and a figure
for every stage.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.audio import silence, speech
from voicebot.brain.lang import language_pack
from voicebot.common.audio import float_to_pcm16, read_wav, write_wav

SENTENCE = "I would like to book a table for two tomorrow at seven."
STAGES = ("endpoint", "stt", "llm_ttft", "tts_ttfa", "voice_to_voice")


def write_booking_wav(path: Path) -> Path:
    audio = np.concatenate([silence(500), speech(SENTENCE), silence(300)])
    write_wav(path, float_to_pcm16(audio), 16000)
    return path


def assert_spoken_reply(url: str, token: str, wav: Path, out: Path) -> str:
    """Call ``url`` with ``wav``; fail unless the turn was heard and answered in speech. Returns
    the client's report (transcript, reply, the stages' times)."""
    cli = subprocess.run(
        [sys.executable, "-m", "voicebot.gateway.cli", "call", str(wav), "--url", url,
         "--token", token, "--out", str(out), "--timeout", "120"],
        capture_output=True, text=True, timeout=180,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    lines = dict(line.split(":", 1) for line in cli.stdout.splitlines()
                 if line.startswith(("transcript", "reply:")))
    transcript = lines["transcript"].lower()
    assert "book" in transcript and "table" in transcript
    assert lines["reply"].strip() not in ("", "-")
    fallback = language_pack("en").sentences["fallback"]
    assert lines["reply"].strip() != fallback, "the model gave no reply: the brain's fallback"
    for stage in STAGES:
        row = next(line for line in cli.stdout.splitlines() if line.startswith(stage))
        assert row.split()[-1].isdigit(), f"stage {stage} has no figure: {row}"
    pcm, rate = read_wav(out)
    assert len(pcm) / 2 / rate >= 0.5
    return cli.stdout
