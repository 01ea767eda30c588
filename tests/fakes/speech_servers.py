"""Instant STT and TTS gRPC servers for measuring the gateway alone (``make bench-gateway``).

``python -m tests.fakes.speech_servers`` serves both (with grpc.health.v1) on free ports and
prints ``READY fake-speech stt=PORT tts=PORT``.

STT: a 20 ms frame whose peak is above a threshold is speech; ``SpeechStarted`` at the
first loud frame, a partial every 400 ms of speech, and at the first quiet frame after speech
``EndOfUtterance`` and the final at once (no endpointing silence: the time after the end of
speech is all the gateway's and the brain's); the final inside the ``EndOfUtterance`` when the
client asks for that (``final_with_end_of_utterance``), as the real service sends a final it
already has at the endpoint. The transcript is ``FAKE_STT_TEXT``.
``FAKE_STT_MAX_STREAMS`` (0: none) refuses streams beyond it with RESOURCE_EXHAUSTED, as the
real service does.

TTS: each piece the real segmenter cuts, with the real service's settings (``TTS_*``, read as
the real service reads them; by default the reply's first piece ends at its first comma: "Sure,"
is spoken while the rest is written), is 60 ms of quiet audio per word, in chunks of at most
``TTS_CHUNK_MS``, sent as soon as the piece is complete; the piece starts on its first chunk
when the client asks for that (``sentence_with_first_audio``), as the real service does.
``FAKE_TTS_FAULTS`` names a JSON file read at each stream's start (a test writes and removes it
while the server runs): a piece holding its ``skip`` words gets TTS's per-sentence error in place
of its audio; one holding its ``abort`` words gets half its audio, then (``abort_after_s``
later) the stream fails (UNAVAILABLE), as a TTS that dies mid-reply.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from voicebot.common import gc_tuning
from voicebot.tts.config import TtsSettings
from voicebot.tts.segmenter import SentenceSegmenter
from voicebot.v1 import stt_pb2, stt_pb2_grpc, tts_pb2, tts_pb2_grpc

# int16 units: the bench's "speech" is a tone far above it, silence is zeros. A peak, not an RMS:
# three NumPy calls fewer per message (7 -> 3 us a frame, 14 -> 8 for a batch of 50), and an
# instant fake should add as little of its own time to the gateway's as it can. Vectorised: a
# loop over a batch's frames in Python took 300+ us.
SPEECH_PEAK = 1000
PARTIAL_EVERY_MS = 400
WORD_MS = 60


class InstantStt(stt_pb2_grpc.SpeechToTextServicer):
    def __init__(self, text: str, max_streams: int) -> None:
        self.text, self.max_streams = text, max_streams
        self.active = 0

    async def StreamingRecognize(self, request_iterator, context):
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None:
            return
        if self.max_streams and self.active >= self.max_streams:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "fake STT at its stream cap")
        self.active += 1
        try:
            stream = _Utterances(first.config.sample_rate or 16000, self.text,
                                 first.config.final_with_end_of_utterance)
            async for request in requests:
                if request.WhichOneof("request") == "audio":
                    for event in stream.feed(request.audio):
                        yield event
        finally:
            self.active -= 1


class _Utterances:
    def __init__(self, rate: int, text: str, final_with_end: bool = False) -> None:
        self.frame_bytes = rate * 20 // 1000 * 2
        self.text = text
        self.final_with_end = final_with_end
        self.pending = b""
        self.ms = 0
        self.index = -1
        self.onset_ms: int | None = None
        self.next_partial_ms = 0

    def feed(self, pcm: bytes) -> list[stt_pb2.RecognizeEvent]:
        data = self.pending + pcm
        usable = len(data) - len(data) % self.frame_bytes
        self.pending = data[usable:]
        if not usable:
            return []
        frames = np.frombuffer(data[:usable], dtype=np.int16).reshape(-1, self.frame_bytes // 2)
        loud = np.abs(frames.astype(np.int32)).max(axis=1) > SPEECH_PEAK
        events: list[stt_pb2.RecognizeEvent] = []
        for is_speech in loud.tolist():
            events += self._frame(is_speech)
            self.ms += 20
        return events

    def _frame(self, speech: bool) -> list[stt_pb2.RecognizeEvent]:
        if speech and self.onset_ms is None:
            self.index += 1
            self.onset_ms, self.next_partial_ms = self.ms, self.ms + PARTIAL_EVERY_MS
            return [self._event(speech_started=stt_pb2.SpeechStarted(offset_ms=self.ms))]
        if speech and self.ms >= self.next_partial_ms:
            self.next_partial_ms += PARTIAL_EVERY_MS
            return [self._transcript(final=False)]
        if not speech and self.onset_ms is not None:
            end = stt_pb2.EndOfUtterance(end_ms=self.ms, reason="silence")
            final = self._transcript(final=True)
            self.onset_ms = None
            if self.final_with_end:
                end.final.CopyFrom(final.transcript)
                return [self._event(end_of_utterance=end)]
            return [self._event(end_of_utterance=end), final]
        return []

    def _transcript(self, final: bool) -> stt_pb2.RecognizeEvent:
        return self._event(transcript=stt_pb2.Transcript(
            text=self.text, is_final=final, start_ms=self.onset_ms or 0, end_ms=self.ms))

    def _event(self, **event) -> stt_pb2.RecognizeEvent:
        return stt_pb2.RecognizeEvent(utterance_index=self.index, **event)


class InstantTts(tts_pb2_grpc.TextToSpeechServicer):
    def __init__(self, settings: TtsSettings, faults: Path | None = None) -> None:
        # How the real TTS cuts a reply and chunks its audio.
        self.segments = (settings.max_clause_chars, settings.first_clause_chars,
                         settings.first_clause_words, settings.first_clause_min_words)
        self.chunk_ms = settings.chunk_ms
        self.faults = faults

    def _faults(self) -> dict[str, str]:
        if self.faults is None or not self.faults.exists():
            return {}
        return json.loads(self.faults.read_text())

    async def StreamingSynthesize(self, request_iterator, context):
        await context.send_initial_metadata(())  # as the real service does
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None:
            return
        rate = first.config.sample_rate or 16000
        with_audio = first.config.sentence_with_first_audio
        faults = self._faults()
        segmenter = SentenceSegmenter(*self.segments)
        index = 0

        async def pieces():
            async for request in requests:
                if request.WhichOneof("request") == "text":
                    for sentence in segmenter.push(request.text):
                        yield sentence
            for sentence in segmenter.flush():
                yield sentence

        async for sentence in pieces():
            events = _speak(sentence, index, rate, self.chunk_ms, with_audio)
            if faults.get("skip") and faults["skip"] in sentence:
                events = [tts_pb2.SynthesizeEvent(error=tts_pb2.SynthesisError(
                    sentence_index=index, message="synthesis failed (injected)"))]
            aborting = bool(faults.get("abort")) and faults["abort"] in sentence
            for event in events[: len(events) // 2] if aborting else events:
                yield event
            if aborting:
                await asyncio.sleep(float(faults.get("abort_after_s", 0)))
                await context.abort(grpc.StatusCode.UNAVAILABLE, "tts went away (injected)")
            index += 1


def sentence_events(started: tts_pb2.SentenceStarted, chunks: list[tts_pb2.AudioChunk], on_audio: bool,
                    started_ms_ago: float = 0.0) -> list[tts_pb2.SynthesizeEvent]:
    """A sentence's start and audio as the real TTS sends them: a ``SentenceStarted`` of its own
    first, or on the first chunk when the client asked for that (``sentence_with_first_audio``)."""
    if on_audio and chunks:
        chunks[0].sentence.CopyFrom(started)
        chunks[0].sentence_started_ms_ago = started_ms_ago
    events = [] if on_audio else [tts_pb2.SynthesizeEvent(sentence_started=started)]
    return events + [tts_pb2.SynthesizeEvent(audio=chunk) for chunk in chunks]


def _speak(sentence: str, index: int, rate: int, chunk_ms: int,
           with_audio: bool = False) -> list[tts_pb2.SynthesizeEvent]:
    total = len(sentence.split()) * WORD_MS * rate // 1000 * 2
    chunk = max(2, chunk_ms * rate // 1000 * 2)
    chunks = [tts_pb2.AudioChunk(pcm16=bytes(min(chunk, total - start)), sample_rate=rate,
                                 sentence_index=index) for start in range(0, total, chunk)]
    # Rendered at once: 0 ms between the sentence's start and its first chunk.
    events = sentence_events(tts_pb2.SentenceStarted(index=index, text=sentence), chunks, with_audio)
    events.append(tts_pb2.SynthesizeEvent(sentence_done=tts_pb2.SentenceDone(
        index=index, duration_ms=total * 1000 // (2 * rate))))
    return events


async def serve() -> None:
    servers = []
    ports = {}
    stt = InstantStt(os.environ.get("FAKE_STT_TEXT", "a table for two please"),
                     int(os.environ.get("FAKE_STT_MAX_STREAMS", "0")))
    faults = os.environ.get("FAKE_TTS_FAULTS")
    tts = InstantTts(TtsSettings(), Path(faults) if faults else None)
    for name, add in (("stt", lambda s: stt_pb2_grpc.add_SpeechToTextServicer_to_server(stt, s)),
                      ("tts", lambda s: tts_pb2_grpc.add_TextToSpeechServicer_to_server(tts, s))):
        server = grpc.aio.server()
        add(server)
        checker = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        await checker.set("", health_pb2.HealthCheckResponse.SERVING)
        # FAKE_STT_PORT / FAKE_TTS_PORT: a restarted fake comes back where the gateway expects it.
        port = os.environ.get(f"FAKE_{name.upper()}_PORT", "0")
        ports[name] = server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        servers.append(server)
    # As the real services do: the fakes' pauses are not the gateway's.
    gc_tuning.settle(gc_tuning.configured())
    print(f"READY fake-speech stt={ports['stt']} tts={ports['tts']}", flush=True)
    await asyncio.gather(*(server.wait_for_termination() for server in servers))


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(serve())
    except ImportError:
        asyncio.run(serve())
