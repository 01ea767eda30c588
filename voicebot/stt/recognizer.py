"""One recognition stream's audio side, and the decode pool shared by all streams.

``StreamRecognizer`` is synchronous and cheap (resampling and VAD only): it
turns audio into utterance start/end decisions and can hand out the audio of
the open utterance at any time (for a partial). The expensive Whisper decode
happens in ``DecodePool`` worker threads shared by every stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from voicebot.common.audio import StreamResampler, pcm16_to_float
from voicebot.stt.endpointer import EndpointConfig, Endpointer, Pause, SpeechEnd, SpeechStart
from voicebot.stt.engine import SttEngine
from voicebot.stt.metrics import DECODE_SECONDS, DECODE_WAIT_SECONDS, QUEUE_DEPTH
from voicebot.stt.vad import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, VadStream

# Trailing silence kept after the last speech frame: Whisper ends words more
# cleanly with a little room, but more only costs decode time.
TAIL_FRAMES = 3


@dataclass(frozen=True)
class Segment:
    """Audio of one utterance, from its start (with pre-roll) to a speech end plus a short tail."""

    utterance: int
    start_ms: int
    speech_end_frame: int  # first frame after the last speech frame it holds
    audio: np.ndarray

    @property
    def end_ms(self) -> int:
        return self.speech_end_frame * FRAME_MS

    def covers(self, other: Segment) -> bool:
        """True when decoding ``other`` would hear no speech this one lacks.

        Same utterance, same last speech frame, and at most one frame less
        trailing silence (a speculative decode may start before the full tail).
        """
        return (
            self.utterance == other.utterance
            and self.speech_end_frame == other.speech_end_frame
            and len(self.audio) + FRAME_SAMPLES >= len(other.audio)
        )


@dataclass(frozen=True)
class Started:
    utterance: int
    offset_ms: int


@dataclass(frozen=True)
class Paused:
    """The open utterance paused long enough for the end-of-turn model to judge it."""

    utterance: int
    pause: Pause


@dataclass(frozen=True)
class Ended:
    segment: Segment
    reason: str

    @property
    def utterance(self) -> int:
        return self.segment.utterance


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
        # Bounded by the endpointer: max_frames forces an end.
        self._utterance: list[np.ndarray] = []
        self._utterance_first_frame = 0
        self.utterance_index = 0  # of the open utterance, or of the next one

    @property
    def in_speech(self) -> bool:
        return self._endpointer.in_speech

    @property
    def speech_end_frame(self) -> int:
        return self._endpointer.last_speech_frame + 1

    @property
    def silence_frames(self) -> int:
        return self._endpointer.silence_frames

    @property
    def start_frame(self) -> int:
        return self._endpointer.start_frame

    def end_turn(self, paused: Paused) -> list[Ended]:
        """The model says the caller finished at ``paused``: close the utterance, unless
        speech came back since."""
        if paused.utterance != self.utterance_index:
            return []
        return [self._close(end) for end in self._endpointer.end_turn(paused.pause)]

    def words_done(self, paused: Paused) -> list[Ended]:
        """The pause's words read as finished, the model unsure: the pause's shorter limit."""
        if paused.utterance != self.utterance_index:
            return []
        return [self._close(end) for end in self._endpointer.words_done(paused.pause)]

    def use_timer(self, utterance: int) -> list[Ended]:
        """The fixed silence closes ``utterance`` (the model could not judge it)."""
        if utterance != self.utterance_index:
            return []
        return [self._close(end) for end in self._endpointer.use_timer()]

    def turn_audio(self, max_samples: int, end_frame: int | None = None) -> np.ndarray:
        """The open utterance up to ``end_frame`` (None: up to now), at most ``max_samples``."""
        frames = self._utterance
        if end_frame is not None:
            frames = frames[: max(end_frame - self._utterance_first_frame, 1)]
        frames = frames[-(max_samples // FRAME_SAMPLES + 1):]
        audio = np.concatenate(frames) if frames else np.zeros(0, np.float32)
        return audio[-max_samples:]

    def feed(self, pcm16: bytes) -> list[Started | Ended | Paused]:
        data = self._odd_byte + pcm16
        # A frame may split a sample across messages; keep the odd byte.
        self._odd_byte = data[-1:] if len(data) % 2 else b""
        samples = self._resampler.process(pcm16_to_float(data))
        return self._consume(samples)

    def finish(self) -> list[Started | Ended | Paused]:
        events = self._consume(self._resampler.process(np.zeros(0, np.float32), last=True))
        if self._endpointer.in_speech:
            events += [self._close(end) for end in self._endpointer.finish()]
        return events

    def snapshot(self) -> Segment | None:
        """The open utterance so far (what a partial decodes), or None between utterances."""
        if not self._endpointer.in_speech:
            return None
        return self._segment(self.speech_end_frame)

    def _consume(self, samples: np.ndarray) -> list[Started | Ended | Paused]:
        self._pending = np.concatenate([self._pending, samples])
        events: list[Started | Ended | Paused] = []
        while len(self._pending) >= FRAME_SAMPLES:
            frame = self._pending[:FRAME_SAMPLES]
            self._pending = self._pending[FRAME_SAMPLES:]
            events += self._process_frame(frame)
        return events

    def _process_frame(self, frame: np.ndarray) -> list[Started | Ended | Paused]:
        # Garbage input (NaN, inf) must not poison the recurrent state.
        frame = np.nan_to_num(frame, nan=0.0, posinf=1.0, neginf=-1.0)
        index = self._endpointer.frame
        was_in_speech = self._endpointer.in_speech
        decisions = self._endpointer.push(self._vad.probability(frame))
        if was_in_speech:
            self._utterance.append(frame)
        else:
            self._recent.append(frame)
        events: list[Started | Ended | Paused] = []
        for decision in decisions:
            if isinstance(decision, SpeechStart):
                self._utterance = list(self._recent)
                self._utterance_first_frame = index + 1 - len(self._recent)
                self._recent.clear()
                events.append(Started(self.utterance_index, decision.frame * FRAME_MS))
            elif isinstance(decision, SpeechEnd):
                events.append(self._close(decision))
            else:
                events.append(Paused(self.utterance_index, decision))
        return events

    def _segment(self, speech_end_frame: int) -> Segment:
        keep = speech_end_frame + TAIL_FRAMES - self._utterance_first_frame
        frames = self._utterance[: max(keep, 1)]
        audio = np.concatenate(frames) if frames else np.zeros(0, np.float32)
        start_ms = self._endpointer.start_frame * FRAME_MS
        return Segment(self.utterance_index, start_ms, speech_end_frame, audio)

    def _close(self, end: SpeechEnd) -> Ended:
        segment = self._segment(end.frame)
        self._utterance = []
        self.utterance_index += 1
        return Ended(segment, end.reason)


# Decode priorities, most urgent first. A final is what someone waits for; a
# speculative decode (speech just paused) is probably the next final; a
# periodic partial only refreshes what is on screen.
FINAL, SPECULATIVE, PARTIAL = 0, 1, 2
KIND = {FINAL: "final", SPECULATIVE: "speculative", PARTIAL: "partial"}

SegmentSource = Callable[[], Segment | None]


class DecodeJob:
    """One queued decode.

    ``source`` is called when a worker takes the job, not when it is queued, so
    a partial decodes the newest audio of its stream. Its future resolves to
    ``(segment, text)``, or None when the source had nothing to decode.
    """

    def __init__(self, source: SegmentSource, language: str, priority: int) -> None:
        self.source = source
        self.language = language
        self.priority = priority
        self.future: asyncio.Future[tuple[Segment, str] | None] = (
            asyncio.get_running_loop().create_future()
        )
        self.segment: Segment | None = None  # set when a worker takes it
        self.queued_at = time.perf_counter()

    @property
    def started(self) -> bool:
        return self.segment is not None


class DecodePool:
    """Bounded worker pool shared by all streams: at most ``workers`` decodes run at once.

    Waiting jobs are ordered by priority, then by arrival. The queue stays
    bounded because each stream keeps at most one partial and one final job
    here. A job whose future was cancelled (its stream went away) is dropped
    before it runs; a running decode cannot be interrupted, but its result is
    discarded and its worker moves on to the next job.
    """

    def __init__(self, engine: SttEngine, workers: int) -> None:
        self.engine = engine
        self.workers = max(1, workers)
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="stt-decode")
        self._heap: list[tuple[int, int, DecodeJob]] = []
        self._order = itertools.count()
        self._waiting: set[DecodeJob] = set()
        self.running = 0
        self._reported_depth = 0
        self.speaking = 0  # streams with an open utterance (kept by RecognitionStream)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def partial_share(self) -> float:
        """How much to stretch each stream's partial interval: 1 until more streams
        speak than there are workers, then in proportion."""
        return max(1.0, self.speaking / self.workers)

    def submit(self, source: SegmentSource, language: str, priority: int) -> DecodeJob:
        job = DecodeJob(source, language, priority)
        self._waiting.add(job)
        heapq.heappush(self._heap, (priority, next(self._order), job))
        job.future.add_done_callback(lambda _: self._forget(job))
        self._pump()
        return job

    async def decode(self, segment: Segment, language: str, priority: int = FINAL) -> str:
        """Decode one fixed segment (waiting its turn); empty text for empty audio."""
        result = await self.submit(lambda: segment, language, priority).future
        return result[1] if result else ""

    def raise_priority(self, job: DecodeJob, priority: int) -> None:
        """Move a waiting job ahead; the old heap entry is skipped when popped."""
        if job in self._waiting and priority < job.priority:
            job.priority = priority
            heapq.heappush(self._heap, (priority, next(self._order), job))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _forget(self, job: DecodeJob) -> None:
        if job in self._waiting:
            self._waiting.discard(job)
            self._report_depth()

    def _pump(self) -> None:
        while self.running < self.workers and self._heap:
            priority, _, job = heapq.heappop(self._heap)
            if job not in self._waiting or priority != job.priority:
                continue  # cancelled, or an entry left behind by raise_priority
            self._waiting.discard(job)
            segment = job.source()
            if segment is None or len(segment.audio) == 0:
                job.future.set_result(None)
                continue
            self._start(job, segment)
        self._report_depth()

    def _start(self, job: DecodeJob, segment: Segment) -> None:
        job.segment = segment
        self.running += 1
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        DECODE_WAIT_SECONDS.labels(KIND[job.priority]).observe(started - job.queued_at)
        work = self._executor.submit(self.engine.transcribe, segment.audio, job.language,
                                     draft=job.priority == PARTIAL)

        def done(_: Future) -> None:
            # The loop may already be closed when the service shuts down mid-decode.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._finished, job, work, started)

        work.add_done_callback(done)

    def _finished(self, job: DecodeJob, work: Future, started: float) -> None:
        self.running -= 1
        DECODE_SECONDS.labels(KIND[job.priority]).observe(time.perf_counter() - started)
        if not job.future.done():
            if work.cancelled():
                job.future.cancel()
            elif (error := work.exception()) is not None:
                job.future.set_exception(error)
            else:
                assert job.segment is not None
                job.future.set_result((job.segment, work.result()))
        self._pump()

    def _report_depth(self) -> None:
        # Several pools may share the process-wide gauge (tests), so report deltas.
        depth = len(self._waiting) + self.running
        QUEUE_DEPTH.inc(depth - self._reported_depth)
        self._reported_depth = depth
