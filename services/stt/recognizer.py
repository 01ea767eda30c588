"""One recognition stream: resample, VAD frames, endpointing, utterance audio.

``StreamRecognizer`` is synchronous and cheap (VAD only); the expensive
decode happens in ``DecodePool`` worker threads shared by all streams.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from services.stt.endpointer import EndpointConfig, Endpointer, SpeechEnd, SpeechStart
from services.stt.engine import SttEngine
from services.stt.metrics import DECODE_SECONDS, QUEUE_DEPTH
from services.stt.vad import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, VadStream
from voicebot.common.audio import StreamResampler, pcm16_to_float

# Trailing silence kept after the last speech frame: Whisper ends words more
# cleanly with a little room, but more only costs decode time.
TAIL_FRAMES = 3


@dataclass(frozen=True)
class Started:
    offset_ms: int


@dataclass(frozen=True)
class Ended:
    start_ms: int
    end_ms: int
    reason: str
    audio: np.ndarray


class StreamRecognizer:
    def __init__(
        self,
        vad: VadStream,
        endpoint: EndpointConfig,
        sample_rate: int,
        pre_roll_ms: int,
    ) -> None:
        self._vad = vad
        self._endpointer = Endpointer(endpoint)
        self._resampler = StreamResampler(sample_rate, SAMPLE_RATE)
        self._pending = np.zeros(0, dtype=np.float32)
        self._odd_byte = b""
        keep = pre_roll_ms // FRAME_MS + endpoint.min_speech_frames
        self._recent: deque[np.ndarray] = deque(maxlen=max(keep, 1))
        self._utterance: list[np.ndarray] = []
        self._utterance_first_frame = 0

    def feed(self, pcm16: bytes) -> list[Started | Ended]:
        data = self._odd_byte + pcm16
        # A frame may split a sample across messages; keep the odd byte.
        self._odd_byte = data[-1:] if len(data) % 2 else b""
        samples = self._resampler.process(pcm16_to_float(data))
        return self._consume(samples)

    def finish(self) -> list[Started | Ended]:
        events = self._consume(self._resampler.process(np.zeros(0, np.float32), last=True))
        if self._endpointer.in_speech:
            events += [self._close(end) for end in self._endpointer.finish()]
        return events

    def _consume(self, samples: np.ndarray) -> list[Started | Ended]:
        self._pending = np.concatenate([self._pending, samples])
        events: list[Started | Ended] = []
        while len(self._pending) >= FRAME_SAMPLES:
            frame = self._pending[:FRAME_SAMPLES]
            self._pending = self._pending[FRAME_SAMPLES:]
            events += self._process_frame(frame)
        return events

    def _process_frame(self, frame: np.ndarray) -> list[Started | Ended]:
        # Garbage input (NaN, inf) must not poison the recurrent state.
        frame = np.nan_to_num(frame, nan=0.0, posinf=1.0, neginf=-1.0)
        index = self._endpointer.frame
        was_in_speech = self._endpointer.in_speech
        decisions = self._endpointer.push(self._vad.probability(frame))
        if was_in_speech:
            self._utterance.append(frame)
        else:
            self._recent.append(frame)
        events: list[Started | Ended] = []
        for decision in decisions:
            if isinstance(decision, SpeechStart):
                self._utterance = list(self._recent)
                self._utterance_first_frame = index + 1 - len(self._recent)
                self._recent.clear()
                events.append(Started(decision.frame * FRAME_MS))
            elif isinstance(decision, SpeechEnd):
                events.append(self._close(decision))
        return events

    def _close(self, end: SpeechEnd) -> Ended:
        keep = end.frame + TAIL_FRAMES - self._utterance_first_frame
        frames = self._utterance[: max(keep, 1)]
        audio = np.concatenate(frames) if frames else np.zeros(0, np.float32)
        start_frame = self._endpointer.start_frame
        self._utterance = []
        return Ended(start_frame * FRAME_MS, end.frame * FRAME_MS, end.reason, audio)


class DecodePool:
    """Bounded worker pool shared by all streams: at most ``workers`` decodes run at once."""

    def __init__(self, engine: SttEngine, workers: int) -> None:
        self.engine = engine
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stt-decode")

    async def transcribe(self, audio: np.ndarray, language: str, kind: str = "final") -> str:
        loop = asyncio.get_running_loop()
        QUEUE_DEPTH.inc()
        started = time.perf_counter()
        try:
            return await loop.run_in_executor(
                self._executor, self.engine.transcribe, audio, language
            )
        finally:
            QUEUE_DEPTH.dec()
            DECODE_SECONDS.labels(kind).observe(time.perf_counter() - started)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
