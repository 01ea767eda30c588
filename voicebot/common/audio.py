"""PCM16 helpers shared by services, the gateway and tests."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np
import soxr

SUPPORTED_INPUT_RATES = (8000, 16000, 24000, 48000)


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Little-endian PCM16 bytes to float32 in [-1, 1]. An odd trailing byte is dropped."""
    usable = len(data) - (len(data) % 2)
    return np.frombuffer(data[:usable], dtype="<i2").astype(np.float32) / 32768.0


def float_to_pcm16(samples: np.ndarray) -> bytes:
    clipped = np.clip(samples, -1.0, 1.0)
    return (clipped * 32767.0).astype("<i2").tobytes()


class StreamResampler:
    """Streaming resampler (soxr) that keeps its filter state across chunks."""

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream = (
            None if in_rate == out_rate else soxr.ResampleStream(in_rate, out_rate, 1, "float32")
        )

    def process(self, samples: np.ndarray, last: bool = False) -> np.ndarray:
        if self._stream is None:
            return samples
        return self._stream.resample_chunk(samples.astype(np.float32), last=last)


def resample(samples: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    if in_rate == out_rate:
        return samples
    return soxr.resample(samples.astype(np.float32), in_rate, out_rate)


def read_wav(path: str | Path) -> tuple[bytes, int]:
    """Read a mono or stereo PCM16 WAV; returns mono PCM16 bytes and the sample rate."""
    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV is supported")
        rate, channels = wav.getframerate(), wav.getnchannels()
        frames = wav.readframes(wav.getnframes())
    if channels > 1:
        samples = np.frombuffer(frames, dtype="<i2").reshape(-1, channels)
        frames = samples.mean(axis=1).astype("<i2").tobytes()
    return frames, rate


def wav_bytes(pcm16: bytes, rate: int) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm16)
    return buffer.getvalue()


def write_wav(path: str | Path, pcm16: bytes, rate: int) -> None:
    Path(path).write_bytes(wav_bytes(pcm16, rate))
