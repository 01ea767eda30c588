"""A call's STT stream: frames merged per message, reopened with backoff, failures told once.

Why merge: one gRPC message per 20 ms frame made per-frame gRPC work the gateway's largest
cost (the largest share of its CPU in a loaded profile). Frames that are already waiting when the
stream is ready for the next message go out as one message, so nothing waits for a merge
(no added latency at the endpoint) and a busy gateway sends fewer, larger messages exactly
when that matters.

Why hold audio while nothing happens: in the steady state the gateway writes each frame before
the next one arrives, so there is nothing to merge. While no utterance is open and no reply is
being made, nothing waits on STT but the onset of the next utterance, so the link holds up to
a second of audio per message there. The call says how much it may hold now (``hold_ms``).
A loud frame ends the hold at once (``loud_rms``): the held audio goes with it, so what is
merged is quiet audio, and the onset of speech (a barge-in's pause included) waits on nothing
whenever it is louder than that.

With an utterance open (``speech_hold``) it is the other way round: the words may wait a
little (partials and a barge-in's confirmation can), and a quiet frame ends the hold, since
the endpoint, the speculative decode at a pause and a false start's end ride on the silence
after them. Quiet is measured from the line's own floor too, so a noisy line's silence is
not held.

Why back off: a stream the STT refuses (``RESOURCE_EXHAUSTED``, its stream cap) or cannot
serve (down, restarting) used to be reopened by the very next frame, 50 times a second, with
an error event each time. Now a failure is reported once (``on_down``), the stream is retried
with exponential backoff, and audio in the meantime is kept only as a short tail, which the
next stream starts with, so the first words after a reconnect are not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc

from voicebot.gateway.line_level import SOFT_ONSET_SQUARE, LineFloor, mean_square
from voicebot.gateway.metrics import STT_FAILURES, STT_FRAMES, STT_MESSAGES, STT_STREAMS
from voicebot.v1 import stt_pb2

log = logging.getLogger("gateway.stt")

# Audio frames already waiting for the stream go out merged, up to this many bytes per message.
# One message per frame (the bench's former ``messages-per-frame`` variant) made gRPC work per
# frame the gateway's largest cost.
MAX_MESSAGE_BYTES = 64_000


@dataclass(frozen=True)
class Holds:
    """How long audio may wait for one STT message, by what the call is doing (the call picks
    one per message, see the module's docstring).

    ``idle_ms``: no utterance open and no reply in flight; ``playback_ms``: the reply plays (its
    first audio was sent). Only audio quieter than ``loud_rms`` (RMS of PCM16; 100 is about -50
    dBFS, below speech, above digital silence and a quiet line) is held, so no onset waits on
    these holds and their length costs no latency: ``make bench-gateway`` measured fewer STT
    messages per frame and less gateway CPU at a second than at 100 or 300 ms, and ``make
    bench-bargein`` the same barge-in times at 0, 100, 300 and 1000 ms. Without the loudness
    gate the bot's audio stopped up to a hold later after the caller spoke over it.
    ``speech_ms``: an utterance is open; loud frames may wait this long and a quiet one sends
    what waits at once, so the endpoint's silence waits on nothing; a barge-in's confirmation,
    counted in stream time, measured the same at 0, 60 and 120 ms. ``loud_rms`` 0: no gate (and
    no hold on speech, since nothing could end it)."""

    idle_ms: int = 1000
    playback_ms: int = 1000
    speech_ms: int = 120
    loud_rms: int = 100


DEFAULT_HOLDS = Holds()


# A stream that lived this long (or gave an event) was healthy: the backoff starts again.
HEALTHY_AFTER_S = 2.0


@dataclass(frozen=True)
class Backoff:
    first_s: float = 0.2
    max_s: float = 5.0

    def delay(self, attempt: int) -> float:
        # Full jitter: many calls refused at once do not all come back in the same instant.
        return random.uniform(0.5, 1.0) * min(self.max_s, self.first_s * 2 ** attempt)


# What the outbox holds as audio (anything else is a context, or None for the end).
AUDIO = (bytes, bytearray, memoryview)


class AudioOutbox:
    """Frames (with their arrival time) waiting for the stream, plus in-band utterance contexts.

    A frame's arrival time waits beside it in a deque of floats, not in a tuple with it: a
    tuple per frame was much of what the gateway's young collections walked under load.

    ``take`` returns everything that is waiting, audio merged up to ``max_bytes``; a context
    keeps its place in the order. With ``hold_bytes`` it first waits until that much audio is
    waiting (or ``wake``), unless a context or the end is waiting.
    """

    def __init__(self, max_frames: int, max_bytes: int) -> None:
        self.max_frames, self.max_bytes = max_frames, max_bytes
        self._items: deque[bytes | stt_pb2.UtteranceContext | None] = deque()
        self._arrived: deque[float] = deque()  # each frame's arrival, in the order of the frames
        self._frames = 0
        self._bytes = 0
        self._ready = asyncio.Event()
        # What the waiting ``take`` holds out for: frames below it do not wake it (a task
        # switch per frame would cost more than the gRPC write it saves).
        self._wake_at_bytes = 0
        self._flush = False  # the waiting ``take`` returns what there is, held or not

    @property
    def holding(self) -> bool:
        """A ``take`` is waiting for more audio than there is."""
        return self._wake_at_bytes > 0

    def __len__(self) -> int:
        return self._frames

    @property
    def full(self) -> bool:
        """No more audio is taken (``put_audio`` gives False)."""
        return self._frames >= self.max_frames

    def put_audio(self, frame: bytes, arrived: float) -> bool:
        if self.full:
            return False
        self._items.append(frame)
        self._arrived.append(arrived)
        self._frames += 1
        self._bytes += len(frame)
        if self._bytes >= self._wake_at_bytes:
            self._ready.set()
        return True

    def put_context(self, context: stt_pb2.UtteranceContext) -> None:
        self._items.append(context)
        self._ready.set()

    def close(self) -> None:
        self._items.append(None)
        self._ready.set()

    def wake(self) -> None:
        """The caller's state changed (an utterance, a reply): ``take`` asks how much to hold again."""
        self._ready.set()

    def flush(self) -> None:
        """Whatever is held goes now, however much the hold asks for."""
        self._flush = True
        self._ready.set()

    def keep_tail(self, max_frames: int) -> None:
        """While no stream takes audio: keep only the newest frames (and no stale contexts)."""
        frames = self.frames()[-max_frames:] if max_frames else []
        closed = None in self._items
        self._items = deque(frame for frame, _ in frames)
        self._arrived = deque(arrived for _, arrived in frames)
        self._frames = len(frames)
        self._bytes = sum(len(frame) for frame, _ in frames)
        if closed:
            self._items.append(None)

    def frames(self) -> list[tuple[bytes, float]]:
        """The audio waiting, each frame with its arrival time."""
        audio = [item for item in self._items if isinstance(item, AUDIO)]
        return list(zip(audio, self._arrived, strict=True))

    async def take(self, hold_bytes: Callable[[], int] = lambda: 0,
                   ) -> list[bytes | stt_pb2.UtteranceContext | None]:
        """Wait for something, then return it all: runs of audio merged into one message each."""
        while True:
            hold = hold_bytes()
            if self._items and (self._flush or self._bytes >= hold or not isinstance(self._items[-1], AUDIO)):
                break
            self._wake_at_bytes = hold
            self._ready.clear()
            await self._ready.wait()
        self._wake_at_bytes = 0
        self._flush = False
        out: list[bytes | stt_pb2.UtteranceContext | None] = []
        audio: list[bytes] = []
        size = 0
        while self._items:
            item = self._items[0]
            if isinstance(item, AUDIO):
                if audio and size + len(item) > self.max_bytes:
                    break
                self._items.popleft()
                self._arrived.popleft()
                self._frames -= 1
                self._bytes -= len(item)
                audio.append(item)
                size += len(item)
                continue
            if audio:
                break
            self._items.popleft()
            out.append(item)
            if item is None:
                break
        if audio:
            out.append(b"".join(audio))
        return out


class SttLink:
    """Owns the call's STT stream. ``on_event`` gets every RecognizeEvent; ``on_ended`` runs
    whenever a stream ends (no recogniser: a pending barge-in must not wait); ``on_down`` runs
    once per outage with the gRPC status code."""

    def __init__(self, open_stream: Callable[[AsyncIterator[stt_pb2.RecognizeRequest]], AsyncIterator],
                 config: stt_pb2.RecognitionConfig, *,
                 on_event: Callable[[stt_pb2.RecognizeEvent], Awaitable[None]],
                 on_ended: Callable[[], Awaitable[None]],
                 on_down: Callable[[grpc.StatusCode, str], Awaitable[None]],
                 max_frames: int, max_message_bytes: int = MAX_MESSAGE_BYTES, replay_ms: int = 600,
                 hold_ms: Callable[[], int] = lambda: 0, loud_rms: int = 0,
                 speech_hold: Callable[[], bool] = lambda: False,
                 backoff: Backoff | None = None,
                 reconnected: Callable[[], Awaitable[None]] | None = None) -> None:
        self._open, self._config = open_stream, config
        self._on_event, self._on_ended, self._on_down = on_event, on_ended, on_down
        self._bytes_per_ms = config.sample_rate * 2 / 1000
        self._replay_frames = max(0, replay_ms // 20)
        self._hold_ms = hold_ms  # how much audio may wait for a message now (0: every frame at once)
        # A frame at least this loud (RMS, PCM16) ends a hold: the held audio goes with it. 0: never.
        self._loud_square = float(loud_rms) ** 2
        # True while the hold is one of speech (an utterance is open): then loud frames wait and
        # a quiet one ends the hold, so the silence the endpoint waits for waits on nothing.
        self._speech_hold = speech_hold
        # The quietest of the last 50 frames (a second of 20 ms frames): "quiet" is measured from
        # the line's own floor.
        self._floor = LineFloor(50)
        self._backoff = backoff or Backoff()
        # Returns once the STT channel is connected again after being down (see ``_pause``).
        self._reconnected = reconnected
        self.outbox = AudioOutbox(max_frames, max_message_bytes)
        self.up = False  # a stream is open and takes audio
        self.down = False  # an outage was reported and has not ended
        # Stream time of all audio the current stream has been given (queued or written).
        self.received_ms = 0
        # Stream ms at the end of each frame and its arrival time: maps VAD times to wall time.
        # Two deques of numbers, not one of tuples: no object per frame for the collector to walk.
        self._arrival_ends: deque[int] = deque(maxlen=3000)
        self._arrival_times: deque[float] = deque(maxlen=3000)
        self._task: asyncio.Task | None = None
        self._closed = False

    # ---- the call's side ----------------------------------------------------
    def would_drop(self) -> bool:
        """The next frame would be refused (``send`` gives False): too much is waiting."""
        return self.up and self.outbox.full

    def send(self, frame: bytes, now: float) -> bool:
        """Queue a frame; False when too much is waiting (the client sends faster than real time)."""
        STT_FRAMES.inc()
        if self._task is None:
            self.up = True  # the first stream opens now: its audio queues as usual
            self._task = asyncio.create_task(self._run())
        if not self.up:
            # No stream: keep a short tail for the next one, never an error per frame.
            self.outbox.put_audio(frame, now)
            self.outbox.keep_tail(self._replay_frames)
            return True
        if not self.outbox.put_audio(frame, now):
            return False
        self._stamp(len(frame), now)
        if not self._loud_square:
            return True
        if self._speech_hold():
            if self._quiet(mean_square(frame)):
                self.outbox.flush()
        elif self.outbox.holding and self._loud(mean_square(frame)):
            self.outbox.flush()
        return True

    def _loud(self, power: float) -> bool:
        """At least the hold's loudness, or 12 dB above the line's floor and above near-silence
        (RMS 10): a soft voice on a quiet line is an onset too, and its ``SpeechStarted`` must
        not wait up to a second of hold."""
        floor = self._floor.before(power)
        return power >= self._loud_square or power >= max(SOFT_ONSET_SQUARE, 16 * floor)

    def _quiet(self, power: float) -> bool:
        """Below the hold's loudness, or within 6 dB of the line's floor, this frame included
        (a noisy line's pause between words, and the silence after them, count as quiet)."""
        floor = min(self._floor.before(power), power)
        return power < max(self._loud_square, 4 * floor)

    def wake(self) -> None:
        """The call's state changed (an utterance, a reply): held audio goes now."""
        self.outbox.wake()

    def send_context(self, context: stt_pb2.UtteranceContext) -> None:
        if self.up:
            self.outbox.put_context(context)

    def arrival_of(self, stream_ms: int) -> float:
        """When the frame holding ``stream_ms`` of this stream reached the gateway (now, if none has).

        Searched from the newest frame: the end of an utterance is a few hundred ms back, and
        from the oldest it was a walk over up to a minute of frames per turn, visible in a
        loaded gateway's profile."""
        found = None
        for end_ms, arrived in zip(reversed(self._arrival_ends), reversed(self._arrival_times), strict=True):
            if end_ms < stream_ms:
                break
            found = arrived
        return found if found is not None else time.perf_counter()

    async def close(self, grace_s: float = 0.5) -> None:
        self._closed = True
        self.outbox.close()
        if self._task is None:
            return
        # Let the stream end cleanly first: a final for speech still in flight is not lost.
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(self._task), grace_s)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task

    # ---- the stream -------------------------------------------------------
    def _stamp(self, nbytes: int, arrived: float) -> None:
        self.received_ms += int(nbytes / self._bytes_per_ms)
        self._arrival_ends.append(self.received_ms)
        self._arrival_times.append(arrived)

    def _restart_timeline(self) -> None:
        """A new stream counts from zero: the kept tail is its first audio."""
        self.received_ms = 0
        self._arrival_ends.clear()
        self._arrival_times.clear()
        for frame, arrived in self.outbox.frames():
            self._stamp(len(frame), arrived)

    async def _requests(self) -> AsyncIterator[stt_pb2.RecognizeRequest]:
        yield stt_pb2.RecognizeRequest(config=self._config)
        while True:
            for item in await self.outbox.take(self._hold_bytes):
                if item is None:
                    return
                if isinstance(item, bytes):
                    STT_MESSAGES.inc()
                    yield stt_pb2.RecognizeRequest(audio=item)
                else:
                    yield stt_pb2.RecognizeRequest(utterance=item)

    def _hold_bytes(self) -> int:
        return int(self._hold_ms() * self._bytes_per_ms)

    async def _run(self) -> None:
        attempt = 0
        while not self._closed:
            self._restart_timeline()
            self.up = True
            opened = time.monotonic()
            healthy = False
            status, detail = grpc.StatusCode.OK, ""
            STT_STREAMS.inc()
            try:
                async for event in self._open(self._requests()):
                    healthy = True
                    await self._on_event(event)
            except grpc.aio.AioRpcError as exc:
                status, detail = exc.code(), exc.details() or ""
            finally:
                STT_STREAMS.dec()
                self.up = False
                self.outbox.keep_tail(self._replay_frames)
            await self._on_ended()
            if self._closed:
                return
            # A refusal is never service, however long STT took to say it (a loaded STT took
            # over 2 s at times: bench-load saw such callers told "overloaded" again and again).
            refused = status == grpc.StatusCode.RESOURCE_EXHAUSTED
            if healthy or (time.monotonic() - opened >= HEALTHY_AFTER_S and not refused):
                attempt, self.down = 0, False
            else:
                attempt += 1
            if status != grpc.StatusCode.OK:
                STT_FAILURES.labels(status.name).inc()
                log.warning("stt stream failed", extra={"code": status.name, "detail": detail,
                                                        "attempt": attempt})
                if not self.down:
                    self.down = True
                    await self._on_down(status, detail)
            await self._pause(self._backoff.delay(attempt) if attempt else 0.05, status)

    async def _pause(self, delay: float, status: grpc.StatusCode) -> None:
        """Wait before the next stream. STT unreachable (UNAVAILABLE): until the channel is
        connected again or the backoff delay, whichever comes first. The channel itself retries
        within about a second; a backoff grown to seconds during a restart would otherwise keep
        the link down after STT is back, and the caller's first words then are lost (found by
        tests/faults). A refusal (RESOURCE_EXHAUSTED) always waits out its backoff."""
        if status != grpc.StatusCode.UNAVAILABLE or self._reconnected is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._reconnected(), delay)
