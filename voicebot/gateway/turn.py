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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import grpc

from voicebot.common.telemetry import outgoing_metadata
from voicebot.gateway.events import Event, ReplyDelta, ReplyDone
from voicebot.gateway.metrics import STAGE_SECONDS
from voicebot.gateway.phrases import MAX_CHARS, PhraseCoalescer
from voicebot.gateway.playout import Playout
from voicebot.gateway.spoken import SpokenTracker
from voicebot.gateway.standby import StandbyCalls
from voicebot.v1 import brain_pb2, tts_pb2

log = logging.getLogger("voicebot.gateway.turn")


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
    # The brain's call ended whole: the brain returns only after the turn's writes, so nothing
    # of this turn can still change the session (call.py reads the next session ahead then).
    brain_done: float | None = None

    def stages_ms(self) -> dict[str, int | None]:
        def span(a: float | None, b: float | None) -> int | None:
            return None if a is None or b is None else max(0, round((b - a) * 1000))

        return {
            "endpoint": span(self.speech_end, self.end_of_utterance),
            "stt": span(self.end_of_utterance, self.final_transcript),
            "llm_ttft": span(self.brain_request, self.first_delta),
            # From the first text to TTS starting its first piece: the tokens the model writes
            # before the first clause TTS may speak is complete (TTS_FIRST_CLAUSE_*).
            "first_clause": span(self.first_delta, self.first_sentence_ready),
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
class TurnRequest:
    session_id: str
    user_id: str
    turn_id: str
    text: str
    language: str
    output_rate: int
    previous_reply: brain_pb2.SpokenPart | None = None
    context: dict[str, str] | None = None  # the call's metadata (a phone bridge's parameters)


class TurnOutput(Protocol):
    """Where a turn's events go (the conversation's outlet, ``active_turn.TurnChannel``)."""

    async def event(self, event: Event) -> None:
        """A text event of the turn (ReplyDelta, ReplyDone)."""

    async def audio(self, frame: bytes, start: bool = False) -> bool:
        """One audio frame, led by ``audio.start`` when ``start`` (the two sent together); False
        when it was held back (the playout is paused): then neither went out."""

    async def audio_end(self) -> None:
        """AudioEnd: dropped once the turn is interrupted."""


class TurnFailed(Exception):
    """An upstream failed mid-turn: ``stage`` is "brain" or "tts"."""

    def __init__(self, stage: str, error: grpc.aio.AioRpcError) -> None:
        super().__init__(f"{stage}: {error.code().name} {error.details()}")
        self.stage, self.code, self.details = stage, error.code(), error.details() or ""


class TurnRunner:
    def __init__(self, upstreams, output: TurnOutput, timeout_s: float, phrase_chars: int = MAX_CHARS,
                 first_words: int = 0) -> None:
        self.upstreams = upstreams
        self.output = output
        self.timeout_s = timeout_s
        self.phrase_chars = phrase_chars
        self.first_words = first_words
        self.dialog_state = ""  # the brain's, from the turn's final

    async def run(self, req: TurnRequest, timings: TurnTimings, spoken: SpokenTracker,
                  playout: Playout, brain_call=None, standby: StandbyCalls | None = None,
                  speak: bool = True) -> str:
        """Run the turn to completion; returns the reply text. Raises TurnFailed.

        Three tasks: brain deltas go to the client and into the TTS stream as they
        arrive (joined into phrases); TTS audio goes into the playout as it arrives; the
        playout sends it at real-time pace. A failure or a cancel of any ends all three;
        after a failure the playout is neither ended nor stopped (no ``audio.end``): the
        caller says what failed and then speaks a fallback on the same turn. ``speak``
        False (a session that asked for text only): the brain's text alone, no TTS call.
        """
        # ``brain_call``: one ``start_brain`` made, or a reply already started before the endpoint
        # and now committed (voicebot/gateway/preemptive.py); its first words may be waiting in it already.
        if brain_call is None:
            brain_call = self.start_brain(req, timings)
        elif timings.brain_request is None:
            timings.brain_request = time.perf_counter()
        texts: asyncio.Queue[str | None] = asyncio.Queue()
        if not speak:
            return await self._text_only(brain_call, req.turn_id, texts, timings, standby)

        async def tts_requests():
            yield tts_pb2.SynthesizeRequest(config=tts_pb2.SynthesisConfig(
                session_id=req.session_id, turn_id=req.turn_id,
                sample_rate=req.output_rate, language=req.language,
                # Each sentence starts on its first chunk, not in a message of its own before it:
                # a gRPC stream's second message waits for the first. A TTS that does not know
                # the field sends SentenceStarted apart, which reads the same.
                sentence_with_first_audio=True,
            ))
            while (text := await texts.get()) is not None:
                if timings.first_tts_text is None:
                    timings.first_tts_text = time.perf_counter()
                yield tts_pb2.SynthesizeRequest(text=text)

        if standby is not None:  # the stream opened while the caller spoke (standby.py)
            tts_call = standby.start_tts(tts_requests())
        else:
            tts_call = self.upstreams.tts.StreamingSynthesize(tts_requests(), timeout=self.timeout_s,
                                                              metadata=outgoing_metadata())
        reply: list[str] = []
        # Calls opened ahead of the turn have deadlines later than the turn's own (standby.py).
        bound_s = self.timeout_s if standby is not None else None
        try:
            await run_together(
                _stage("brain", partial(self._pump_brain, brain_call, req.turn_id, texts, timings, reply),
                       bound_s),
                _stage("tts", partial(self._pump_tts, tts_call, req.turn_id, timings, spoken, playout),
                       bound_s),
                self._play(playout),
            )
        finally:
            # Interrupted or failed: neither upstream keeps working for nothing.
            brain_call.cancel()
            tts_call.cancel()
        return "".join(reply)

    async def _text_only(self, brain_call, turn_id: str, texts: asyncio.Queue, timings: TurnTimings,
                         standby: StandbyCalls | None) -> str:
        reply: list[str] = []
        bound_s = self.timeout_s if standby is not None else None
        try:
            await _stage("brain", partial(self._pump_brain, brain_call, turn_id, texts, timings, reply),
                         bound_s)
        finally:
            brain_call.cancel()
        return "".join(reply)

    def start_brain(self, req: TurnRequest, timings: TurnTimings, standby: StandbyCalls | None = None):
        """The brain's call for the turn, sent now (``run`` takes it); cancel it if ``run`` never
        does. With ``standby``, the request goes down its open Converse call, committed at once."""
        timings.brain_request = time.perf_counter()
        request = brain_pb2.RespondRequest(
            session_id=req.session_id, turn_id=req.turn_id, user_id=req.user_id,
            text=req.text, language=req.language, previous_reply=req.previous_reply,
            session_context=req.context or {},
        )
        if standby is not None:
            return standby.start_brain(request)
        return self.upstreams.brain.Respond(
            request,
            timeout=self.timeout_s,
            metadata=outgoing_metadata(),  # the turn's trace continues in the brain
        )

    async def _pump_brain(self, call, turn_id: str, texts: asyncio.Queue, timings: TurnTimings,
                          reply: list[str]) -> None:
        final_text = None
        phrases = PhraseCoalescer(self.phrase_chars, self.first_words)

        async def send(text: str | None) -> None:
            if text:
                reply.append(text)
                texts.put_nowait(text)
                await asyncio.sleep(0)  # TTS's request goes out first: the client's text can wait
                await self.output.event(ReplyDelta(turn_id, text))

        try:
            async for event in _whole_reply(call, turn_id):
                kind = event.WhichOneof("event")
                if kind == "delta":
                    if timings.first_delta is None:
                        timings.first_delta = time.perf_counter()
                    await send(phrases.push(event.delta.text))
                    continue
                await send(phrases.flush())  # anything else: what is held goes first
                if kind == "blocked":
                    if timings.first_delta is None:
                        timings.first_delta = time.perf_counter()
                    await send(event.blocked.text)
                elif kind == "final":
                    final_text, self.dialog_state = event.final.text, event.final.dialog_state
                # tool activity and handoff are not spoken
            timings.brain_done = time.perf_counter()
            await send(phrases.flush())
        finally:
            await texts.put(None)
        await self.output.event(ReplyDone(turn_id, final_text if final_text is not None
                                          else "".join(reply).strip()))

    async def _pump_tts(self, call, turn_id: str, timings: TurnTimings, spoken: SpokenTracker,
                        playout: Playout) -> None:
        async for event in call:
            kind = event.WhichOneof("event")
            if kind == "sentence_started":
                if timings.first_sentence_ready is None:
                    timings.first_sentence_ready = time.perf_counter()
                spoken.sentence_started(event.sentence_started.text)
            elif kind == "audio":
                if timings.first_audio is None:
                    timings.first_audio = time.perf_counter()
                if event.audio.HasField("sentence"):  # a sentence started on its first chunk
                    if timings.first_sentence_ready is None:
                        timings.first_sentence_ready = (timings.first_audio
                                                        - event.audio.sentence_started_ms_ago / 1000)
                    spoken.sentence_started(event.audio.sentence.text)
                spoken.audio_received(len(event.audio.pcm16))
                playout.feed(event.audio.pcm16)
            elif kind == "sentence_done":
                spoken.sentence_done()
            elif kind == "error":
                spoken.sentence_failed()
                log.warning("tts sentence failed", extra={"turn_id": turn_id,
                                                          "detail": event.error.message})
        playout.end()  # not after a failure: no `audio.end` may precede its error

    async def speak(self, pcm: bytes, playout: Playout) -> None:
        """Play prepared audio (a fallback sentence) through a fresh playout, then ``audio.end``."""
        playout.feed(pcm)
        playout.end()
        await self._play(playout)

    async def _play(self, playout: Playout) -> None:
        started = False

        async def send(frame: bytes) -> bool:
            nonlocal started
            sent = await self.output.audio(frame, start=not started)
            started = started or sent
            return sent

        await playout.run(send)
        if started and not playout.stopped:
            await self.output.audio_end()


async def _whole_reply(call, turn_id: str) -> AsyncIterator[brain_pb2.RespondEvent]:
    """The brain call's events. An error after the turn's final is logged, not raised: the brain
    sends its final after the turn is stored, so the reply is whole. A brain that ends the call
    under this side's last write (as the brain did before it waited for the half-close, still
    possible mid-upgrade) makes grpc.aio report INTERNAL there in place of OK (grpc/grpc#36066)."""
    final_seen = False
    try:
        async for event in call:
            final_seen = final_seen or event.WhichOneof("event") == "final"
            yield event
    except grpc.aio.AioRpcError as exc:
        if not final_seen:
            raise
        log.warning("brain call ended with an error after the turn's final",
                    extra={"turn_id": turn_id, "code": exc.code().name, "detail": exc.details()})


async def run_together(*coroutines: Awaitable[Any]) -> None:
    """Await all; the first failure (or a cancel) cancels the rest, then propagates."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _stage(name: str, work: Callable[[], Awaitable[None]], bound_s: float | None = None) -> None:
    """Name the upstream behind a gRPC failure, so the caller can say what failed. ``bound_s``:
    the turn's own time limit on a call whose deadline is later; past it the stage fails as
    that call's deadline would. ``work`` is made here, not by the caller: a turn cancelled
    before its stages start leaves no coroutine never awaited."""
    try:
        if bound_s is None:
            await work()
            return
        try:
            async with asyncio.timeout(bound_s):
                await work()
        except TimeoutError:
            expired = grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, details="Deadline Exceeded")
            raise expired from None
    except grpc.aio.AioRpcError as exc:
        raise TurnFailed(name, exc) from exc


async def cancel_task(task: asyncio.Task | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await task
