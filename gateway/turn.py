"""One turn through the brain and TTS, streamed to the client.

The brain's text deltas go to the client and into the TTS stream as they
arrive; TTS audio goes into the turn's ``Playout`` as it arrives and from
there to the client at real-time pace. Both upstream calls are cancelled
together when the turn is interrupted, and ``SpokenTracker`` knows which
part of the reply the person can have heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from gateway.metrics import STAGE_SECONDS
from voicebot.common.telemetry import outgoing_metadata
from voicebot.v1 import brain_pb2, tts_pb2

if TYPE_CHECKING:
    from gateway.playout import Playout

log = logging.getLogger("gateway.turn")


@dataclass
class TurnTimings:
    """perf_counter() marks; stages are measured from the end of the person's speech."""

    speech_end: float | None = None
    end_of_utterance: float | None = None
    final_transcript: float | None = None
    brain_request: float | None = None
    first_delta: float | None = None
    first_tts_text: float | None = None
    first_sentence_ready: float | None = None
    first_audio: float | None = None

    def stages_ms(self) -> dict[str, int | None]:
        def span(a: float | None, b: float | None) -> int | None:
            return None if a is None or b is None else max(0, round((b - a) * 1000))

        return {
            "endpoint": span(self.speech_end, self.end_of_utterance),
            "stt": span(self.end_of_utterance, self.final_transcript),
            "llm_ttft": span(self.brain_request, self.first_delta),
            # From the first complete sentence reaching TTS to its first audio: the
            # time spent waiting for the LLM to finish that sentence is not TTS's.
            "tts_ttfa": span(self.first_sentence_ready or self.first_tts_text, self.first_audio),
            "voice_to_voice": span(self.speech_end or self.brain_request, self.first_audio),
        }

    def observe(self, trace_id: str | None = None) -> dict[str, int | None]:
        """Record the stage histograms; the trace id rides along as an exemplar, so a slow
        bucket links to its trace (shown in the OpenMetrics exposition)."""
        stages = self.stages_ms()
        exemplar = {"trace_id": trace_id} if trace_id else None
        for stage, ms in stages.items():
            if ms is not None:
                STAGE_SECONDS.labels(stage).observe(ms / 1000, exemplar=exemplar)
        return stages


@dataclass
class SpokenTracker:
    """Which part of a reply the person can have heard.

    Sentences sit on the reply's audio timeline as TTS delivers them
    (``audio_received``); the audio leaves for the client later, paced
    (``audio_sent``); the client plays it in real time, so ``play_end`` is when
    it will have played everything sent so far. Heard is the client's own
    report when there is one, else what was sent less what is still
    buffered at the client. The same model paces the sending (gateway/playout.py),
    so the estimate and the pacing cannot disagree.
    """

    sample_rate: int
    # [text, start_ms, end_ms] on the audio timeline.
    sentences: list[list] = field(default_factory=list)
    received_ms: float = 0.0
    sent_ms: float = 0.0
    play_end: float | None = None

    def _ms(self, nbytes: int) -> float:
        return nbytes * 1000 / (2 * self.sample_rate)

    def sentence_started(self, text: str) -> None:
        self.sentences.append([text, self.received_ms, self.received_ms])

    def audio_received(self, nbytes: int) -> None:
        self.received_ms += self._ms(nbytes)
        if self.sentences:
            self.sentences[-1][2] = self.received_ms

    def sentence_failed(self) -> None:
        """TTS could not speak the current sentence: without audio, nobody heard it."""
        if self.sentences and self.sentences[-1][1] == self.sentences[-1][2]:
            self.sentences.pop()

    def audio_sent(self, nbytes: int, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        self.sent_ms += self._ms(nbytes)
        # A client that ran dry starts again from now, not from where it stopped.
        self.play_end = max(self.play_end or now, now) + self._ms(nbytes) / 1000

    def buffered_ms(self, now: float | None = None) -> float:
        """Audio sent but not yet played at the client (estimate)."""
        if self.play_end is None:
            return 0.0
        now = time.perf_counter() if now is None else now
        return max(0.0, (self.play_end - now) * 1000)

    def playing(self, now: float | None = None) -> bool:
        return self.buffered_ms(now) > 0

    def heard_ms(self, played_ms: float | None = None, now: float | None = None) -> float:
        """What the client played: its own report, else what it was sent less its buffer."""
        if played_ms is not None:
            return max(0.0, min(played_ms, self.sent_ms))
        return max(0.0, self.sent_ms - self.buffered_ms(now))

    def spoken_text(self, played_ms: float | None = None, now: float | None = None) -> str:
        heard = self.heard_ms(played_ms, now)
        words: list[str] = []
        for text, start, end in self.sentences:
            if heard >= end:
                words += text.split()
            elif heard > start:
                # Part of a sentence: keep the share of words its audio covered.
                share = (heard - start) / max(1.0, end - start)
                sentence_words = text.split()
                words += sentence_words[: int(len(sentence_words) * share)]
                break
            else:
                break
        return " ".join(words)


@dataclass
class TurnRequest:
    session_id: str
    user_id: str
    turn_id: str
    text: str
    language: str
    output_rate: int
    previous_reply: brain_pb2.SpokenPart | None = None


class TurnOutput(Protocol):
    """Where a turn's events go (the WebSocket, through the Call)."""

    async def event(self, kind: str, **fields: Any) -> None:
        """A text event of the turn (reply.delta, reply.done)."""

    async def audio(self, frame: bytes) -> bool:
        """One audio frame; False when it was held back (the playout is paused)."""

    async def audio_event(self, kind: str) -> None:
        """audio.start / audio.end: dropped once the turn is interrupted."""


class TurnRunner:
    def __init__(self, upstreams, output: TurnOutput, timeout_s: float) -> None:
        self.upstreams = upstreams
        self.output = output
        self.timeout_s = timeout_s

    async def run(self, req: TurnRequest, timings: TurnTimings, spoken: SpokenTracker,
                  playout: Playout) -> str:
        """Run the turn to completion; returns the reply text. Raises grpc errors as they are.

        Three tasks: brain deltas go to the client and into the TTS stream as they
        arrive; TTS audio goes into the playout as it arrives; the playout sends it
        at real-time pace. A failure or a cancel of any ends all three.
        """
        timings.brain_request = time.perf_counter()
        brain_call = self.upstreams.brain.Respond(
            brain_pb2.RespondRequest(
                session_id=req.session_id, turn_id=req.turn_id, user_id=req.user_id,
                text=req.text, language=req.language, previous_reply=req.previous_reply,
            ),
            timeout=self.timeout_s,
            metadata=outgoing_metadata(),  # the turn's trace continues in the brain
        )
        texts: asyncio.Queue[str | None] = asyncio.Queue()

        async def tts_requests():
            yield tts_pb2.SynthesizeRequest(config=tts_pb2.SynthesisConfig(
                session_id=req.session_id, turn_id=req.turn_id,
                sample_rate=req.output_rate, language=req.language,
            ))
            while (text := await texts.get()) is not None:
                if timings.first_tts_text is None:
                    timings.first_tts_text = time.perf_counter()
                yield tts_pb2.SynthesizeRequest(text=text)

        tts_call = self.upstreams.tts.StreamingSynthesize(tts_requests(), timeout=self.timeout_s,
                                                          metadata=outgoing_metadata())
        reply: list[str] = []
        try:
            await run_together(
                self._pump_brain(brain_call, req.turn_id, texts, timings, reply),
                self._pump_tts(tts_call, req.turn_id, timings, spoken, playout),
                self._play(playout),
            )
        finally:
            # Interrupted or failed: neither upstream keeps working for nothing.
            brain_call.cancel()
            tts_call.cancel()
        return "".join(reply)

    async def _pump_brain(self, call, turn_id: str, texts: asyncio.Queue, timings: TurnTimings,
                          reply: list[str]) -> None:
        final_text = None
        try:
            async for event in call:
                kind = event.WhichOneof("event")
                if kind == "delta":
                    text = event.delta.text
                elif kind == "blocked":
                    text = event.blocked.text
                elif kind == "final":
                    final_text = event.final.text
                    continue
                else:
                    continue  # tool activity and handoff are not spoken
                if timings.first_delta is None:
                    timings.first_delta = time.perf_counter()
                reply.append(text)
                await texts.put(text)
                await self.output.event("reply.delta", turn_id=turn_id, text=text)
        finally:
            await texts.put(None)
        await self.output.event("reply.done", turn_id=turn_id,
                                text=final_text if final_text is not None else "".join(reply).strip())

    async def _pump_tts(self, call, turn_id: str, timings: TurnTimings, spoken: SpokenTracker,
                        playout: Playout) -> None:
        try:
            async for event in call:
                kind = event.WhichOneof("event")
                if kind == "sentence_started":
                    if timings.first_sentence_ready is None:
                        timings.first_sentence_ready = time.perf_counter()
                    spoken.sentence_started(event.sentence_started.text)
                elif kind == "audio":
                    if timings.first_audio is None:
                        timings.first_audio = time.perf_counter()
                    spoken.audio_received(len(event.audio.pcm16))
                    playout.feed(event.audio.pcm16)
                elif kind == "error":
                    spoken.sentence_failed()
                    log.warning("tts sentence failed", extra={"turn_id": turn_id,
                                                              "detail": event.error.message})
        finally:
            playout.end()

    async def _play(self, playout: Playout) -> None:
        started = False

        async def send(frame: bytes) -> bool:
            nonlocal started
            if not started:
                await self.output.audio_event("audio.start")
                started = True
            return await self.output.audio(frame)

        await playout.run(send)
        if started and not playout.stopped:
            await self.output.audio_event("audio.end")


async def run_together(*coroutines: Awaitable[Any]) -> None:
    """Await all; the first failure (or a cancel) cancels the rest, then propagates."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def cancel_task(task: asyncio.Task | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await task
