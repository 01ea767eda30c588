"""Drive a StreamingRecognize call with float audio and collect the events as records."""

from __future__ import annotations

import grpc
import numpy as np

from voicebot.common.audio import float_to_pcm16
from voicebot.v1 import stt_pb2, stt_pb2_grpc


async def recognize(addr: str, audio: np.ndarray, rate: int = 16000, chunk_ms: int = 20,
                    **config) -> list[tuple]:
    """Returns records: ("started", ms), ("eou", ms, reason), ("final"/"partial", text, start, end)."""
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = stt_pb2_grpc.SpeechToTextStub(channel)

        async def requests():
            yield stt_pb2.RecognizeRequest(config=stt_pb2.RecognitionConfig(
                session_id="test", sample_rate=rate, **config))
            pcm = float_to_pcm16(audio)
            step = rate * chunk_ms // 1000 * 2
            for offset in range(0, len(pcm), step):
                yield stt_pb2.RecognizeRequest(audio=pcm[offset:offset + step])

        return [to_record(ev) async for ev in stub.StreamingRecognize(requests(), timeout=120)]


def to_record(ev: stt_pb2.RecognizeEvent) -> tuple:
    kind = ev.WhichOneof("event")
    if kind == "speech_started":
        return ("started", ev.speech_started.offset_ms)
    if kind == "end_of_utterance":
        return ("eou", ev.end_of_utterance.end_ms, ev.end_of_utterance.reason)
    t = ev.transcript
    return ("final" if t.is_final else "partial", t.text, t.start_ms, t.end_ms)


def kinds(records: list[tuple]) -> list[str]:
    return [r[0] for r in records]
