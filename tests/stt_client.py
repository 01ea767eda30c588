"""Drive a StreamingRecognize call with float audio and collect the events as records.

Records: ("started", ms, utt), ("eou", ms, reason, utt), ("final"/"partial", text, start, end, utt),
and ("eou+final", ms, reason, text, utt) for a final sent inside its EndOfUtterance
(``final_with_end_of_utterance``); the utterance index is always last.
"""

from __future__ import annotations

import grpc
import numpy as np

from voicebot.common.audio import float_to_pcm16
from voicebot.common.internal_auth import internal_channel
from voicebot.v1 import stt_pb2, stt_pb2_grpc


def _chunks(audio: np.ndarray, rate: int, chunk_ms: int):
    pcm = float_to_pcm16(audio)
    step = rate * chunk_ms // 1000 * 2
    for offset in range(0, len(pcm), step):
        yield pcm[offset:offset + step]


def _config(rate: int, **config) -> stt_pb2.RecognizeRequest:
    return stt_pb2.RecognizeRequest(config=stt_pb2.RecognitionConfig(
        **{"session_id": "test", "sample_rate": rate, **config}))


async def recognize(addr: str, audio: np.ndarray, rate: int = 16000, chunk_ms: int = 20,
                    **config) -> list[tuple]:
    """Send all the audio as fast as the server takes it, half-close, return every record."""
    async with internal_channel(addr) as channel:
        stub = stt_pb2_grpc.SpeechToTextStub(channel)

        async def requests():
            yield _config(rate, **config)
            for chunk in _chunks(audio, rate, chunk_ms):
                yield stt_pb2.RecognizeRequest(audio=chunk)

        return [to_record(ev) async for ev in stub.StreamingRecognize(requests(), timeout=120)]


class RecognizeCall:
    """A call driven step by step, to make event order deterministic: send some
    audio, wait for a given event, then send more."""

    def __init__(self, addr: str, rate: int = 16000, timeout: float = 120, **config) -> None:
        self.addr, self.rate, self.timeout, self.config = addr, rate, timeout, config
        self.records: list[tuple] = []

    async def __aenter__(self) -> RecognizeCall:
        self._channel = internal_channel(self.addr)
        stub = stt_pb2_grpc.SpeechToTextStub(self._channel)
        self.call = stub.StreamingRecognize(timeout=self.timeout)
        await self.call.write(_config(self.rate, **self.config))
        return self

    async def __aexit__(self, *exc) -> None:
        self.call.cancel()
        await self._channel.close()

    async def send(self, audio: np.ndarray, chunk_ms: int = 20) -> None:
        for chunk in _chunks(audio, self.rate, chunk_ms):
            await self.call.write(stt_pb2.RecognizeRequest(audio=chunk))

    async def until(self, kind: str) -> tuple:
        """Read events until one of ``kind``; returns it (all read ones are in ``records``)."""
        while True:
            ev = await self.call.read()
            if ev is grpc.aio.EOF:
                raise AssertionError(f"stream ended before a {kind!r} event: {kinds(self.records)}")
            self.records.append(to_record(ev))
            if self.records[-1][0] == kind:
                return self.records[-1]

    async def finish(self) -> list[tuple]:
        """Half-close and read the remaining events; returns every record of the call."""
        await self.call.done_writing()
        while (ev := await self.call.read()) is not grpc.aio.EOF:
            self.records.append(to_record(ev))
        return self.records


def to_record(ev: stt_pb2.RecognizeEvent) -> tuple:
    kind = ev.WhichOneof("event")
    utt = ev.utterance_index
    if kind == "speech_started":
        return ("started", ev.speech_started.offset_ms, utt)
    if kind == "end_of_utterance":
        end = ev.end_of_utterance
        if end.HasField("final"):
            return ("eou+final", end.end_ms, end.reason, end.final.text, utt)
        return ("eou", end.end_ms, end.reason, utt)
    t = ev.transcript
    return ("final" if t.is_final else "partial", t.text, t.start_ms, t.end_ms, utt)


def event_kind(ev: stt_pb2.RecognizeEvent) -> str:
    """An event's kind by its oneof, with "final"/"partial" for transcripts and
    "end_of_utterance+final" for a final sent inside its EndOfUtterance."""
    kind = ev.WhichOneof("event")
    if kind == "transcript":
        return "final" if ev.transcript.is_final else "partial"
    if kind == "end_of_utterance" and ev.end_of_utterance.HasField("final"):
        return "end_of_utterance+final"
    return kind


def kinds(records: list[tuple]) -> list[str]:
    return [r[0] for r in records]


def per_utterance(records: list[tuple]) -> dict[int, list[str]]:
    """Kinds of the records of each utterance, in arrival order."""
    out: dict[int, list[str]] = {}
    for record in records:
        out.setdefault(record[-1], []).append(record[0])
    return out
