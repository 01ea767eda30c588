"""What both CLI protocols share: the result of a call and how a WAV is read and paced."""

from __future__ import annotations

from dataclasses import dataclass, field

from voicebot.common.audio import float_to_pcm16, pcm16_to_float, read_wav, resample

FRAME_MS = 20
TRAILING_SILENCE_MS = 1500


@dataclass
class CallResult:
    session_id: str = ""
    transcripts: list[str] = field(default_factory=list)
    partials: int = 0
    replies: list[str] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    audio: bytearray = field(default_factory=bytearray)
    audio_rate: int = 16000
    interrupts: int = 0


def load_audio(path: str) -> tuple[bytes, int]:
    pcm, rate = read_wav(path)
    if rate not in (8000, 16000, 24000, 48000):
        pcm, rate = float_to_pcm16(resample(pcm16_to_float(pcm), rate, 16000)), 16000
    return pcm, rate
