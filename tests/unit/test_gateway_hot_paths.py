"""Fewer, larger messages without added latency: phrases to TTS, merged audio to STT, larger
reply frames; and the Origin allow-list."""

from __future__ import annotations

import asyncio
import gc
import time

import numpy as np
import pytest

from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.origin import OriginPolicy
from voicebot.gateway.phrases import PhraseCoalescer
from voicebot.gateway.playout import Playout
from voicebot.gateway.spoken import SpokenTracker
from voicebot.gateway.stt_link import AudioOutbox, Backoff, SttLink
from voicebot.v1 import stt_pb2

RATE = 16000
MS = RATE * 2 // 1000


def coalesce(deltas: list[str], max_chars: int = 160, first_words: int = 0) -> list[tuple[int, str]]:
    """(index of the delta that released it, text) for every phrase sent."""
    phrases = PhraseCoalescer(max_chars, first_words)
    out = [(i, text) for i, delta in enumerate(deltas) if (text := phrases.push(delta))]
    rest = phrases.flush()
    return [*out, (len(deltas), rest)] if rest else out


def test_a_phrase_goes_with_the_delta_that_completes_its_boundary():
    # Tokens with leading spaces (how LLMs stream): a full stop is complete at the next token
    # (" See"), a comma after a word at once: "Sure," is a clause whatever follows.
    deltas = ["Sure", ",", " I", " can", " help", ".", " See", " you", " at", " seven", "."]
    assert coalesce(deltas) == [(1, "Sure,"), (6, " I can help. See"), (11, " you at seven.")]


def test_a_comma_after_a_digit_waits_for_the_next_token():
    assert coalesce(["It costs 1", ",", "000", " dollars", ",", " yes"]) == [
        (4, "It costs 1,000 dollars,"), (6, " yes")]


def test_trailing_space_tokens_release_at_the_space():
    assert coalesce(["Sure, ", "see you ", "then. ", "Bye"]) == [(0, "Sure, "), (2, "see you then. "),
                                                                 (4, "Bye")]


def test_the_text_is_never_changed_only_grouped():
    deltas = ["It is 3", ".", "5 km", " away", " (about", " 2 miles)", ". ", "Okay", "?"]
    assert "".join(text for _, text in coalesce(deltas)) == "".join(deltas)
    assert coalesce(deltas)[0] == (6, "It is 3.5 km away (about 2 miles). ")  # "3." is not a boundary


def test_full_width_punctuation_needs_no_space_and_long_runs_are_cut():
    assert coalesce(["좋아요", "。", "내일"]) == [(1, "좋아요。"), (3, "내일")]
    assert [i for i, _ in coalesce(["word "] * 10, max_chars=20)] == [3, 7, 10]


def test_the_replys_first_words_go_on_as_each_is_complete_until_the_first_punctuation():
    deltas = ["I", "'m", " located", " about", " one", " mile", " from", " the", " station", ".",
              " It", " is", " a", " short", " walk", "."]
    sent = coalesce(deltas, first_words=8)
    # Each token with a leading space completes the word before it, and goes at once.
    assert sent[:7] == [(2, "I'm located"), (3, " about"), (4, " one"), (5, " mile"), (6, " from"),
                        (7, " the"), (8, " station")]
    # From the full stop on: phrases again.
    assert sent[7:] == [(10, ". It"), (16, " is a short walk.")]
    assert "".join(text for _, text in sent) == "".join(deltas)
    # At most first_words words one by one, then phrases.
    assert [i for i, _ in coalesce(["One"] + [" word"] * 12, first_words=3)] == [1, 2, 3, 13]


def test_tts_starts_the_first_piece_at_a_phrase_boundary_before_the_full_stop():
    """The gateway's phrases feed TTS's segmenter as configured by default: the first piece
    goes to the voice when the word after "from" arrives, not at the full stop."""
    from voicebot.tts.config import TtsSettings
    from voicebot.tts.segmenter import SentenceSegmenter

    tts = TtsSettings()
    segmenter = SentenceSegmenter(tts.max_clause_chars, tts.first_clause_chars, tts.first_clause_words,
                                  tts.first_clause_min_words)
    phrases = PhraseCoalescer(160, GatewaySettings().reply_first_words)
    deltas = ["I", "'m", " located", " about", " one", " mile", " from", " the", " train", " station", "."]
    spoken = [(i, piece) for i, delta in enumerate(deltas)
              for piece in segmenter.push(phrases.push(delta) or "")]
    assert spoken == [(7, "I'm located about one mile")]


def test_audio_waiting_for_stt_goes_as_one_message_and_contexts_keep_their_place():
    async def scenario():
        box = AudioOutbox(max_frames=100, max_bytes=1000)
        for n in range(3):
            box.put_audio(bytes([n]) * 200, 0.0)
        context = stt_pb2.UtteranceContext(utterance_index=1)
        box.put_context(context)
        box.put_audio(b"\x09" * 200, 0.0)
        assert await box.take() == [b"\x00" * 200 + b"\x01" * 200 + b"\x02" * 200]
        assert await box.take() == [context, b"\x09" * 200]
        for _ in range(7):
            box.put_audio(b"\x01" * 200, 0.0)
        assert [len(m) for m in await box.take()] == [1000]  # at most max_bytes per message
        assert [len(m) for m in await box.take()] == [400]

    asyncio.run(scenario())


def tone(rms: float, ms: int = 20) -> bytes:
    t = np.arange(ms * RATE // 1000) / RATE
    return (np.sin(2 * np.pi * 220 * t) * rms * np.sqrt(2)).astype(np.int16).tobytes()


def recorded_link(sent: list[tuple[float, int, float, float]], **kwargs) -> SttLink:
    """A link whose stream records each audio message: (time, bytes, the RMS of its loudest
    frame, and of its quietest)."""
    def open_stream(requests):
        async def events():
            async for request in requests:
                if request.WhichOneof("request") == "audio":
                    pcm = np.frombuffer(request.audio, dtype=np.int16).astype(np.float32)
                    rms = [float(np.sqrt(np.mean(f ** 2))) for f in pcm.reshape(-1, 20 * MS // 2)]
                    sent.append((time.perf_counter(), len(request.audio), max(rms), min(rms)))
            yield  # never: the link's stream ends when it closes

        return events()

    async def nothing(*_args) -> None:
        return None

    return SttLink(open_stream, stt_pb2.RecognitionConfig(sample_rate=RATE), on_event=nothing,
                   on_ended=nothing, on_down=nothing, max_frames=100, max_message_bytes=64_000, **kwargs)


@pytest.mark.parametrize(("loud_rms", "onset_waits"), [(100, False), (0, True)])
async def test_held_quiet_audio_goes_with_the_first_loud_frame(loud_rms, onset_waits):
    """While audio may wait for a message (nothing happens, or the reply plays), quiet frames are
    merged; the first frame louder than ``loud_rms`` goes at once, with the held ones before it.
    Without the gate (0) it waits like the rest: that is the latency the gate takes away."""
    sent: list[tuple[float, int, float, float]] = []
    link = recorded_link(sent, hold_ms=lambda: 100, loud_rms=loud_rms)
    quiet, loud = tone(30), tone(1000)
    assert all(link.send(quiet, time.perf_counter()) for _ in range(5))  # 100 ms: one message
    await asyncio.sleep(0.05)
    for _ in range(2):  # 40 ms of quiet: held (under 100 ms)
        link.send(quiet, time.perf_counter())
        await asyncio.sleep(0.005)
    onset_at = time.perf_counter()
    link.send(loud, onset_at)
    await asyncio.sleep(0.3)
    first_loud = next((i for i, m in enumerate(sent) if m[2] > 500), None)
    if onset_waits:
        assert first_loud is None  # 60 ms held, under the 100 the hold asks for: still waiting
    else:
        assert first_loud == 1 and sent[1][1] == 3 * 20 * MS  # at once, with the quiet it followed
        assert sent[0][1] == 5 * 20 * MS and sent[0][2] < 100
    await link.close()


@pytest.mark.parametrize("line_rms", [0, 300])
async def test_speech_waits_for_a_message_and_the_first_quiet_frame_after_it_does_not(line_rms):
    """An utterance is open: loud frames go three to a message (60 ms), and the silence after the
    words goes frame by frame at once, on a silent line and on a noisy one (its noise at RMS 300 is
    over the 100 of the gate, but within 6 dB of the line's own floor)."""
    sent: list[tuple[float, int, float, float]] = []
    link = recorded_link(sent, hold_ms=lambda: 60, loud_rms=100, speech_hold=lambda: True)
    line, speech = tone(line_rms), tone(3000)
    frame_bytes = 20 * MS
    for _ in range(3):  # the line before the words (the floor is learnt from it)
        link.send(line, time.perf_counter())
        await asyncio.sleep(0.02)
    for _ in range(9):  # 180 ms of words: three messages of 60 ms
        link.send(speech, time.perf_counter())
        await asyncio.sleep(0.02)
    link.send(line, time.perf_counter())  # the first frame of silence after them
    await asyncio.sleep(0.2)
    # Merged: each message of words alone holds at least 60 ms of them.
    words_only = [size for _, size, _, quietest in sent if quietest > 2000]
    assert 2 <= len(words_only) <= 3 and all(size >= 3 * frame_bytes for size in words_only)
    # Nothing is left waiting: the quiet frame went at once, with whatever words were still held
    # (no further frame came that could have filled a message).
    assert sum(m[1] for m in sent) == 13 * frame_bytes and sent[-1][3] == min(m[3] for m in sent)
    await link.close()


def test_a_full_outbox_refuses_and_a_tail_is_kept_while_no_stream_takes_audio():
    box = AudioOutbox(max_frames=3, max_bytes=10_000)
    assert all(box.put_audio(bytes([n]), float(n)) for n in range(3))
    assert not box.put_audio(b"x", 9.0)
    box.keep_tail(2)
    assert box.frames() == [(b"\x01", 1.0), (b"\x02", 2.0)]


async def test_a_frame_on_its_way_to_stt_leaves_nothing_for_the_cycle_collector():
    """Every audio frame waits in the outbox and is remembered for the VAD's times; kept as a
    tuple with its arrival time, each was a new object for the cycle collector, 10,000 a second
    at 200 sessions: half of what the gateway's young collections walked, one every ~0.45 s,
    4-6 ms each (make bench-gateway, a gc.callbacks probe). Now the times wait in deques of
    floats, and 2,000 frames add almost nothing to the young generation."""
    sent: list[tuple[float, int, float, float]] = []
    link = recorded_link(sent, hold_ms=lambda: 1000, loud_rms=100)
    quiet = tone(30)
    link.send(quiet, time.perf_counter())  # the stream's task and its first objects
    await asyncio.sleep(0.01)
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        for _ in range(50):  # a second held, then sent: 40 seconds of a caller's line
            for _ in range(40):
                link.send(quiet, time.perf_counter())
            await asyncio.sleep(0)
        made = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert made < 400, f"{made} new tracked objects for 2,000 frames"
    await link.close()


def test_backoff_grows_to_its_cap_with_jitter():
    backoff = Backoff(first_s=0.2, max_s=5.0)
    assert 0.1 <= backoff.delay(0) <= 0.2
    assert 0.8 <= backoff.delay(3) <= 1.6
    assert 2.5 <= backoff.delay(30) <= 5.0


@pytest.mark.parametrize(("origin", "host", "allowed"), [
    (None, "bot.example.com", True),  # the CLI, a server: no Origin header
    ("https://bot.example.com", "bot.example.com", True),  # the page the gateway serves
    ("http://127.0.0.1:5173", "bot.example.com", True),
    ("http://localhost:3000", "bot.example.com", True),
    ("http://[::1]:8080", "bot.example.com", True),
    ("https://evil.example", "bot.example.com", False),
    ("https://bot.example.com.evil.example", "bot.example.com", False),
    ("null", "bot.example.com", False),
    ("https://bot.example.com:8443", "bot.example.com", False),  # another port is another origin
])
def test_the_default_origin_policy(origin, host, allowed):
    assert OriginPolicy("self,localhost").allows(origin, host) is allowed


def test_an_explicit_origin_list():
    policy = OriginPolicy("https://app.example.com")
    assert policy.allows("https://app.example.com/", "gw.internal")
    assert not policy.allows("http://localhost:3000", "gw.internal")
    assert not policy.allows("https://gw.internal", "gw.internal")
    assert OriginPolicy("*").allows("https://anything.example", None)


# ---- reply audio in larger messages ---------------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


async def play(message_ms: int, audio_ms: int = 2000, lead_ms: int = 300) -> list[tuple[float, float, float]]:
    """(time, message ms, what the client held after it) for each message."""
    clock = FakeClock()
    spoken = SpokenTracker(RATE)
    out = Playout(spoken, frame_ms=20, lead_ms=lead_ms, clock=clock, sleep=clock.sleep, message_ms=message_ms)
    sent: list[tuple[float, float, float]] = []

    async def send(message: bytes) -> bool:
        held = spoken.buffered_ms(clock.now) + len(message) / MS
        sent.append((clock.now, len(message) / MS, held))
        return True

    out.feed(b"\x00" * audio_ms * MS)
    out.end()
    await out.run(send)
    return sent


async def test_larger_reply_messages_hold_no_more_audio_at_the_client():
    per_frame, merged = await play(message_ms=20), await play(message_ms=100)
    assert sum(ms for _, ms, _ in merged) == sum(ms for _, ms, _ in per_frame) == 2000
    assert len(merged) <= len(per_frame) / 4
    assert max(ms for _, ms, _ in merged) == 100
    # The most the client holds (what may still play after a pause) does not grow.
    assert max(held for *_, held in merged) <= max(held for *_, held in per_frame) + 1e-6
    # The first message goes at once, and the client never runs dry.
    assert merged[0][0] == 0.0
    assert min(held for t, _, held in merged if t > 0) >= 300 - 100


async def test_a_short_tail_is_not_held_back_for_a_full_message():
    sent = await play(message_ms=100, audio_ms=340)
    # The last 40 ms leave when one message per frame would have sent them, not later.
    assert [(round(t, 3), round(ms)) for t, ms, _ in sent] == [(0, 100), (0, 100), (0, 100), (0, 20),
                                                                (0.02, 20)]


def test_a_late_event_loop_refuses_new_sessions_but_one_late_wake_up_does_not():
    from voicebot.gateway.capacity import Capacity, LoopLag

    lag = LoopLag()
    capacity = Capacity(max_sessions=10, max_loop_lag_ms=20, lag=lag)
    lag._lags.extend([0.001] * 30 + [0.5])  # one 500 ms stall
    assert capacity.open() and capacity.checks()["loop_lag"]
    lag._lags.extend([0.03] * 5)  # the loop keeps running 30 ms late
    assert not capacity.open() and not capacity.checks()["loop_lag"]
    assert capacity.active == 1
    unchecked = Capacity(max_sessions=1, lag=lag)  # no lag limit: only the session cap
    assert unchecked.open() and not unchecked.open()


class FakeCpu:
    """A process clock and a wall clock the test moves: ``run(seconds, cores, sessions)``."""

    def __init__(self) -> None:
        self.now, self.cpu_s = 0.0, 0.0

    def run(self, use, seconds: float, cores: float, sessions: int) -> None:
        for _ in range(round(seconds / use.interval_s)):
            self.now += use.interval_s
            self.cpu_s += use.interval_s * cores
            use.sample(sessions)


def test_a_gateway_near_its_cpu_limit_refuses_callers_arriving_together_before_their_audio_costs():
    from voicebot.gateway.capacity import Capacity, CpuUse

    clock = FakeCpu()
    use = CpuUse(read=lambda: clock.cpu_s, clock=lambda: clock.now, window_s=2.0, interval_s=0.25)
    capacity = Capacity(max_sessions=400, max_cores=0.6, cpu=use)
    # Ten sessions at 0.05 cores: too few to say what one costs; the process is far below the limit.
    for _ in range(10):
        assert capacity.open()
    clock.run(use, 2.0, cores=0.05, sessions=10)
    assert use.per_session() is None and capacity.checks()["cpu"]
    # 100 sessions at 0.4 cores: 0.004 a session. A burst of callers is taken up to 0.6 / 0.004.
    for _ in range(90):
        assert capacity.open()
    clock.run(use, 2.0, cores=0.4, sessions=100)
    assert abs(use.per_session() - 0.004) < 1e-9
    admitted = 0
    while capacity.open():
        admitted += 1
    assert capacity.active == 150 and admitted == 50 and not capacity.checks()["cpu"]
    # Over the limit already (other work in the process): nobody is taken, whatever the estimate.
    capacity.close()
    clock.run(use, 2.0, cores=0.7, sessions=149)
    assert not capacity.open() and capacity.active == 149
    # Sessions that end free their CPU: once measured below the limit, callers are taken again.
    for _ in range(99):
        capacity.close()
    clock.run(use, 2.0, cores=0.2, sessions=50)
    assert capacity.open()


def test_without_a_cpu_limit_only_the_session_cap_counts():
    from voicebot.gateway.capacity import Capacity, CpuUse

    clock = FakeCpu()
    use = CpuUse(read=lambda: clock.cpu_s, clock=lambda: clock.now)
    clock.run(use, 2.0, cores=3.0, sessions=1)
    capacity = Capacity(max_sessions=2, cpu=use)
    assert capacity.open() and capacity.open() and not capacity.open()
    assert capacity.checks()["cpu"]


def test_the_arrival_of_a_stream_time_is_that_of_the_frame_holding_it():
    """The endpoint's speech end is dated by the frame that carried it: the oldest frame whose
    end is at or after that stream time. Before any frame, or past the last, it is now."""
    async def scenario():
        link = recorded_link([])
        before = time.perf_counter()
        assert link.arrival_of(0) >= before  # nothing received yet
        frame = bytes(20 * MS)  # 20 ms of PCM16
        for n in range(200):  # 4 s of audio, frame n received at 100 + n
            link._stamp(len(frame), 100.0 + n)
        assert link.arrival_of(0) == 100.0
        assert link.arrival_of(20) == 100.0  # the first frame's end
        assert link.arrival_of(21) == 101.0
        assert link.arrival_of(3_990) == 299.0  # within the last frame
        assert link.arrival_of(4_000) == 299.0
        assert link.arrival_of(4_001) >= before  # not received yet: now

    asyncio.run(scenario())


@pytest.mark.parametrize(("line_rms", "voice_rms", "at_once"), [
    (2, 60, True),    # a soft voice (under the gate's RMS 100) on a quiet line: 30 dB above it
    (30, 60, False),  # the same voice on a line with noise at RMS 30: only 6 dB above, held
    (0, 5, False),    # near-silence on a digital line is never an onset
])
async def test_a_soft_voice_well_above_a_quiet_line_ends_the_hold_too(line_rms, voice_rms, at_once):
    """Quiet audio waits up to a second for a message; an onset must not. A frame 12 dB above
    the quietest of the line's last second ends the hold like a loud one, so a soft-spoken caller
    on a quiet line is heard at once; on a noisier line the same level is the line's noise."""
    sent: list[tuple[float, int, float, float]] = []
    link = recorded_link(sent, hold_ms=lambda: 1000, loud_rms=100)
    for _ in range(10):  # 200 ms of the line: held (under the 1000 ms the hold asks for)
        link.send(tone(line_rms), time.perf_counter())
        await asyncio.sleep(0.005)
    link.send(tone(voice_rms), time.perf_counter())
    await asyncio.sleep(0.3)
    if at_once:
        assert len(sent) == 1 and sent[0][1] == 11 * 20 * MS  # the voice, with the line held before it
    else:
        assert sent == []  # still held: nothing in it is an onset
    await link.close()
