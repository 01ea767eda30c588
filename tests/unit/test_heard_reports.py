"""What the gateway tells the brain the caller heard of a reply (``previous_reply``): what was
played, measured, for every reply (failed ones too), or the text sent to a session that asked for
text only. The brain runs a read-back's action only on this report (voicebot/brain/read/confirm.py),
so every way a read-back can go unheard must show in it. Scripted upstreams, no network."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.unit.test_bargein_logic import FakeBrain, FakeCall, FakeTts, make_call, until
from tests.unit.test_gateway_failures import rpc_error
from voicebot.gateway.protocol import ProtocolError, parse_client_text
from voicebot.gateway.spoken import SpokenTracker
from voicebot.gateway.turn import TurnTimings
from voicebot.v1 import brain_pb2, tts_pb2

RATE = 16000
MS = RATE * 2 // 1000  # bytes per millisecond of PCM16
ACTION = "A table for four at seven pm under Lee."
QUESTION = "Shall I go ahead?"
READ_BACK = f"{ACTION} {QUESTION}"


class ReadBackBrain(FakeBrain):
    """Reads an action back, in two deltas, a pause of ``between_s`` apart."""

    def __init__(self, between_s: float = 0.0) -> None:
        super().__init__()
        self.between_s = between_s

    def Respond(self, request, timeout=None, metadata=None):
        self.requests.append(request)

        async def events():
            yield brain_pb2.RespondEvent(delta=brain_pb2.TextDelta(text=f"{ACTION} "))
            await asyncio.sleep(self.between_s)
            yield brain_pb2.RespondEvent(delta=brain_pb2.TextDelta(text=QUESTION))
            yield brain_pb2.RespondEvent(final=brain_pb2.Final(text=READ_BACK))

        return FakeCall(events())


class FaultyTts(FakeTts):
    """Speaks each text as one sentence of ``audio_ms``, but a text holding ``skip`` gets TTS's
    per-sentence error instead, and at one holding ``abort`` the stream fails after a chunk."""

    def __init__(self, audio_ms: int, skip: str = "", abort: str = "") -> None:
        super().__init__(audio_ms)
        self.skip, self.abort = skip, abort

    def StreamingSynthesize(self, requests, timeout=None, metadata=None):
        async def events():
            index = 0
            async for request in requests:
                if request.WhichOneof("request") != "text":
                    continue
                if self.skip and self.skip in request.text:
                    yield tts_pb2.SynthesizeEvent(error=tts_pb2.SynthesisError(sentence_index=index))
                    index += 1
                    continue
                chunks = [tts_pb2.AudioChunk(pcm16=b"\0" * (100 * MS), sentence_index=index)
                          for _ in range(self.audio_ms // 100)]
                chunks[0].sentence.CopyFrom(tts_pb2.SentenceStarted(index=index, text=request.text))
                for chunk in chunks[:1] if self.abort and self.abort in request.text else chunks:
                    yield tts_pb2.SynthesizeEvent(audio=chunk)
                if self.abort and self.abort in request.text:
                    raise rpc_error(grpc.StatusCode.UNAVAILABLE, "tts went away")
                index += 1

        call = FakeCall(events())
        self.opened.append(call)
        return call


def words(text: str) -> list[str]:
    return text.split()


def make_read_back_call(tts: FakeTts, **settings):
    """A call whose PhraseCoalescer sends the read-back as it came: one TTS text per delta."""
    brain = ReadBackBrain()
    call, ws = make_call(brain, tts, reply_first_words=0, **settings)
    return call, ws, brain


async def played_out(call) -> None:
    await until(lambda: call.turn.task.done() and not call.turn.spoken.playing())


async def test_a_reply_played_to_its_end_is_reported_whole():
    call, _ws, brain = make_read_back_call(FakeTts(audio_ms=200))
    call.start_turn("A table for four at seven, under Lee.", TurnTimings())
    await played_out(call)
    call.start_turn("Yes.", TurnTimings())
    await until(lambda: len(brain.requests) == 2)

    report = brain.requests[1].previous_reply
    assert (report.turn_id, report.text, report.interrupted) == (brain.requests[0].turn_id, READ_BACK, False)
    await call.close()


async def test_a_reply_cut_off_before_it_played_out_is_reported_as_far_as_it_was_played():
    call, ws, brain = make_read_back_call(FakeTts(audio_ms=2000))
    call.start_turn("A table for four at seven, under Lee.", TurnTimings())
    await until(lambda: ws.audio_frames() > 0)
    call.start_turn("Yes.", TurnTimings())  # typed while the read-back still plays
    await until(lambda: len(brain.requests) == 2)

    report = brain.requests[1].previous_reply
    assert report.interrupted and report.user_text == "A table for four at seven, under Lee."
    assert words(report.text) == words(ACTION)[: len(words(report.text))] != words(ACTION)
    await call.close()


async def test_a_sentence_tts_could_not_speak_is_missing_from_the_report():
    """TTS fails on the read-back's first sentence: the caller hears only the question."""
    call, _ws, brain = make_read_back_call(FaultyTts(audio_ms=200, skip="under Lee"))
    call.start_turn("A table for four at seven, under Lee.", TurnTimings())
    await played_out(call)
    call.start_turn("Yes.", TurnTimings())
    await until(lambda: len(brain.requests) == 2)

    report = brain.requests[1].previous_reply
    assert (report.text, report.interrupted) == (QUESTION, True)
    await call.close()


async def test_a_reply_whose_tts_stream_failed_is_reported_as_far_as_it_went_never_the_fallback():
    tts = FaultyTts(audio_ms=1000, abort="under Lee")
    call, ws, brain = make_read_back_call(tts)
    call.start_turn("A table for four at seven, under Lee.", TurnTimings())
    await until(lambda: "error" in ws.kinds())
    await played_out(call)  # the fallback (a chime here) has played too
    assert ws.audio_frames() > 0
    call.start_turn("Yes.", TurnTimings())
    await until(lambda: len(brain.requests) == 2)

    report = brain.requests[1].previous_reply
    assert report.interrupted and report.user_text == "A table for four at seven, under Lee."
    # 100 ms of the sentence's 1000 came before the failure: which of its words they hold is not
    # known, so none count; and the chime played after them is no words at all.
    assert report.text == ""
    await call.close()


async def test_a_new_socket_has_no_report_to_give():
    """A resumed session (another socket, a restarted gateway) never carries an earlier one's."""
    call, _ws, brain = make_read_back_call(FakeTts(audio_ms=200))
    call.start_turn("Yes.", TurnTimings())
    await until(lambda: len(brain.requests) == 1)
    assert not brain.requests[0].HasField("previous_reply")
    await call.close()


async def test_a_text_only_session_gets_no_audio_and_what_it_was_sent_is_what_was_heard():
    tts = FakeTts(audio_ms=200)
    call, ws, brain = make_read_back_call(tts)
    call.text_only = True
    call.start_turn("A table for four at seven, under Lee.", TurnTimings())
    await until(lambda: "turn.metrics" in ws.kinds())
    call.start_turn("Yes.", TurnTimings())  # at once: there is no audio to wait for
    await until(lambda: len(brain.requests) == 2)

    assert tts.opened == [] and ws.audio_frames() == 0 and "audio.start" not in ws.kinds()
    report = brain.requests[1].previous_reply
    assert (report.text, report.interrupted) == (READ_BACK, False)
    await call.close()


async def test_a_text_only_reply_cut_off_mid_stream_is_reported_as_far_as_it_was_sent():
    brain = ReadBackBrain(between_s=5.0)
    call, ws = make_call(brain, FakeTts(), reply_first_words=0)
    call.text_only = True
    call.start_turn("A table for four at seven, under Lee.", TurnTimings())
    await until(lambda: "reply.delta" in ws.kinds())
    call.start_turn("Yes.", TurnTimings())
    await until(lambda: len(brain.requests) == 2)

    report = brain.requests[1].previous_reply
    assert (report.text, report.interrupted) == (ACTION, True)
    await call.close()


def test_session_start_asks_for_text_only_or_audio():
    start = parse_client_text('{"type": "session.start", "output": "text"}', 100)
    assert start.output == "text"
    assert parse_client_text('{"type": "session.start"}', 100).output == "audio"
    with pytest.raises(ProtocolError) as refused:
        parse_client_text('{"type": "session.start", "output": "video"}', 100)
    assert refused.value.code == "bad_request"


def test_a_cut_reply_is_heard_only_as_far_as_it_was_sent():
    t = SpokenTracker(sample_rate=RATE)
    t.sentence_started(ACTION)
    t.audio_received(1000 * MS)
    t.sentence_done()
    t.audio_sent(200 * MS, now=0.0)
    t.cut()  # TTS failed: the other 800 ms are dropped
    t.audio_sent(400 * MS, now=0.2)  # the fallback sentence, on the same timeline
    assert t.heard_ms(now=10.0) == pytest.approx(200)
    assert t.spoken_text(now=10.0) == "A"
    assert not t.heard_all(now=10.0)


def test_a_sentence_whose_audio_had_not_all_come_when_tts_failed_counts_for_nothing():
    t = SpokenTracker(sample_rate=RATE)
    t.sentence_started(ACTION)
    t.audio_received(100 * MS)  # its first chunk: all of its words sit on these 100 ms
    t.audio_sent(100 * MS, now=0.0)
    t.cut()
    assert t.spoken_text(now=10.0) == ""


def test_a_skipped_sentence_means_the_reply_was_not_heard_in_full():
    t = SpokenTracker(sample_rate=RATE)
    t.sentence_started(ACTION)
    t.sentence_failed()
    t.sentence_started(QUESTION)
    t.audio_received(500 * MS)
    t.audio_sent(500 * MS, now=0.0)
    assert t.spoken_text(now=10.0) == QUESTION and not t.heard_all(now=10.0)


def test_text_past_ttss_length_cap_is_not_heard_and_the_reply_not_whole():
    t = SpokenTracker(sample_rate=RATE)
    t.sentence_started("Let me check:")
    t.audio_received(300 * MS)
    t.sentence_done()
    t.sentence_failed()  # TTS: "text over 4000 characters ignored" (sentence_index -1)
    t.audio_sent(300 * MS, now=0.0)
    assert t.spoken_text(now=10.0) == "Let me check:" and not t.heard_all(now=10.0)
