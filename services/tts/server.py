"""gRPC TextToSpeech service.

A reader task feeds text deltas to the segmenter; each complete sentence is
queued at once and synthesized by the shared worker pool while more text is
still arriving. Audio leaves in chunks of at most ``chunk_ms``, resampled to
the rate the caller asked for. A sentence that fails is reported in an error
event and the stream goes on with the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np

from services.tts.config import TtsSettings
from services.tts.engine import PiperEngine, TtsEngine, packaged_voice
from services.tts.metrics import (
    ACTIVE_STREAMS,
    FIRST_AUDIO_SECONDS,
    SENTENCE_ERRORS,
    SYNTH_SECONDS,
)
from services.tts.segmenter import SentenceSegmenter
from voicebot.common.audio import float_to_pcm16, resample
from voicebot.common.grpc_server import serve_forever
from voicebot.common.logs import setup_logging
from voicebot.v1 import tts_pb2, tts_pb2_grpc

log = logging.getLogger("tts")
_DONE = object()
OUTPUT_RATES = (8000, 16000, 22050, 24000, 44100, 48000)


class TextToSpeechServicer(tts_pb2_grpc.TextToSpeechServicer):
    def __init__(self, settings: TtsSettings, engine: TtsEngine) -> None:
        self.settings = settings
        self.engine = engine
        self._executor = ThreadPoolExecutor(settings.workers, thread_name_prefix="tts-synth")

    async def StreamingSynthesize(self, request_iterator, context: grpc.aio.ServicerContext):
        requests = request_iterator.__aiter__()
        try:
            first = await requests.__anext__()
        except StopAsyncIteration:
            return
        if first.WhichOneof("request") != "config":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be config")
        rate = first.config.sample_rate or self.engine.sample_rate
        if rate not in (*OUTPUT_RATES, self.engine.sample_rate):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"sample_rate {rate} is not supported; use one of {list(OUTPUT_RATES)}",
            )
        if first.config.voice and first.config.voice != "default":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"voice {first.config.voice!r} is not loaded; this server has 'default'",
            )
        sentences: asyncio.Queue = asyncio.Queue()
        ACTIVE_STREAMS.inc()
        reader = asyncio.create_task(self._read(requests, sentences))
        try:
            index = 0
            while (item := await sentences.get()) is not _DONE:
                if isinstance(item, str):
                    async for event in self._speak(index, item, rate):
                        yield event
                    index += 1
                else:
                    yield item
        finally:
            ACTIVE_STREAMS.dec()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read(self, requests, sentences: asyncio.Queue) -> None:
        segmenter = SentenceSegmenter(self.settings.max_clause_chars)
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

    async def _speak(self, index: int, sentence: str, rate: int):
        yield tts_pb2.SynthesizeEvent(
            sentence_started=tts_pb2.SentenceStarted(index=index, text=sentence)
        )
        ready_at = time.perf_counter()
        try:
            audio = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._synthesize, sentence
            )
        except Exception as exc:  # noqa: BLE001 - one bad sentence must not end the reply
            SENTENCE_ERRORS.inc()
            log.warning("sentence failed", extra={"index": index, "error": repr(exc)})
            yield tts_pb2.SynthesizeEvent(
                error=tts_pb2.SynthesisError(sentence_index=index, message="synthesis failed")
            )
            return
        FIRST_AUDIO_SECONDS.observe(time.perf_counter() - ready_at)
        audio = resample(audio, self.engine.sample_rate, rate)
        step = max(1, rate * self.settings.chunk_ms // 1000)
        for start in range(0, len(audio), step):
            yield tts_pb2.SynthesizeEvent(audio=tts_pb2.AudioChunk(
                pcm16=float_to_pcm16(audio[start:start + step]),
                sample_rate=rate,
                sentence_index=index,
            ))
        yield tts_pb2.SynthesizeEvent(sentence_done=tts_pb2.SentenceDone(
            index=index, duration_ms=int(len(audio) * 1000 / rate)
        ))

    def _synthesize(self, sentence: str) -> np.ndarray:
        started = time.perf_counter()
        parts = list(self.engine.synthesize(sentence))
        SYNTH_SECONDS.observe(time.perf_counter() - started)
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def build_engine(settings: TtsSettings) -> TtsEngine:
    if settings.voice_path:
        config = Path(settings.voice_config_path) if settings.voice_config_path else None
        return PiperEngine(Path(settings.voice_path).expanduser(), config)
    return PiperEngine(*packaged_voice())


def main() -> None:
    settings = TtsSettings()
    setup_logging("tts", settings.log_level, settings.log_json)
    servicer = TextToSpeechServicer(settings, build_engine(settings))
    list(servicer.engine.synthesize("Ready."))  # warm the model

    def register(server: grpc.aio.Server) -> list[str]:
        tts_pb2_grpc.add_TextToSpeechServicer_to_server(servicer, server)
        return [tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"].full_name]

    async def on_stop() -> None:
        servicer.shutdown()

    asyncio.run(serve_forever("tts", settings, register, on_stop))


if __name__ == "__main__":
    main()
