"""gRPC SpeechToText service.

Each call runs two tasks: a reader that turns audio into VAD decisions
(SpeechStarted and EndOfUtterance go out at once) and a decoder that
transcribes ended utterances in order through the shared worker pool.
The hand-off queue between them is small, so a client that sends faster
than we can decode is slowed by gRPC flow control instead of growing memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc

from services.stt.config import SttSettings
from services.stt.endpointer import EndpointConfig
from services.stt.engine import FasterWhisperEngine, SttEngine
from services.stt.metrics import ACTIVE_STREAMS, ENDPOINT_TO_FINAL_SECONDS
from services.stt.models import resolve_whisper_model, silero_vad_path
from services.stt.recognizer import DecodePool, Ended, Started, StreamRecognizer
from services.stt.vad import FRAME_MS, SileroVad
from voicebot.common.audio import SUPPORTED_INPUT_RATES
from voicebot.common.grpc_server import serve_forever
from voicebot.common.logs import setup_logging
from voicebot.v1 import stt_pb2, stt_pb2_grpc

log = logging.getLogger("stt")

_DONE = object()


class InvalidConfig(ValueError):
    pass


class SpeechToTextServicer(stt_pb2_grpc.SpeechToTextServicer):
    def __init__(self, settings: SttSettings, engine: SttEngine, vad: SileroVad) -> None:
        self.settings = settings
        self.engine = engine
        self.vad = vad
        self.pool = DecodePool(engine, settings.workers)

    def _validate(self, config: stt_pb2.RecognitionConfig) -> tuple[int, str, EndpointConfig]:
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
        endpoint = EndpointConfig(
            threshold=s.vad_threshold,
            neg_threshold=s.vad_neg_threshold,
            min_speech_frames=max(1, s.min_speech_ms // FRAME_MS),
            min_silence_frames=max(1, silence_ms // FRAME_MS),
            max_frames=max(2, int(s.max_utterance_s * 1000) // FRAME_MS),
        )
        return rate, language, endpoint

    async def StreamingRecognize(self, request_iterator, context: grpc.aio.ServicerContext):
        requests = request_iterator.__aiter__()
        try:
            first = await requests.__anext__()
        except StopAsyncIteration:
            return
        if first.WhichOneof("request") != "config":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be config")
        try:
            rate, language, endpoint = self._validate(first.config)
        except InvalidConfig as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        recognizer = StreamRecognizer(
            self.vad.new_stream(), endpoint, rate, self.settings.pre_roll_ms
        )
        session_id = first.config.session_id
        events: asyncio.Queue = asyncio.Queue()
        utterances: asyncio.Queue = asyncio.Queue(maxsize=2)
        ACTIVE_STREAMS.inc()
        reader = asyncio.create_task(self._read(requests, recognizer, events, utterances))
        decoder = asyncio.create_task(self._decode(utterances, events, language, session_id))
        try:
            while True:
                item = await events.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        except InvalidConfig as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            ACTIVE_STREAMS.dec()
            for task in (reader, decoder):
                task.cancel()
            for task in (reader, decoder):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _read(self, requests, recognizer: StreamRecognizer, events, utterances) -> None:
        index = 0
        try:
            async for request in requests:
                if request.WhichOneof("request") != "audio":
                    raise InvalidConfig("only audio may follow the config message")
                if len(request.audio) > self.settings.max_chunk_bytes:
                    raise InvalidConfig(
                        f"audio message of {len(request.audio)} bytes exceeds "
                        f"{self.settings.max_chunk_bytes}"
                    )
                index = await self._dispatch(recognizer.feed(request.audio), index, events, utterances)
            await self._dispatch(recognizer.finish(), index, events, utterances)
            await utterances.put(_DONE)
        except InvalidConfig as exc:
            await events.put(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("stt reader failed")
            await events.put(exc)

    async def _dispatch(self, decided, index: int, events, utterances) -> int:
        for event in decided:
            if isinstance(event, Started):
                await events.put(
                    stt_pb2.RecognizeEvent(
                        utterance_index=index,
                        speech_started=stt_pb2.SpeechStarted(offset_ms=event.offset_ms),
                    )
                )
            elif isinstance(event, Ended):
                await events.put(
                    stt_pb2.RecognizeEvent(
                        utterance_index=index,
                        end_of_utterance=stt_pb2.EndOfUtterance(
                            end_ms=event.end_ms, reason=event.reason
                        ),
                    )
                )
                await utterances.put((index, event, time.perf_counter()))
                index += 1
        return index

    async def _decode(self, utterances, events, language: str, session_id: str) -> None:
        try:
            while (item := await utterances.get()) is not _DONE:
                index, ended, decided_at = item
                text = await self.pool.transcribe(ended.audio, language)
                await events.put(
                    stt_pb2.RecognizeEvent(
                        session_id=session_id,
                        utterance_index=index,
                        transcript=stt_pb2.Transcript(
                            text=text, is_final=True, start_ms=ended.start_ms,
                            end_ms=ended.end_ms, language=language,
                        ),
                    )
                )
                ENDPOINT_TO_FINAL_SECONDS.observe(time.perf_counter() - decided_at)
            await events.put(_DONE)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("stt decode failed")
            await events.put(exc)


def build_servicer(settings: SttSettings) -> SpeechToTextServicer:
    model_dir, multilingual = resolve_whisper_model(settings.model, settings.model_cache_dir)
    engine = FasterWhisperEngine(
        model_dir, multilingual, settings.device, settings.compute_type,
        settings.cpu_threads, settings.workers, settings.beam_size,
    )
    vad = SileroVad(silero_vad_path(settings.vad_model_path))
    return SpeechToTextServicer(settings, engine, vad)


def main() -> None:
    settings = SttSettings()
    setup_logging("stt", settings.log_level, settings.log_json)
    servicer = build_servicer(settings)
    # Warm the model so the first real utterance is not the slow one.
    import numpy as np

    servicer.engine.transcribe(np.zeros(16000, dtype=np.float32), settings.default_language)

    def register(server: grpc.aio.Server) -> list[str]:
        stt_pb2_grpc.add_SpeechToTextServicer_to_server(servicer, server)
        return [stt_pb2.DESCRIPTOR.services_by_name["SpeechToText"].full_name]

    async def on_stop() -> None:
        servicer.pool.shutdown()

    asyncio.run(serve_forever("stt", settings, register, on_stop))


if __name__ == "__main__":
    main()
