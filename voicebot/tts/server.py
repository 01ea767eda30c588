"""gRPC TextToSpeech service.

A reader task feeds text deltas to the segmenter; each complete sentence is
queued at once, so synthesis starts while more text is still arriving. The
stream's language picks its voice (``voices.py``). A sentence is normalised
for the ear, split into phrases by that voice, and each phrase is
rendered as its own job in the shared ``DeadlinePool``; its audio leaves in
chunks of at most ``chunk_ms`` as soon as it exists, resampled (soxr,
streaming within the sentence) to the rate the caller asked for. A sentence
that fails is reported in an error event and the stream goes on with the next.

When the call ends (cancelled, deadline, client gone) its ``RenderStop`` is
set at once from gRPC's done callback: the queued phrase is dropped and the
one rendering is stopped mid-render (ONNX terminate, espeak-ng killed), so a cancelled reply
costs no more synthesis. The handler writes with ``context.write`` rather
than yielding: a cancel then always lands inside it and its cleanup runs at
once (a suspended generator would be closed only when garbage-collected).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import numpy as np
from opentelemetry.trace import SpanKind

from voicebot.common.audio import StreamResampler, float_to_pcm16
from voicebot.common.grpc_server import IdleCalls, serve_forever
from voicebot.common.logs import setup_logging
from voicebot.common.telemetry import ids, incoming_context, setup_tracing, shutdown_tracing, tracer
from voicebot.tts.config import TtsSettings
from voicebot.tts.engine import Leveller, RenderStop, RenderStopped, TtsEngine
from voicebot.tts.metrics import (
    ACTIVE_STREAMS,
    FIRST_AUDIO_SECONDS,
    PHRASES,
    RENDERS_STOPPED,
    SENTENCE_ERRORS,
    SYNTH_SECONDS,
)
from voicebot.tts.normalize import prepare
from voicebot.tts.pool import DeadlinePool
from voicebot.tts.segmenter import SentenceSegmenter, voiced
from voicebot.tts.voices import Voices, VoicesError, build_voices
from voicebot.v1 import tts_pb2, tts_pb2_grpc

log = logging.getLogger("tts")
TRACER = tracer("voicebot.tts")
_DONE = object()
OUTPUT_RATES = (8000, 16000, 22050, 24000, 44100, 48000)


@dataclass
class Stream:
    """One call's output so far: how far ahead of its listener it is decides its urgency."""

    rate: int
    language: str
    engine: TtsEngine  # the language's voice
    # The client asked for each sentence's start on its first audio chunk (tts.proto).
    sentence_with_first_audio: bool = False
    stop: RenderStop = field(default_factory=RenderStop)
    first_audio_at: float | None = None
    audio_s: float = 0.0
    sentences: int = 0

    def deadline(self) -> float:
        """When the listener runs out of audio (now, if nothing was produced yet)."""
        if self.first_audio_at is None:
            return time.perf_counter()
        return self.first_audio_at + self.audio_s


class TextToSpeechServicer(tts_pb2_grpc.TextToSpeechServicer):
    def __init__(self, settings: TtsSettings, voices: Voices | TtsEngine) -> None:
        self.settings = settings
        self.voices = voices if isinstance(voices, Voices) else Voices(voices)
        self.engine = self.voices.default
        self.pool = DeadlinePool(settings.workers)
        self.idle_calls = IdleCalls()  # streams still waiting for their config

    async def StreamingSynthesize(self, request_iterator, context: grpc.aio.ServicerContext):
        # The headers go now: a stream opened ahead of its turn (voicebot/gateway/standby.py) then gets
        # its first audio without them, one message fewer on the turn's path.
        await context.send_initial_metadata(())
        requests = aiter(request_iterator)
        first = await self.idle_calls.first(requests, context)
        if first is None:
            return
        if first.WhichOneof("request") != "config":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be config")
        language = (first.config.language or "en").lower()
        engine = self.voices.for_language(language)
        rate = first.config.sample_rate or engine.sample_rate
        if rate not in (*OUTPUT_RATES, engine.sample_rate):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"sample_rate {rate} is not supported; use one of {list(OUTPUT_RATES)}",
            )
        if first.config.voice and first.config.voice != "default":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"voice {first.config.voice!r} is not loaded; this server has 'default'",
            )
        stream = Stream(rate, language, engine, first.config.sentence_with_first_audio)
        context.add_done_callback(lambda _context: stream.stop.set())
        sentences: asyncio.Queue = asyncio.Queue()
        ACTIVE_STREAMS.inc()
        span = TRACER.start_span("tts.synthesize", context=incoming_context(context.invocation_metadata()),
                                 kind=SpanKind.SERVER,
                                 attributes={**ids(first.config.session_id, first.config.turn_id),
                                             "voicebot.tts.sample_rate": rate})
        started, spoken, first_audio = time.perf_counter(), 0, False
        reader = asyncio.create_task(self._read(requests, sentences))
        try:
            while (item := await sentences.get()) is not _DONE:
                if isinstance(item, str):
                    spoken += 1
                    async with contextlib.aclosing(self._speak(stream, item)) as events:
                        async for event in events:
                            if not first_audio and event.HasField("audio"):
                                first_audio = True
                                span.set_attribute("voicebot.tts.first_audio_ms",
                                                   round((time.perf_counter() - started) * 1000))
                            await context.write(event)
                else:
                    await context.write(item)
        finally:
            stream.stop.set()  # the call is over: nothing more is rendered for it
            span.set_attribute("voicebot.tts.sentences", spoken)
            span.end()
            # Also reached at once when the caller cancels: no phrase is submitted after this.
            ACTIVE_STREAMS.dec()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read(self, requests, sentences: asyncio.Queue) -> None:
        segmenter = SentenceSegmenter(self.settings.max_clause_chars, self.settings.first_clause_chars,
                                      self.settings.first_clause_words, self.settings.first_clause_min_words)
        total = 0
        try:
            async for request in requests:
                if request.WhichOneof("request") != "text":
                    continue
                total += len(request.text)
                if total > self.settings.max_text_chars:
                    await sentences.put(tts_pb2.SynthesizeEvent(error=tts_pb2.SynthesisError(
                        sentence_index=-1,
                        message=f"text over {self.settings.max_text_chars} characters ignored",
                    )))
                    break
                for sentence in segmenter.push(request.text):
                    await sentences.put(sentence)
            for sentence in segmenter.flush():
                await sentences.put(sentence)
        finally:
            await sentences.put(_DONE)

    async def _speak(self, stream: Stream, sentence: str) -> AsyncIterator[tts_pb2.SynthesizeEvent]:
        text = prepare(voiced(sentence), stream.language)
        if not text:
            return  # nothing speakable (stray markup): no sentence to report
        index, stream.sentences = stream.sentences, stream.sentences + 1
        # The sentence as written, so the gateway can tell which words were heard.
        started = tts_pb2.SentenceStarted(index=index, text=sentence)
        if not stream.sentence_with_first_audio:
            yield tts_pb2.SynthesizeEvent(sentence_started=started)
        ready_at = time.perf_counter()
        samples = 0
        try:
            async for audio in self._phrases(stream, text):
                if samples == 0:
                    FIRST_AUDIO_SECONDS.observe(time.perf_counter() - ready_at)
                first = samples == 0 and stream.sentence_with_first_audio
                samples += len(audio)
                for chunk in self._chunks(audio, stream.rate):
                    event = tts_pb2.SynthesizeEvent(audio=tts_pb2.AudioChunk(
                        pcm16=chunk, sample_rate=stream.rate, sentence_index=index))
                    if first:  # the sentence starts on its first chunk, as the client asked
                        event.audio.sentence.CopyFrom(started)
                        event.audio.sentence_started_ms_ago = (time.perf_counter() - ready_at) * 1000
                        first = False
                    yield event
        except RenderStopped:
            return  # the call ended: nobody to tell
        except Exception as exc:  # noqa: BLE001 - one bad sentence must not end the reply
            SENTENCE_ERRORS.inc()
            log.warning("sentence failed", extra={"index": index, "error": repr(exc)})
            yield tts_pb2.SynthesizeEvent(
                error=tts_pb2.SynthesisError(sentence_index=index, message="synthesis failed"))
            return
        yield tts_pb2.SynthesizeEvent(sentence_done=tts_pb2.SentenceDone(
            index=index, duration_ms=samples * 1000 // stream.rate))

    async def _phrases(self, stream: Stream, text: str) -> AsyncIterator[np.ndarray]:
        """The sentence's audio at the caller's rate, one phrase at a time as each is rendered."""
        urgent = stream.first_audio_at is None
        engine = stream.engine
        phrases = await self.pool.run(stream.deadline(), engine.split, text, urgent)
        level = Leveller()
        resampler = StreamResampler(engine.sample_rate, stream.rate)
        for number, phrase in enumerate(phrases):
            raw = await self.pool.run(stream.deadline(), self._render, engine, phrase, stream.stop)
            last = number == len(phrases) - 1
            audio = resampler.process(level(raw), last=last)
            if stream.first_audio_at is None:
                stream.first_audio_at = time.perf_counter()
            stream.audio_s += len(raw) / engine.sample_rate
            if len(audio):
                yield audio

    @staticmethod
    def _render(engine: TtsEngine, phrase, stop: RenderStop) -> np.ndarray:
        started = time.perf_counter()
        try:
            audio = engine.render(phrase, stop)
        except RenderStopped:
            RENDERS_STOPPED.inc()
            raise
        SYNTH_SECONDS.observe(time.perf_counter() - started)
        PHRASES.inc()
        return audio

    def _chunks(self, audio: np.ndarray, rate: int):
        step = max(1, rate * self.settings.chunk_ms // 1000)
        for start in range(0, len(audio), step):
            yield float_to_pcm16(audio[start:start + step])

    def shutdown(self) -> None:
        self.pool.shutdown()


def main() -> None:
    settings = TtsSettings()
    setup_logging("tts", settings.log_level, settings.log_json)
    setup_tracing("tts")
    try:
        voices = build_voices(settings)
    except VoicesError as exc:  # the setting and what is wrong with it, no traceback
        log.error("tts cannot start: %s", exc)
        raise SystemExit(f"tts cannot start: {exc}") from None
    servicer = TextToSpeechServicer(settings, voices)
    for engine in voices.engines():
        list(engine.synthesize("Ready, one two three."))  # warm the model

    def register(server: grpc.aio.Server) -> list[str]:
        tts_pb2_grpc.add_TextToSpeechServicer_to_server(servicer, server)
        return [tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"].full_name]

    async def on_stop() -> None:
        servicer.shutdown()
        shutdown_tracing()

    asyncio.run(serve_forever("tts", settings, register, on_stop, servicer.idle_calls))


if __name__ == "__main__":
    main()
