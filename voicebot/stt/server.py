"""gRPC SpeechToText service.

Each call gets a ``RecognitionStream`` (VAD, partials, finals; see stream.py)
and a reader task that feeds it the call's audio. All calls share one model
and one bounded ``DecodePool``. Every queue on the way is bounded, so a
client that sends faster than we can decode is slowed by gRPC flow control
instead of growing memory, and a client that reads slowly stalls only itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

import grpc
from opentelemetry.trace import SpanKind

from voicebot.common.audio import SUPPORTED_INPUT_RATES
from voicebot.common.grpc_server import serve_forever
from voicebot.common.logs import setup_logging
from voicebot.common.telemetry import ids, incoming_context, setup_tracing, shutdown_tracing, tracer
from voicebot.stt.config import SttSettings
from voicebot.stt.endpointer import EndpointConfig
from voicebot.stt.engine import FasterWhisperEngine, SttEngine
from voicebot.stt.metrics import ACTIVE_STREAMS
from voicebot.stt.models import resolve_whisper_model, silero_vad_path
from voicebot.stt.recognizer import DecodePool, StreamRecognizer
from voicebot.stt.stream import RecognitionStream, StreamOptions
from voicebot.stt.turn_model import TurnModelError, TurnScorer, Verdict, load_turn_scorer
from voicebot.stt.vad import FRAME_MS, SileroVad
from voicebot.v1 import stt_pb2, stt_pb2_grpc

log = logging.getLogger("stt")
TRACER = tracer("voicebot.stt")


class InvalidConfig(ValueError):
    pass


class SpeechToTextServicer(stt_pb2_grpc.SpeechToTextServicer):
    def __init__(self, settings: SttSettings, engine: SttEngine, vad: SileroVad,
                 turn: TurnScorer | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self.vad = vad
        self.turn = turn  # None: the fixed silence timer for every stream
        self.pool = DecodePool(engine, settings.workers)
        self.active_streams = 0

    def _validate(self, config: stt_pb2.RecognitionConfig) -> tuple[int, StreamOptions, EndpointConfig]:
        if config.encoding not in ("", "pcm16"):
            raise InvalidConfig(f"encoding {config.encoding!r} is not supported; use 'pcm16'")
        rate = config.sample_rate or 16000
        if rate not in SUPPORTED_INPUT_RATES:
            raise InvalidConfig(
                f"sample_rate {rate} is not supported; use one of {list(SUPPORTED_INPUT_RATES)}"
            )
        language = (config.language or self.settings.default_language).lower().split("-")[0]
        if not self.engine.supports_language(language):
            raise InvalidConfig(
                f"language {language!r} is not supported by the loaded model"
                + ("" if self.engine.capabilities.multilingual else " (English-only; set STT_MODEL=base)")
            )
        silence_ms = config.endpoint_silence_ms or self.settings.min_silence_ms
        if not 64 <= silence_ms <= 5000:
            raise InvalidConfig("endpoint_silence_ms must be between 64 and 5000")
        s = self.settings
        # A client that names its own endpoint silence gets that fixed timer.
        own_timer = (self.turn is None and s.turn_model != "text") or config.endpoint_silence_ms
        threshold = None if own_timer else s.turn_threshold_for(language)
        endpoint = EndpointConfig(
            threshold=s.vad_threshold,
            neg_threshold=s.vad_neg_threshold,
            min_speech_frames=max(1, s.min_speech_ms // FRAME_MS),
            min_silence_frames=max(1, silence_ms // FRAME_MS),
            max_frames=max(2, int(s.max_utterance_s * 1000) // FRAME_MS),
            pause_frames=0 if threshold is None else max(1, s.turn_pause_ms // FRAME_MS),
            max_silence_frames=max(1, s.turn_max_silence_ms // FRAME_MS),
            min_turn_speech_frames=s.turn_min_speech_ms // FRAME_MS,
            words_done_silence_frames=s.turn_words_done_silence_ms // FRAME_MS,
        )
        options = StreamOptions(
            language=language,
            session_id=config.session_id,
            interim_results=config.interim_results,
            speculative_results=config.speculative_results,
            final_with_end_of_utterance=config.final_with_end_of_utterance,
            partial_interval_frames=max(1, s.partial_interval_ms // FRAME_MS),
            speculative_silence_frames=max(1, s.speculative_silence_ms // FRAME_MS),
            turn_threshold=threshold,
            turn_text=s.turn_text or s.turn_model == "text",
            turn_tail_frames=s.turn_model_tail_ms // FRAME_MS,
        )
        return rate, options, endpoint

    async def StreamingRecognize(self, request_iterator, context: grpc.aio.ServicerContext):
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None:
            return
        if first.WhichOneof("request") != "config":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be config")
        try:
            rate, options, endpoint = self._validate(first.config)
        except InvalidConfig as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if self.active_streams >= self.settings.max_streams:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"this replica already serves {self.settings.max_streams} streams")
        recognizer = StreamRecognizer(self.vad.new_stream(), endpoint, rate, self.settings.pre_roll_ms)
        stream = RecognitionStream(recognizer, self.pool, options, self.turn)
        self.active_streams += 1
        ACTIVE_STREAMS.inc()
        spans = UtteranceSpans(incoming_context(context.invocation_metadata()), options, stream.verdicts)
        reader = asyncio.create_task(self._read(requests, stream, spans))
        try:
            async for event in stream.events():
                spans.observe(event)
                yield event
        except InvalidConfig as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            self.active_streams -= 1
            ACTIVE_STREAMS.dec()
            reader.cancel()
            await stream.close()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read(self, requests, stream: RecognitionStream, spans: UtteranceSpans) -> None:
        try:
            async for request in requests:
                kind = request.WhichOneof("request")
                if kind == "utterance":
                    spans.link(request.utterance)
                    continue
                if kind != "audio":
                    raise InvalidConfig("only audio (or utterance context) may follow the config message")
                if len(request.audio) > self.settings.max_chunk_bytes:
                    raise InvalidConfig(
                        f"audio message of {len(request.audio)} bytes exceeds "
                        f"{self.settings.max_chunk_bytes}"
                    )
                await stream.feed(request.audio)
            await stream.finish()
        except asyncio.CancelledError:
            raise
        except InvalidConfig as exc:
            stream.fail(exc)
        except Exception as exc:
            log.exception("stt reader failed")
            stream.fail(exc)


class UtteranceSpans:
    """One ``stt.recognize`` span per utterance, from speech onset to its final transcript.

    The gateway opens a turn when speech starts and sends that turn's trace context
    in-band (``UtteranceContext``); the span joins the turn's trace. Without it, the
    span hangs off the stream's own context (from the call's metadata).
    """

    def __init__(self, stream_context, options: StreamOptions, verdicts: dict[int, Verdict]) -> None:
        self._stream_context = stream_context
        self._options = options
        self._turns: dict[int, tuple[str, object]] = {}
        self._onsets: dict[int, int] = {}
        self._endpoints: dict[int, str] = {}
        self._verdicts = verdicts  # the end-of-turn model's latest per utterance (the stream's)

    def link(self, utterance: stt_pb2.UtteranceContext) -> None:
        parent = incoming_context([("traceparent", utterance.traceparent)])
        self._turns[utterance.utterance_index] = (utterance.turn_id, parent)

    def observe(self, event: stt_pb2.RecognizeEvent) -> None:
        kind = event.WhichOneof("event")
        index = event.utterance_index
        if kind == "speech_started":
            self._onsets[index] = time.time_ns()
        elif kind == "end_of_utterance":
            self._endpoints[index] = event.end_of_utterance.reason
            if event.end_of_utterance.HasField("final"):
                self._final(index, event.end_of_utterance.final)
        elif kind == "transcript" and event.transcript.is_final:
            self._final(index, event.transcript)

    def _final(self, index: int, transcript: stt_pb2.Transcript) -> None:
        turn_id, parent = self._turns.pop(index, ("", self._stream_context))
        started = self._onsets.pop(index, time.time_ns())
        attributes = {**ids(self._options.session_id, turn_id), "voicebot.stt.utterance_index": index,
                      "voicebot.stt.language": self._options.language,
                      "voicebot.stt.audio_ms": transcript.end_ms - transcript.start_ms,
                      "voicebot.stt.endpoint": self._endpoints.pop(index, "")}
        verdict = self._verdicts.pop(index, None)
        if verdict is not None:  # the model's last say on this utterance
            attributes["voicebot.stt.turn_model_ms"] = round(verdict.seconds * 1000, 1)
            attributes["voicebot.stt.turn_probability"] = round(verdict.probability, 3)
        span = TRACER.start_span("stt.recognize", context=parent, kind=SpanKind.SERVER,
                                 start_time=started, attributes=attributes)
        span.end()


def build_servicer(settings: SttSettings) -> SpeechToTextServicer:
    # First: a missing or corrupt end-of-turn model fails the start before Whisper loads.
    turn = load_turn_scorer(settings.turn_model, settings.turn_model_path, settings.turn_model_sha256,
                            settings.turn_workers, settings.turn_model_required, settings.turn_queue)
    model_dir, multilingual = resolve_whisper_model(settings.model, settings.model_cache_dir)
    cores = os.cpu_count() or 1
    if settings.device == "cpu" and settings.cpu_threads * settings.workers > cores:
        log.warning("STT_CPU_THREADS x STT_WORKERS exceeds the cores; decodes will fight for them",
                    extra={"cpu_threads": settings.cpu_threads, "workers": settings.workers, "cores": cores})
    engine = FasterWhisperEngine(
        model_dir, multilingual, settings.device, settings.compute_type,
        settings.cpu_threads, settings.workers, settings.beam_size, settings.min_audio_context_s,
        context=settings.context, context_language=settings.default_language,
    )
    vad = SileroVad(silero_vad_path(settings.vad_model_path))
    return SpeechToTextServicer(settings, engine, vad, turn)


def main() -> None:
    settings = SttSettings()
    setup_logging("stt", settings.log_level, settings.log_json)
    setup_tracing("stt")
    try:
        servicer = build_servicer(settings)
    except TurnModelError as exc:  # the path and what is wrong with it, no traceback
        log.error("stt cannot start: %s", exc)
        raise SystemExit(f"stt cannot start: {exc}") from None
    # Warm the models so the first real utterance is not the slow one.
    import numpy as np

    servicer.engine.transcribe(np.zeros(16000, dtype=np.float32), settings.default_language)
    if servicer.turn is not None:
        servicer.turn.model.probability(np.zeros(16000, dtype=np.float32))

    def register(server: grpc.aio.Server) -> list[str]:
        stt_pb2_grpc.add_SpeechToTextServicer_to_server(servicer, server)
        return [stt_pb2.DESCRIPTOR.services_by_name["SpeechToText"].full_name]

    async def on_stop() -> None:
        servicer.pool.shutdown()
        if servicer.turn is not None:
            servicer.turn.shutdown()
        shutdown_tracing()

    asyncio.run(serve_forever("stt", settings, register, on_stop))


if __name__ == "__main__":
    main()
