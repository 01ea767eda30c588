"""One turn through the brain and TTS, streamed to the client.

The brain's text deltas go to the client and into the TTS stream as they
arrive; TTS audio goes to the client as it arrives. Both upstream calls are
cancelled together when the turn is interrupted, and ``SpokenTracker`` knows
which part of the reply the person can have heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from gateway.metrics import STAGE_SECONDS
from voicebot.v1 import brain_pb2, tts_pb2

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

    def observe(self) -> dict[str, int | None]:
        stages = self.stages_ms()
        for stage, ms in stages.items():
            if ms is not None:
                STAGE_SECONDS.labels(stage).observe(ms / 1000)
        return stages


@dataclass
class SpokenTracker:
    """Sentences and how much of their audio went out, to tell what was heard."""

    sample_rate: int
    sentences: list[tuple[str, int, int]] = field(default_factory=list)  # text, start_ms, end_ms
    sent_ms: int = 0
    audio_started_at: float | None = None

    def sentence_started(self, text: str) -> None:
        self.sentences.append((text, self.sent_ms, self.sent_ms))

    def audio_sent(self, nbytes: int) -> None:
        if self.audio_started_at is None:
            self.audio_started_at = time.perf_counter()
        self.sent_ms += nbytes * 1000 // (2 * self.sample_rate)
        if self.sentences:
            text, start, _ = self.sentences[-1]
            self.sentences[-1] = (text, start, self.sent_ms)

    def heard_ms(self, played_ms: int | None) -> int:
        """What the client played: its own report, else real time since audio began."""
        if played_ms is not None:
            return min(played_ms, self.sent_ms)
        if self.audio_started_at is None:
            return 0
        elapsed = int((time.perf_counter() - self.audio_started_at) * 1000)
        return min(elapsed, self.sent_ms)

    def spoken_text(self, played_ms: int | None) -> str:
        heard = self.heard_ms(played_ms)
        words: list[str] = []
        for text, start, end in self.sentences:
            if heard >= end:
                words += text.split()
            elif heard > start:
                # Part of a sentence: keep the share of words its audio covered.
                share = (heard - start) / max(1, end - start)
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


SendJson = Callable[..., Awaitable[None]]
SendBytes = Callable[[bytes], Awaitable[None]]


class TurnRunner:
    def __init__(self, upstreams, send_event: SendJson, send_bytes: SendBytes, timeout_s: float) -> None:
        self.upstreams = upstreams
        self.send_event = send_event
        self.send_bytes = send_bytes
        self.timeout_s = timeout_s

    async def run(self, req: TurnRequest, timings: TurnTimings, spoken: SpokenTracker) -> str:
        """Run the turn to completion; returns the reply text. Raises grpc errors as they are."""
        timings.brain_request = time.perf_counter()
        brain_call = self.upstreams.brain.Respond(
            brain_pb2.RespondRequest(
                session_id=req.session_id, turn_id=req.turn_id, user_id=req.user_id,
                text=req.text, language=req.language, previous_reply=req.previous_reply,
            ),
            timeout=self.timeout_s,
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

        tts_call = self.upstreams.tts.StreamingSynthesize(tts_requests(), timeout=self.timeout_s)
        reply: list[str] = []
        try:
            await asyncio.gather(
                self._pump_brain(brain_call, req.turn_id, texts, timings, reply),
                self._pump_tts(tts_call, req.turn_id, timings, spoken),
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
                    continue
                if timings.first_delta is None:
                    timings.first_delta = time.perf_counter()
                reply.append(text)
                await texts.put(text)
                await self.send_event("reply.delta", turn_id=turn_id, text=text)
        finally:
            await texts.put(None)
        await self.send_event("reply.done", turn_id=turn_id,
                              text=final_text if final_text is not None else "".join(reply).strip())

    async def _pump_tts(self, call, turn_id: str, timings: TurnTimings, spoken: SpokenTracker) -> None:
        started = False
        async for event in call:
            kind = event.WhichOneof("event")
            if kind == "sentence_started":
                if timings.first_sentence_ready is None:
                    timings.first_sentence_ready = time.perf_counter()
                spoken.sentence_started(event.sentence_started.text)
            elif kind == "audio":
                if not started:
                    started = True
                    timings.first_audio = time.perf_counter()
                    await self.send_event("audio.start", turn_id=turn_id)
                await self.send_bytes(event.audio.pcm16)
                spoken.audio_sent(len(event.audio.pcm16))
            elif kind == "error":
                log.warning("tts sentence failed", extra={"turn_id": turn_id,
                                                          "detail": event.error.message})
        if started:
            await self.send_event("audio.end", turn_id=turn_id)


async def cancel_task(task: asyncio.Task | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await task
