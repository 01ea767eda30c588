"""Preemptive replies in the gateway: started on the speculative transcript, committed by the final.

The gateway's Call with scripted STT events and a fake brain that speaks Converse: its words
come at once, its final only after the commit (as the real brain holds tools and history).
Calls opened at the onset (voicebot/gateway/standby.py) are stubbed out here, so every Converse
call is a preemptive one; tests/unit/test_gateway_standby.py has the two together.
"""

from __future__ import annotations

import asyncio

from tests.unit import test_bargein_logic
from tests.unit.test_bargein_logic import (
    FakeBrain,
    FakeCall,
    FakeTts,
    end_of_utterance,
    speech_started,
    transcript,
    until,
)
from voicebot.gateway.preemptive import same_words
from voicebot.v1 import brain_pb2


class ConverseBrain(FakeBrain):
    def __init__(self) -> None:
        super().__init__()
        self.early: list[brain_pb2.RespondRequest] = []
        self.committed: list[str] = []
        self.calls: list[FakeCall] = []

    def Converse(self, requests, timeout=None, metadata=None):
        async def events():
            stream = aiter(requests)
            first = await anext(stream)
            if first.WhichOneof("request") == "prepare":  # a standby's read ahead
                self.prepared.append(first.prepare)
                first = await anext(stream)
            start = first.start
            self.early.append(start)
            yield brain_pb2.RespondEvent(delta=brain_pb2.TextDelta(text="We open at noon."))
            message = await anext(stream, None)  # held here until the gateway commits
            if message is not None and message.WhichOneof("request") == "commit":
                self.committed.append(start.text)
                yield brain_pb2.RespondEvent(final=brain_pb2.Final(text="We open at noon."))

        call = FakeCall(events())
        self.calls.append(call)
        return call


def make_call(brain, tts, **settings):
    """A call whose utterances open no standby calls: every Converse call is a preemptive one."""
    call, ws = test_bargein_logic.make_call(brain, tts, **settings)
    call.speech.open_standby = lambda _utterance: None
    return call, ws


async def speak(call, utterance: int, early_text: str, final_text: str) -> None:
    await call.speech.on_stt_event(speech_started(utterance, onset_ms=1000))
    await call.speech.on_stt_event(speculative(utterance, early_text))
    await asyncio.sleep(0.05)
    await call.speech.on_stt_event(end_of_utterance(utterance, 2000))
    await call.speech.on_stt_event(transcript(utterance, final_text, 1000, 2000, final=True))


def speculative(utterance: int, text: str):
    event = transcript(utterance, text, 1000, 1900, final=False)
    event.transcript.speculative = True
    return event


async def test_the_final_with_the_same_words_commits_the_reply_started_before_it():
    brain = ConverseBrain()
    call, ws = make_call(brain, FakeTts())
    await speak(call, 0, "When do you open?", "When do you open?")
    await until(lambda: "turn.metrics" in ws.kinds())
    assert [r.text for r in brain.early] == ["When do you open?"] and brain.committed == ["When do you open?"]
    assert brain.requests == []  # no second turn was started at the endpoint
    replies = [e["text"] for e in ws.sent if isinstance(e, dict) and e["type"] == "reply.done"]
    assert replies == ["We open at noon."] and "audio.end" in ws.kinds()
    await call.close()


async def test_other_words_at_the_endpoint_discard_it_and_it_is_never_heard():
    brain = ConverseBrain()
    call, ws = make_call(brain, FakeTts())
    await speak(call, 0, "Do you have part?", "Do you have parking?")
    await until(lambda: "turn.metrics" in ws.kinds())
    assert brain.committed == [] and brain.calls[0].cancelled  # discarded
    assert [r.text for r in brain.requests] == ["Do you have parking?"]  # the turn at the endpoint
    replies = [e["text"] for e in ws.sent if isinstance(e, dict) and e["type"] == "reply.done"]
    assert replies == ["Sure, see you then."]  # nothing of the discarded start reached the caller
    await call.close()


async def test_a_new_speculative_decode_replaces_the_older_start():
    brain = ConverseBrain()
    call, ws = make_call(brain, FakeTts())
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))
    await call.speech.on_stt_event(speculative(0, "I would like"))
    await call.speech.on_stt_event(speculative(0, "I would like a table."))
    await call.speech.on_stt_event(end_of_utterance(0, 2500))
    await call.speech.on_stt_event(transcript(0, "I would like a table.", 1000, 2500, final=True))
    await until(lambda: "turn.metrics" in ws.kinds())
    assert len(brain.calls) == 2 and brain.calls[0].cancelled  # the first start was dropped
    assert brain.committed == ["I would like a table."] and brain.requests == []
    await call.close()


async def test_no_start_while_the_bot_is_still_speaking():
    brain = ConverseBrain()
    call, ws = make_call(brain, FakeTts(audio_ms=3000))
    call.start_turn("Tell me about the menu", _timings())
    await until(lambda: ws.kinds()[-1:] == ["audio"])
    await call.speech.on_stt_event(speculative(0, "Wait, stop."))
    assert brain.early == []  # a barge-in: what the caller heard is not known yet
    await call.close()


async def test_interim_words_are_sent_for_prefill_while_no_reply_is_in_the_air():
    brain = ConverseBrain()
    call, _ws = make_call(brain, FakeTts(), prefill_words=True)
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))
    await call.speech.on_stt_event(transcript(0, "Do you have", 1000, 1400, final=False))
    await call.speech.on_stt_event(transcript(0, "Do you have vegetarian", 1000, 1800, final=False))
    await until(lambda: [r.text for r in brain.prefills][-1:] == ["Do you have vegetarian"])
    sent = brain.prefills[-1]
    assert (sent.session_id, sent.user_id, sent.turn_id) == ("s_test", "alice", "")
    assert brain.requests == [] and brain.early == []  # a prefill is not a turn
    await call.close()


async def test_no_prefill_while_the_bot_is_speaking():
    brain = ConverseBrain()
    call, ws = make_call(brain, FakeTts(audio_ms=3000), prefill_words=True)
    call.start_turn("Tell me about the menu", _timings())
    await until(lambda: ws.kinds()[-1:] == ["audio"])
    await call.speech.on_stt_event(transcript(1, "Wait, what about", 5000, 5400, final=False))
    await asyncio.sleep(0.05)
    assert brain.prefills == []  # perhaps a barge-in, perhaps the bot's own echo
    await call.close()


async def test_prefill_is_off_by_default():
    brain = ConverseBrain()
    call, _ws = make_call(brain, FakeTts())
    await call.speech.on_stt_event(transcript(0, "Do you have", 1000, 1400, final=False))
    await asyncio.sleep(0.05)
    assert brain.prefills == []
    await call.close()


def test_same_words_ignores_case_and_punctuation():
    assert same_words("When do you open?", "when do you open")
    assert not same_words("Do you have part?", "Do you have parking?")


def _timings():
    from tests.unit.test_bargein_logic import _timings as timings

    return timings()


async def test_a_committed_turn_cancelled_before_its_task_ran_ends_the_early_call():
    brain = ConverseBrain()
    call, _ws = make_call(brain, FakeTts())
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))
    await call.speech.on_stt_event(speculative(0, "When do you open?"))
    await asyncio.sleep(0.05)
    await call.speech.on_stt_event(transcript(0, "When do you open?", 1000, 2000, final=True))
    call.turn.task.cancel()  # before its first step: it never commits, and runs no finally
    await asyncio.sleep(0.05)
    assert brain.calls[0].cancelled and brain.committed == []
    await call.close()
