"""What the person heard of a reply (audio sent, the client's playback), and the paced playout."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.fakes.speech_servers import sentence_events
from voicebot.gateway.playout import Playout
from voicebot.gateway.spoken import SpokenTracker
from voicebot.gateway.turn import TurnRunner, TurnTimings
from voicebot.v1 import tts_pb2

RATE = 16000
MS = RATE * 2 // 1000  # bytes per millisecond of PCM16


def tracker() -> SpokenTracker:
    t = SpokenTracker(sample_rate=RATE)
    t.sentence_started("Tuesday at ten works.")
    t.audio_received(1000 * MS)
    t.sentence_started("Shall I book it for you?")
    t.audio_received(1000 * MS)
    t.audio_sent(2000 * MS, now=0.0)
    return t


def test_whole_first_sentence_and_part_of_the_second():
    assert tracker().spoken_text(played_ms=1500) == "Tuesday at ten works. Shall I book"


def test_nothing_played_means_nothing_heard():
    assert tracker().spoken_text(played_ms=0) == ""


def test_played_beyond_what_was_sent_is_capped():
    assert tracker().spoken_text(played_ms=99_000) == "Tuesday at ten works. Shall I book it for you?"


def test_without_a_report_heard_is_what_was_sent_less_the_clients_buffer():
    t = SpokenTracker(sample_rate=RATE)
    t.sentence_started("Tuesday at ten works.")
    t.audio_received(1000 * MS)
    t.sentence_started("Shall I book it for you?")
    t.audio_received(1000 * MS)
    t.audio_sent(300 * MS, now=10.0)  # the lead goes at once
    assert t.buffered_ms(now=10.0) == pytest.approx(300) and t.heard_ms(now=10.0) == pytest.approx(0)
    for step in range(1, 85):  # then 20 ms frames at real time
        t.audio_sent(20 * MS, now=10.0 + step * 0.02)
    assert t.sent_ms == 300 + 84 * 20
    assert t.heard_ms(now=11.68) == pytest.approx(1680)
    assert t.spoken_text(now=11.5) == "Tuesday at ten works. Shall I book"
    assert t.spoken_text(now=100.0) == "Tuesday at ten works. Shall I book it for"  # all sent was played


def test_a_client_that_ran_dry_restarts_its_clock():
    t = SpokenTracker(sample_rate=RATE)
    t.audio_sent(100 * MS, now=0.0)
    t.audio_sent(100 * MS, now=5.0)  # TTS was late: the first 100 ms ended long ago
    assert t.buffered_ms(now=5.0) == pytest.approx(100)
    assert t.heard_ms(now=5.05) == pytest.approx(150)


def test_a_sentence_tts_could_not_speak_was_not_heard():
    t = SpokenTracker(sample_rate=RATE)
    t.sentence_started("First.")
    t.audio_received(500 * MS)
    t.sentence_started("Broken.")
    t.sentence_failed()
    t.sentence_started("Last.")
    t.audio_received(500 * MS)
    t.audio_sent(1000 * MS, now=0.0)
    assert t.spoken_text(played_ms=1000) == "First. Last."


def test_stage_timings_are_measured_from_the_end_of_speech():
    t = TurnTimings(speech_end=10.0, end_of_utterance=10.3, final_transcript=10.4, brain_request=10.4,
                    first_delta=10.6, first_tts_text=10.6, first_sentence_ready=10.7, first_audio=10.75)
    assert t.stages_ms() == {"endpoint": 300, "stt": 100, "llm_ttft": 200, "first_clause": 100,
                             "tts_ttfa": 50, "voice_to_voice": 750}
    typed = TurnTimings(brain_request=1.0, first_delta=1.2, first_tts_text=1.2, first_audio=1.5)
    assert typed.stages_ms()["endpoint"] is None and typed.stages_ms()["voice_to_voice"] == 500


def tts_events(on_audio: bool) -> list[tts_pb2.SynthesizeEvent]:
    """Two sentences (1000 ms and 500 ms of audio in 500 ms chunks), each started by a
    SentenceStarted of its own or on its first chunk (``sentence_with_first_audio``), 40 ms
    after TTS began it."""
    events = []
    for index, (text, count) in enumerate([("Tuesday at ten works.", 2), ("Shall I book it for you?", 1)]):
        chunks = [tts_pb2.AudioChunk(pcm16=bytes(500 * MS), sample_rate=RATE, sentence_index=index)
                  for _ in range(count)]
        events += sentence_events(tts_pb2.SentenceStarted(index=index, text=text), chunks, on_audio,
                                  started_ms_ago=40.0)
    return events


@pytest.mark.parametrize("on_audio", [False, True], ids=["sentence-apart", "sentence-on-audio"])
async def test_sentences_started_apart_or_on_their_first_chunk_land_alike_on_the_timeline(on_audio):
    spoken, timings = SpokenTracker(RATE), TurnTimings()

    async def tts_call():
        for event in tts_events(on_audio):
            yield event

    await TurnRunner(None, None, 1.0)._pump_tts(tts_call(), "t", timings, spoken,
                                                Playout(spoken, frame_ms=20, lead_ms=100))
    assert spoken.sentences == [["Tuesday at ten works.", 0, 1000], ["Shall I book it for you?", 1000, 1500]]
    spoken.audio_sent(1500 * MS, now=0.0)  # all of it sent; the client reports 1250 ms played
    assert spoken.spoken_text(played_ms=1250) == "Tuesday at ten works. Shall I book"
    # The first sentence's start, for the first_clause and tts_ttfa stages: where TTS says it was.
    assert timings.first_sentence_ready <= timings.first_audio
    if on_audio:
        assert timings.first_audio - timings.first_sentence_ready == pytest.approx(0.040)


# ---- the paced playout, on a fake clock -----------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


class Client:
    """Records (time, frame ms) of every frame sent; ``hold`` says no while paused."""

    def __init__(self, clock: FakeClock, playout: Playout | None = None) -> None:
        self.clock, self.playout = clock, playout
        self.sent: list[tuple[float, float]] = []

    async def send(self, frame: bytes) -> bool:
        if self.playout is not None and self.playout.paused:
            return False
        self.sent.append((round(self.clock.now, 3), len(frame) / MS))
        return True


def playout(clock: FakeClock, lead_ms: int = 100) -> Playout:
    return Playout(SpokenTracker(RATE), frame_ms=20, lead_ms=lead_ms, clock=clock, sleep=clock.sleep)


async def test_playout_sends_the_lead_at_once_then_real_time():
    clock = FakeClock()
    out = playout(clock)
    client = Client(clock)
    out.feed(b"\x00" * 500 * MS)  # five 100 ms TTS chunks' worth
    out.end()
    await out.run(client.send)
    times = [t for t, _ in client.sent]
    assert len(client.sent) == 25 and all(ms == 20 for _, ms in client.sent)
    assert times[:6] == [0.0] * 6  # up to the 100 ms lead (plus the frame that crosses it)
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times[6:])]
    assert set(gaps) == {0.02}  # then one frame per 20 ms
    assert out.spoken.sent_ms == 500


async def test_a_paused_playout_holds_its_frames_and_resumes_with_the_next_one():
    clock = FakeClock()
    out = playout(clock)
    client = Client(clock, out)
    out.feed(bytes(range(256)) * (300 * MS // 256))
    sender = asyncio.create_task(out.run(client.send))
    while len(client.sent) < 8:  # noqa: ASYNC110 - stepping the fake clock's loop on purpose
        await asyncio.sleep(0)
    out.pause()
    before = len(client.sent)
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(client.sent) == before  # not one frame while paused
    out.resume()
    out.end()
    await sender
    assert out.spoken.sent_ms == pytest.approx(300 * MS // 256 * 256 / MS)  # nothing lost, nothing twice


async def test_a_stopped_playout_sends_nothing_more():
    clock = FakeClock()
    out = playout(clock)
    client = Client(clock, out)
    out.feed(b"\x00" * 1000 * MS)
    sender = asyncio.create_task(out.run(client.send))
    while len(client.sent) < 8:  # noqa: ASYNC110 - stepping the fake clock's loop on purpose
        await asyncio.sleep(0)
    out.stop()
    await sender
    sent = len(client.sent)
    out.feed(b"\x00" * 100 * MS)  # late TTS audio of the interrupted turn
    assert len(client.sent) == sent and sent < 10
