"""Streaming logic (partials, fast finals, the shared decode pool) with a fake VAD and fake engines.

The VAD says "speech" for loud frames, so every decision lands on an exact
32 ms frame; the engines answer by rule. Tests wait for events, never for time.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from tests.fakes.engines import FakeSttEngine, GatedSttEngine, LoudnessVad
from tests.stt_client import event_kind
from voicebot.common.audio import float_to_pcm16, resample
from voicebot.stt.endpointer import EndpointConfig
from voicebot.stt.engine import DraftDiscarded
from voicebot.stt.recognizer import FINAL, PARTIAL, SPECULATIVE, DecodePool, Segment, StreamRecognizer
from voicebot.stt.stream import RecognitionStream, StreamOptions
from voicebot.stt.vad import FRAME_SAMPLES

ENDPOINT = EndpointConfig(threshold=0.5, neg_threshold=0.35, min_speech_frames=2,
                          min_silence_frames=10, max_frames=200)


def loud(frames: int) -> bytes:
    t = np.arange(frames * FRAME_SAMPLES) / 16000
    return float_to_pcm16(0.3 * np.sin(2 * np.pi * 220 * t))


def quiet(frames: int) -> bytes:
    return float_to_pcm16(np.zeros(frames * FRAME_SAMPLES))


class Harness:
    """A RecognitionStream whose events are collected as they come."""

    def __init__(self, engine, interim: bool = False, interval: int = 5, rate: int = 16000,
                 speculative: bool = False, final_with_end: bool = False, workers: int = 1) -> None:
        self.engine = engine
        self.pool = DecodePool(engine, workers=workers)
        recognizer = StreamRecognizer(LoudnessVad(), ENDPOINT, rate, pre_roll_ms=0)
        self.stream = RecognitionStream(recognizer, self.pool, StreamOptions(
            language="en", interim_results=interim, partial_interval_frames=interval,
            speculative_silence_frames=2, speculative_results=speculative,
            final_with_end_of_utterance=final_with_end))
        self.events: list = []
        self._arrived = asyncio.Condition()
        self._reader = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        async for event in self.stream.events():
            async with self._arrived:
                self.events.append(event)
                self._arrived.notify_all()

    async def wait_for(self, kind: str, count: int = 1) -> None:
        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: self.kinds().count(kind) >= count), 30)

    def kinds(self) -> list[str]:
        return [event_kind(ev) for ev in self.events]

    def transcripts(self, final: bool) -> list:
        """The transcripts sent, a final inside its EndOfUtterance too."""
        out = []
        for ev in self.events:
            kind = ev.WhichOneof("event")
            if kind == "transcript" and ev.transcript.is_final == final:
                out.append(ev.transcript)
            elif kind == "end_of_utterance" and final and ev.end_of_utterance.HasField("final"):
                out.append(ev.end_of_utterance.final)
        return out

    async def finish(self) -> list[str]:
        await self.stream.finish()
        await asyncio.wait_for(self._reader, 30)
        await self.stream.close()
        return self.kinds()


async def wait_until(condition, timeout: float = 30) -> None:
    """Poll state that lives in the pool or in engine threads (no event to wait on)."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_the_final_reuses_the_speculative_decode_of_the_pause():
    engine = FakeSttEngine()
    h = Harness(engine)
    await h.stream.feed(quiet(5) + loud(20) + quiet(2))  # the pause starts a speculative decode
    await wait_until(lambda: len(engine.calls) == 1)
    await h.stream.feed(quiet(10))  # the pause becomes the endpoint
    assert await h.finish() == ["speech_started", "end_of_utterance", "final"]
    assert len(engine.calls) == 1  # the final did not decode again
    (final,) = h.transcripts(final=True)
    assert final.text == f"speech {engine.calls[0][0]} s"


async def test_the_speculative_decode_is_sent_before_the_endpoint_when_asked_for():
    engine = FakeSttEngine()
    h = Harness(engine, speculative=True)
    await h.stream.feed(quiet(5) + loud(20) + quiet(2))
    await h.wait_for("partial")  # before the endpoint: the utterance is still open
    assert h.kinds() == ["speech_started", "partial"]
    [early] = h.transcripts(final=False)
    assert early.speculative and early.text == f"speech {engine.calls[0][0]} s"
    await h.stream.feed(quiet(10))
    await h.finish()
    [final] = h.transcripts(final=True)
    assert final.text == early.text  # the endpoint confirmed the same words


async def test_without_asking_no_speculative_decode_is_sent():
    h = Harness(FakeSttEngine())
    await h.stream.feed(quiet(5) + loud(20) + quiet(12))
    assert await h.finish() == ["speech_started", "end_of_utterance", "final"]


async def test_a_final_known_at_the_endpoint_rides_in_the_end_of_utterance_when_asked_for():
    engine = FakeSttEngine()
    h = Harness(engine, speculative=True, final_with_end=True)
    await h.stream.feed(quiet(5) + loud(20) + quiet(2))
    await h.wait_for("partial")  # the pause's decode is done: the final is known from here
    await h.stream.feed(quiet(10))  # the endpoint
    assert await h.finish() == ["speech_started", "partial", "end_of_utterance+final"]
    [early] = h.transcripts(final=False)
    [final] = h.transcripts(final=True)
    assert final.is_final and final.text == early.text and final.language == "en"
    assert len(engine.calls) == 1  # no second decode


async def test_a_final_still_to_decode_at_the_endpoint_follows_its_end_of_utterance():
    engine = FakeSttEngine()
    h = Harness(engine, final_with_end=True)
    await h.stream.feed(quiet(5) + loud(20) + quiet(12))  # the endpoint before any decode ran
    assert await h.finish() == ["speech_started", "end_of_utterance", "final"]
    assert h.transcripts(final=True)[0].text == f"speech {engine.calls[-1][0]} s"  # decoded after it


class FirstDecodeGated(FakeSttEngine):
    """The stream's first decode waits for ``gate``; the others answer at once."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.first = True

    def transcribe(self, audio: np.ndarray, language: str, draft: bool = False) -> str:
        with self._lock:
            first, self.first = self.first, False
        if first and not self.gate.wait(timeout=60):
            raise TimeoutError("the test never opened the gate")
        return super().transcribe(audio, language, draft)


async def test_a_known_final_waits_its_turn_behind_an_earlier_final_still_decoding():
    engine = FirstDecodeGated()
    h = Harness(engine, speculative=True, final_with_end=True, workers=2)
    try:
        await h.stream.feed(loud(20) + quiet(12))  # utterance 0 ends; its final decodes (held)
        await h.stream.feed(loud(20) + quiet(2))  # utterance 1 pauses; its decode finishes
        await h.wait_for("partial")
        await h.stream.feed(quiet(10))  # utterance 1 ends, its final known
        await h.wait_for("end_of_utterance", count=2)
    finally:
        engine.gate.set()
    assert await h.finish() == ["speech_started", "end_of_utterance", "speech_started", "partial",
                                "end_of_utterance", "final", "final"]
    finals = h.transcripts(final=True)
    assert [f.start_ms for f in finals] == sorted(f.start_ms for f in finals)  # utterance 0 first
    assert finals[1].text == h.transcripts(final=False)[0].text  # utterance 1's decode reused


async def test_speech_after_the_pause_makes_the_speculative_decode_stale():
    engine = FakeSttEngine()
    h = Harness(engine)
    await h.stream.feed(loud(20) + quiet(2))
    await wait_until(lambda: len(engine.calls) == 1)
    await h.stream.feed(loud(10) + quiet(12))  # more speech, then the endpoint
    await h.finish()
    (final,) = h.transcripts(final=True)
    # 30 speech frames + the tail: longer than the speculative decode heard.
    assert final.text == "speech 1.1 s" and engine.calls[0][0] < 1.0
    assert final.end_ms == 32 * 32


async def test_partials_come_before_the_final_and_grow():
    h = Harness(FakeSttEngine(), interim=True, interval=5)
    await h.stream.feed(quiet(3) + loud(12))
    await h.wait_for("partial")
    await h.stream.feed(loud(12))
    await h.wait_for("partial", 2)
    await h.stream.feed(quiet(12))
    kinds = await h.finish()
    assert kinds[0] == "speech_started" and kinds[-2:] == ["end_of_utterance", "final"]
    partials, (final,) = h.transcripts(final=False), h.transcripts(final=True)
    assert len(partials) >= 2
    assert all(p.start_ms == final.start_ms for p in partials)
    ends = [p.end_ms for p in partials]
    assert ends == sorted(ends) and ends[-1] <= final.end_ms


async def test_one_decode_in_flight_per_stream_and_the_newest_audio_wins():
    engine = GatedSttEngine()
    h = Harness(engine, interim=True, interval=2)
    try:
        await h.stream.feed(loud(4))
        await engine.wait_entered()
        for _ in range(15):  # many partials are due while the first one is decoding
            await h.stream.feed(loud(2))
        assert (h.pool.running, h.pool.waiting) == (1, 0)
    finally:
        engine.gate.set()
    await h.wait_for("partial", 2)
    # The second decode read all 34 frames when it started; none in between ran.
    assert engine.started == [(4 * FRAME_SAMPLES, "en"), (34 * FRAME_SAMPLES, "en")]
    await h.stream.close()


async def test_a_queued_partial_reads_the_audio_when_a_worker_takes_it():
    engine = GatedSttEngine()
    h = Harness(engine, interim=True, interval=2)
    segment = Segment(0, 0, 1, np.zeros(FRAME_SAMPLES, np.float32))
    busy = h.pool.submit(lambda: segment, "busy", FINAL)  # another stream holds the worker
    try:
        await engine.wait_entered()
        await h.stream.feed(loud(4))
        await wait_until(lambda: h.pool.waiting == 1)  # this stream's partial waits for the worker
        await h.stream.feed(loud(20))  # newer audio arrives while it waits
    finally:
        engine.gate.set()
    await busy.future
    await h.wait_for("partial")
    assert engine.started[1] == (24 * FRAME_SAMPLES, "en")
    await h.stream.close()


async def test_a_partial_that_finishes_after_the_end_of_utterance_is_not_sent():
    engine = GatedSttEngine()
    h = Harness(engine, interim=True, interval=5)
    try:
        await h.stream.feed(loud(10))
        await engine.wait_entered()  # a partial of 10 frames is decoding
        await h.stream.feed(quiet(12))  # the utterance ends meanwhile
        await h.wait_for("end_of_utterance")
    finally:
        engine.gate.set()
    assert await h.finish() == ["speech_started", "end_of_utterance", "final"]
    assert h.transcripts(final=True)[0].text == "speech 0.4 s"  # 10 speech + 3 tail frames


async def test_the_pool_runs_finals_first_then_speculative_then_partials():
    engine = GatedSttEngine()
    pool = DecodePool(engine, workers=1)
    audio = np.zeros(FRAME_SAMPLES, np.float32)

    def job(tag: str, priority: int):
        return pool.submit(lambda: Segment(0, 0, 1, audio), tag, priority)

    jobs = [job("busy", PARTIAL)]
    await engine.wait_entered()
    jobs += [job("p", PARTIAL), job("f1", FINAL), job("s", SPECULATIVE), job("f2", FINAL)]
    assert (pool.running, pool.waiting) == (1, 4)
    engine.gate.set()
    await asyncio.gather(*(j.future for j in jobs))
    assert [lang for _, lang in engine.started] == ["busy", "f1", "f2", "s", "p"]
    pool.shutdown()


async def test_a_cancelled_job_never_runs_and_the_worker_moves_on():
    engine = GatedSttEngine()
    pool = DecodePool(engine, workers=1)
    segment = Segment(0, 0, 1, np.zeros(FRAME_SAMPLES, np.float32))
    busy = pool.submit(lambda: segment, "busy", FINAL)
    await engine.wait_entered()
    gone = pool.submit(lambda: segment, "gone", FINAL)
    gone.future.cancel()  # its stream went away while it waited
    await asyncio.sleep(0)  # done callbacks run on the next loop turn
    assert pool.waiting == 0
    engine.gate.set()
    await busy.future
    assert await pool.decode(segment, "next") == "speech 0.0 s"
    assert [lang for _, lang in engine.started] == ["busy", "next"]
    assert (pool.running, pool.waiting) == (0, 0)
    pool.shutdown()


async def test_a_job_with_nothing_to_decode_resolves_to_none():
    engine = FakeSttEngine()
    pool = DecodePool(engine, workers=1)
    assert await pool.submit(lambda: None, "en", PARTIAL).future is None
    assert engine.calls == []
    pool.shutdown()


async def test_closing_a_stream_drops_its_queued_decodes():
    engine = GatedSttEngine()
    pool = DecodePool(engine, workers=1)
    busy = pool.submit(lambda: Segment(0, 0, 1, np.zeros(FRAME_SAMPLES, np.float32)), "busy", FINAL)
    await engine.wait_entered()
    recognizer = StreamRecognizer(LoudnessVad(), ENDPOINT, 16000, pre_roll_ms=0)
    stream = RecognitionStream(recognizer, pool, StreamOptions(language="xx"))
    await stream.feed(loud(10) + quiet(12))  # a speculative decode and a final wait for the worker
    await wait_until(lambda: pool.waiting >= 1)
    await stream.close()
    assert pool.waiting == 0
    engine.gate.set()
    await busy.future
    assert [lang for _, lang in engine.started] == ["busy"]
    pool.shutdown()


@pytest.mark.parametrize("rate", [8000, 24000, 48000])
async def test_other_rates_end_utterances_at_the_same_stream_time(rate):
    h = Harness(FakeSttEngine(), rate=rate)
    speech = np.frombuffer(quiet(5) + loud(20) + quiet(12), "<i2").astype(np.float32) / 32768
    await h.stream.feed(float_to_pcm16(resample(speech, 16000, rate)))
    await h.finish()
    (final,) = h.transcripts(final=True)
    assert abs(final.end_ms - 25 * 32) <= 32


async def test_partials_are_spaced_out_when_more_streams_speak_than_workers():
    engine = FakeSttEngine()
    pool = DecodePool(engine, workers=1)

    def new_stream():
        recognizer = StreamRecognizer(LoudnessVad(), ENDPOINT, 16000, pre_roll_ms=0)
        return RecognitionStream(recognizer, pool, StreamOptions(
            language="en", interim_results=True, partial_interval_frames=5))

    first, second = new_stream(), new_stream()
    await first.feed(loud(3))
    assert (pool.speaking, pool.partial_share()) == (1, 1.0)
    await second.feed(loud(3))
    assert (pool.speaking, pool.partial_share()) == (2, 2.0)
    # With two speakers on one worker, 6 more frames (9 since the start) are not yet worth a partial.
    await first.feed(loud(6))
    await asyncio.sleep(0.05)  # room for a wrongly asked decode to show up
    assert (pool.running, pool.waiting, engine.calls) == (0, 0, [])
    await first.feed(loud(1))  # 10 frames: twice the interval
    await wait_until(lambda: len(engine.calls) == 1)
    await first.feed(quiet(12))  # the first stream's utterance ends
    assert pool.speaking == 1
    await first.close()
    await second.close()
    assert pool.speaking == 0
    pool.shutdown()


class LoopingDraftEngine(FakeSttEngine):
    """Every draft (periodic partial) decode 'loops' and is discarded, as a short Whisper window can."""

    def __init__(self) -> None:
        super().__init__()
        self.drafts: list[bool] = []

    def transcribe(self, audio, language, draft=False):
        self.drafts.append(draft)
        if draft:
            raise DraftDiscarded
        return super().transcribe(audio, language)


async def test_a_discarded_draft_is_neither_sent_nor_reused_and_the_final_decodes_afresh():
    engine = LoopingDraftEngine()
    h = Harness(engine, interim=True, interval=5)
    await h.stream.feed(quiet(3) + loud(12))
    await wait_until(lambda: True in engine.drafts)  # a partial was decoded as a draft
    await h.stream.feed(quiet(12))
    kinds = await h.finish()
    assert "partial" not in kinds
    (final,) = h.transcripts(final=True)
    assert final.text.startswith("speech")  # decoded again, not the discarded draft's nothing
    assert engine.drafts[-1] is False  # the final is never a draft
