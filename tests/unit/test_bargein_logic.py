"""Barge-in: the pure detector as a table of cases (events in, decisions out, a clock passed in),
then a few whole-call scenarios with scripted STT events and fake brain/TTS calls (no network).

The integration tests (tests/integration/test_bargein.py) run the same logic against the real
services; here the cases that real audio cannot make deterministic.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest
from starlette.websockets import WebSocketState

from tests.fakes.speech_servers import sentence_events
from voicebot.gateway.bargein import Action, BargeInDetector, Rules, spoken_words
from voicebot.gateway.codec_v1 import V1Codec
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.conversation import Conversation
from voicebot.gateway.protocol import SessionStart
from voicebot.gateway.stt_link import DEFAULT_HOLDS, Holds
from voicebot.gateway.transport import Transport
from voicebot.gateway.turn import TurnTimings
from voicebot.v1 import brain_pb2, stt_pb2, tts_pb2

RATE = 16000
FRAME = b"\0" * (RATE * 20 // 1000 * 2)

# ---- the detector, as a table --------------------------------------------------------------
# Each step: (event, expected action[, expected reason]). Times: "t" is the clock in seconds,
# "rx" the stream ms received so far. Rules: 600 ms of speech, words over 200 ms.


@dataclass(frozen=True)
class Started:
    utterance: int = 0
    onset_ms: int = 1000
    audible: str | None = "t1"
    rx: int = 1100
    t: float = 10.0


@dataclass(frozen=True)
class Text:
    text: str
    start_ms: int = 1000
    end_ms: int = 1500
    final: bool = False
    utterance: int = 0


@dataclass(frozen=True)
class Ended:
    utterance: int = 0


@dataclass(frozen=True)
class Audio:
    rx: int
    t: float


@dataclass(frozen=True)
class SttGone:
    pass


P, C, R, NO = Action.PAUSE, Action.CONFIRM, Action.RESUME, Action.IGNORE

CASES = {
    "speech while nothing is audible is not a barge-in": [
        (Started(audible=None), NO), (Text("stop that please"), NO), (Audio(rx=5000, t=20.0), NO)],
    "speech over the reply pauses it": [(Started(), P)],
    "a partial with words confirms": [(Started(), P), (Text("make it three"), C, "partial")],
    "a filler partial does not confirm, its final resumes": [
        (Started(), P), (Text("Uh", end_ms=1400), NO), (Ended(), NO),
        (Text("Uh.", final=True), R, "false_start")],
    "words over too little speech are a click": [
        (Started(), P), (Text("Up.", end_ms=1100), NO),
        (Text("Up.", end_ms=1100, final=True), R, "false_start")],
    "words in the final confirm even after the utterance ended": [
        (Started(), P), (Ended(), NO), (Text("No.", end_ms=1300, final=True), C, "final")],
    "an empty final is a false start": [(Started(), P), (Ended(), NO), (Text("", final=True), R)],
    "long enough in stream and wall time confirms": [
        (Started(t=10.0, rx=1100), P), (Audio(rx=1400, t=10.3), NO),
        (Audio(rx=1620, t=10.52), C, "min_speech")],
    "a burst of audio is not long enough by itself": [
        # 900 ms of stream at once, but STT has judged only 150 ms of it (+100 it ran behind).
        (Started(t=10.0, rx=1100), P), (Audio(rx=2000, t=10.05), NO), (Audio(rx=2020, t=10.45), NO),
        (Audio(rx=2040, t=10.51), C, "min_speech")],
    "STT running behind counts towards the wall time": [
        # SpeechStarted came 400 ms of stream after the onset: 200 ms of wall time suffice.
        (Started(onset_ms=1000, rx=1400, t=10.0), P), (Audio(rx=1600, t=10.21), C, "min_speech")],
    "an ended utterance is not confirmed by its length": [
        (Started(), P), (Ended(), NO), (Audio(rx=9000, t=99.0), NO)],
    "another utterance's events are ignored": [
        (Started(utterance=1), P), (Text("make it three", utterance=2), NO), (Ended(utterance=2), NO),
        (Audio(rx=1620, t=10.6), C, "min_speech")],
    "the STT stream ending resumes a paused reply": [(Started(), P), (SttGone(), R, "stt_ended")],
    "nothing pending, the STT stream ending is nothing": [(SttGone(), NO)],
    "a decision is taken once": [(Started(), P), (Text("wait"), C), (Text("wait a moment"), NO)],
    "a second onset replaces the first": [
        (Started(utterance=0), P), (Started(utterance=1, onset_ms=2000, rx=2100, t=11.0), P),
        (Text("Uh.", final=True, utterance=0), NO), (Text("hold on", utterance=1), C, "partial")],
}


def step(detector: BargeInDetector, event):
    if isinstance(event, Started):
        return detector.speech_started(event.utterance, event.onset_ms, audible_turn=event.audible,
                                       received_ms=event.rx, now=event.t)
    if isinstance(event, Text):
        return detector.transcript(event.utterance, event.text, event.start_ms, event.end_ms, event.final)
    if isinstance(event, Ended):
        return detector.end_of_utterance(event.utterance)
    if isinstance(event, Audio):
        return detector.audio(event.rx, event.t)
    return detector.stt_ended()


@pytest.mark.parametrize("steps", CASES.values(), ids=CASES.keys())
def test_barge_in_decisions(steps):
    detector = BargeInDetector(Rules(min_speech_ms=600, min_words_ms=200))
    for index, (event, action, *reason) in enumerate(steps):
        decision = step(detector, event)
        assert decision.action is action, f"step {index}: {event}"
        if reason:
            assert decision.reason == reason[0], f"step {index}: {event}"
        if action is not Action.IGNORE:
            assert decision.pending is not None and decision.pending.turn_id == "t1"


def test_a_cleared_detector_forgets_the_pending_barge_in():
    detector = BargeInDetector(Rules())
    assert step(detector, Started()).action is Action.PAUSE
    detector.clear()  # a new turn took over
    assert step(detector, Text("make it three")).action is Action.IGNORE
    assert detector.stt_ended().action is Action.IGNORE


@pytest.mark.parametrize(("text", "words"), [
    ("Uh.", []), ("Mm-hmm", ["mm-hmm"]), ("Hmm, uh", []), ("No!", ["no"]), ("Um, wait", ["wait"]),
])
def test_fillers_are_not_words(text, words):
    assert spoken_words(text) == words


# ---- whole calls, scripted STT events ------------------------------------------------------

class FakeWebSocket:
    application_state = WebSocketState.CONNECTED

    def __init__(self) -> None:
        self.sent: list[dict | int] = []  # events, or the byte count of an audio frame

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(len(data))

    def audio_frames(self) -> int:
        return sum(isinstance(item, int) for item in self.sent)

    def kinds(self) -> list[str]:
        out: list[str] = []
        for item in self.sent:
            kind = "audio" if isinstance(item, int) else item["type"]
            if not (kind == "audio" and out and out[-1] == "audio"):
                out.append(kind)
        return out


class FakeCall:
    """An async-iterable gRPC call that can be cancelled."""

    def __init__(self, events, on_cancel=None) -> None:
        self._events = events
        self._on_cancel = on_cancel
        self.cancelled = False

    def __aiter__(self):
        return self._events.__aiter__()

    def cancel(self) -> None:
        self.cancelled = True
        if self._on_cancel is not None:
            self._on_cancel()

    def done(self) -> bool:
        return self.cancelled


class FakeBrain:
    def __init__(self, think_s: float = 0.0) -> None:
        self.requests: list[brain_pb2.RespondRequest] = []
        self.prefills: list[brain_pb2.RespondRequest] = []
        self.think_s = think_s
        self.opened: list[FakeCall] = []  # Converse calls, in the order they were opened
        self.prepared: list[brain_pb2.Prepare] = []  # sessions read ahead, in order

    def Converse(self, requests, timeout=None, metadata=None):
        """A turn on a call opened before its request (voicebot/gateway/standby.py): started and committed
        at once, it runs as ``Respond``; a call cancelled before its start runs nothing. Its
        first message is taken at once, as gRPC sends it: a ``prepare`` (the session read
        ahead) is recorded in ``prepared`` then."""
        stream = aiter(requests)
        first_message = asyncio.ensure_future(anext(stream, None))
        first_message.add_done_callback(self._note_prepare)

        async def events():
            first = await first_message
            if first is not None and first.WhichOneof("request") == "prepare":
                first = await anext(stream, None)
            commit = await anext(stream, None)
            if first is None or commit is None or commit.WhichOneof("request") != "commit":
                return
            async for event in self.Respond(first.start):
                yield event

        call = FakeCall(events(), on_cancel=first_message.cancel)
        self.opened.append(call)
        return call

    def _note_prepare(self, first: asyncio.Future) -> None:
        if not first.cancelled() and first.exception() is None and first.result() is not None \
                and first.result().WhichOneof("request") == "prepare":
            self.prepared.append(first.result().prepare)

    async def Prefill(self, request, timeout=None, metadata=None):
        self.prefills.append(request)
        return brain_pb2.PrefillResult(started=True)

    def Respond(self, request, timeout=None, metadata=None):
        self.requests.append(request)

        async def events():
            await asyncio.sleep(self.think_s)
            for word in ("Sure, ", "see you then."):
                yield brain_pb2.RespondEvent(delta=brain_pb2.TextDelta(text=word))
            yield brain_pb2.RespondEvent(final=brain_pb2.Final(text="Sure, see you then."))

        return FakeCall(events())


class FakeTts:
    """Speaks each text delta as one sentence of ``audio_ms`` (100 ms chunks)."""

    def __init__(self, audio_ms: int = 600) -> None:
        self.audio_ms = audio_ms
        self.opened: list[FakeCall] = []

    def StreamingSynthesize(self, requests, timeout=None, metadata=None):
        async def events():
            index, on_audio = 0, False
            async for request in requests:
                if request.WhichOneof("request") == "config":
                    on_audio = request.config.sentence_with_first_audio
                    continue
                chunks = [tts_pb2.AudioChunk(pcm16=b"\0" * (RATE // 10 * 2), sample_rate=RATE,
                                             sentence_index=index) for _ in range(self.audio_ms // 100)]
                started = tts_pb2.SentenceStarted(index=index, text=request.text)
                for event in sentence_events(started, chunks, on_audio):
                    yield event
                index += 1

        call = FakeCall(events())
        self.opened.append(call)
        return call


class FakeStt:
    """Takes the audio and says nothing: the STT events of these tests are scripted."""

    def StreamingRecognize(self, requests, timeout=None, metadata=None):
        async def events():
            async for _request in requests:
                pass
            if False:  # an async generator that yields nothing
                yield

        return events()


class FakeUpstreams:
    def __init__(self, brain: FakeBrain, tts: FakeTts) -> None:
        self.brain, self.tts, self.stt = brain, tts, FakeStt()

    async def reconnected(self, _name: str) -> None:
        """No channel to watch: a down STT link waits out its backoff (as Upstreams does while up)."""
        await asyncio.Event().wait()


def make_call(brain: FakeBrain, tts: FakeTts, holds: Holds = DEFAULT_HOLDS,
              **settings) -> tuple[Conversation, FakeWebSocket]:
    """A conversation on protocol v1 over a fake socket, its session open."""
    ws = FakeWebSocket()
    config = GatewaySettings(tokens="t=alice", playback_lead_ms=100, **settings)
    call = Conversation(Transport(ws, V1Codec(config)), "alice", config, FakeUpstreams(brain, tts),
                        sessions=None, holds=holds)
    call.session, call.session_id = SessionStart(None, "en", RATE), "s_test"
    return call, ws


def speech_started(utterance: int, onset_ms: int) -> stt_pb2.RecognizeEvent:
    return stt_pb2.RecognizeEvent(utterance_index=utterance,
                                  speech_started=stt_pb2.SpeechStarted(offset_ms=onset_ms))


def transcript(utterance: int, text: str, start_ms: int, end_ms: int, final: bool) -> stt_pb2.RecognizeEvent:
    return stt_pb2.RecognizeEvent(utterance_index=utterance, transcript=stt_pb2.Transcript(
        text=text, is_final=final, start_ms=start_ms, end_ms=end_ms))


def end_of_utterance(utterance: int, end_ms: int) -> stt_pb2.RecognizeEvent:
    return stt_pb2.RecognizeEvent(utterance_index=utterance,
                                  end_of_utterance=stt_pb2.EndOfUtterance(end_ms=end_ms, reason="silence"))


def end_with_final(utterance: int, text: str, start_ms: int, end_ms: int) -> stt_pb2.RecognizeEvent:
    """The EndOfUtterance with its final inside (what the gateway asks STT for by default)."""
    event = end_of_utterance(utterance, end_ms)
    final = transcript(utterance, text, start_ms, end_ms, final=True)
    event.end_of_utterance.final.CopyFrom(final.transcript)
    return event


async def utterance_ends(call, utterance: int, text: str, start_ms: int, end_ms: int, together: bool) -> None:
    """STT's endpoint: the final inside the EndOfUtterance (``together``), or right after it."""
    if together:
        await call.speech.on_stt_event(end_with_final(utterance, text, start_ms, end_ms))
        return
    await call.speech.on_stt_event(end_of_utterance(utterance, end_ms))
    await call.speech.on_stt_event(transcript(utterance, text, start_ms, end_ms, final=True))


# The two ways STT may send the endpoint's final: the gateway must do the same with either.
FINAL_APART_OR_INSIDE = pytest.mark.parametrize("together", [False, True],
                                                ids=["final-apart", "final-inside"])


async def until(check, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():  # noqa: ASYNC110 - polling a fake's records
            await asyncio.sleep(0.005)


async def test_speech_while_the_bot_thinks_holds_the_reply_and_joins_the_two_parts():
    brain = FakeBrain(think_s=0.2)
    call, ws = make_call(brain, FakeTts())
    call.start_turn("Actually", _timings(), transcribed=True)
    await until(lambda: len(brain.requests) == 1)  # the brain is thinking
    await call.speech.on_stt_event(speech_started(1, onset_ms=3000))
    await call.speech.on_stt_event(transcript(1, "make it three", 3000, 3500, final=False))
    await call.speech.on_stt_event(end_of_utterance(1, 4000))
    await call.speech.on_stt_event(transcript(1, "make it three people.", 3000, 4000, final=True))
    await until(lambda: "turn.metrics" in ws.kinds())

    assert [r.text for r in brain.requests] == ["Actually", "Actually make it three people."]
    assert "interrupt" not in ws.kinds()  # nothing of the first reply was ever sent
    finals = [e["text"] for e in ws.sent if isinstance(e, dict) and e["type"] == "transcript.final"]
    assert finals == ["Actually", "Actually make it three people."]
    assert brain.requests[1].previous_reply.interrupted and brain.requests[1].previous_reply.text == ""
    await call.close()


@FINAL_APART_OR_INSIDE
async def test_a_filler_while_the_bot_speaks_pauses_it_and_then_it_goes_on(together):
    brain = FakeBrain()
    call, ws = make_call(brain, FakeTts(audio_ms=700))
    call.start_turn("When do you open?", _timings())
    await until(lambda: ws.kinds()[-1:] == ["audio"])
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))
    frames = ws.audio_frames()
    await call.speech.on_stt_event(transcript(0, "Uh", 1000, 1400, final=False))  # a filler: no words
    await asyncio.sleep(0.3)
    assert ws.audio_frames() == frames  # not one frame while it is being judged
    await utterance_ends(call, 0, "Up.", 1000, 1100, together)  # words, but 100 ms of them
    await until(lambda: "turn.metrics" in ws.kinds())

    assert "interrupt" not in ws.kinds() and "transcript.final" not in ws.kinds()
    assert len(brain.requests) == 1
    frames = [n for n in ws.sent if isinstance(n, int)]
    assert sum(frames) == 2 * 700 * RATE * 2 // 1000  # both sentences whole, each frame once
    await call.close()


def written_together(call: Conversation) -> list[list[str]]:
    """Records what the call sends together (one write to the socket under the real server) as
    kinds; declines, so the fake socket still gets each message."""
    batches: list[list[str]] = []

    def together(messages: list[str | bytes]) -> bool:
        batches.append(["audio" if isinstance(m, bytes) else json.loads(m)["type"] for m in messages])
        return False

    call.out._together = together
    return batches


async def test_a_replys_audio_start_goes_out_together_with_its_first_frame():
    call, ws = make_call(FakeBrain(), FakeTts(audio_ms=300))
    batches = written_together(call)
    call.start_turn("When do you open?", _timings())
    await until(lambda: "turn.metrics" in ws.kinds())

    assert ws.kinds()[ws.kinds().index("audio.start") + 1] == "audio"
    assert [batch for batch in batches if "audio.start" in batch] == [["audio.start", "audio"]]
    await call.close()


async def test_a_reply_paused_before_its_first_frame_announces_its_audio_only_with_that_frame():
    brain = FakeBrain(think_s=0.1)
    call, ws = make_call(brain, FakeTts(audio_ms=300))
    batches = written_together(call)
    call.start_turn("When do you open?", _timings())
    await until(lambda: len(brain.requests) == 1)  # the brain is thinking
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))  # the reply is paused
    await until(lambda: call.turn.spoken.received_ms >= 300)  # made meanwhile, and held
    await asyncio.sleep(0.05)
    assert call.turn.playout.paused
    assert "audio.start" not in ws.kinds() and ws.audio_frames() == 0
    await call.speech.on_stt_event(transcript(0, "Uh", 1000, 1400, final=False))
    await utterance_ends(call, 0, "Up.", 1000, 1100, together=True)  # a false start: it goes on
    await until(lambda: "turn.metrics" in ws.kinds())

    assert "interrupt" not in ws.kinds() and len(brain.requests) == 1
    assert ws.kinds()[ws.kinds().index("audio.start") + 1] == "audio"
    assert [batch for batch in batches if "audio.start" in batch] == [["audio.start", "audio"]]
    await call.close()


async def test_speech_that_goes_on_is_confirmed_by_its_length_not_by_a_burst_of_audio():
    call, ws = make_call(FakeBrain(), FakeTts(audio_ms=3000), barge_in_min_speech_ms=400)
    call.start_turn("When do you open?", _timings())
    await until(lambda: ws.kinds()[-1:] == ["audio"])
    await call.speech.on_audio(FRAME)
    await call.speech.on_stt_event(speech_started(0, onset_ms=0))
    for _ in range(40):  # 800 ms of audio at once: ahead of what STT can have judged
        await call.speech.on_audio(FRAME)
    assert "interrupt" not in ws.kinds()
    await asyncio.sleep(0.45)
    await call.speech.on_audio(FRAME)
    assert ws.kinds()[-1] == "interrupt"
    frames = ws.audio_frames()
    await asyncio.sleep(0.2)
    assert ws.audio_frames() == frames  # the interrupted turn sends nothing more
    assert call.previous_reply.interrupted and call.turn.task.done()
    await call.close()


@FINAL_APART_OR_INSIDE
async def test_words_over_enough_speech_confirm_even_after_the_utterance_ended(together):
    brain = FakeBrain()
    call, ws = make_call(brain, FakeTts(audio_ms=3000))
    call.start_turn("When do you open?", _timings())
    await until(lambda: ws.kinds()[-1:] == ["audio"])
    await call.speech.on_stt_event(speech_started(0, onset_ms=500))
    await utterance_ends(call, 0, "No.", 500, 800, together)
    await until(lambda: len(brain.requests) == 2)
    kinds = ws.kinds()
    assert kinds.index("interrupt") < kinds.index("transcript.final")
    assert brain.requests[1].text == "No." and brain.requests[1].previous_reply.interrupted
    await call.close()


def _timings() -> TurnTimings:
    return TurnTimings()


async def test_stt_audio_waits_for_a_message_only_while_nothing_but_an_onset_depends_on_it():
    call, _ws = make_call(FakeBrain(think_s=0.1), FakeTts(audio_ms=300),
                          holds=Holds(idle_ms=100, playback_ms=60, speech_ms=40))
    assert call.speech.stt_hold_ms() == 100  # nothing happens
    await call.speech.on_stt_event(speech_started(0, onset_ms=0))
    # An utterance is open: its loud frames may wait 40 ms (the link sends a quiet one at once).
    assert call.speech.stt_hold_ms() == 40
    await call.speech.on_stt_event(end_of_utterance(0, 600))
    await call.speech.on_stt_event(transcript(0, "When do you open?", 0, 600, final=True))
    assert call.speech.stt_hold_ms() == 0  # the reply is being made: speech now would hold it back
    await until(lambda: call.turn.spoken.sent_ms > 0)
    assert call.speech.stt_hold_ms() == 60  # it plays: only a barge-in's pause waits on the audio
    await call.speech.on_stt_event(speech_started(1, onset_ms=900))
    assert call.speech.stt_hold_ms() == 40
    await call.close()
    ungated, _ws = make_call(FakeBrain(), FakeTts(), holds=Holds(speech_ms=40, loud_rms=0))
    await ungated.speech.on_stt_event(speech_started(0, onset_ms=0))
    assert ungated.speech.stt_hold_ms() == 0  # no loudness gate: nothing could end a hold on speech
    await ungated.close()
