"""Calls opened at the onset (voicebot/gateway/standby.py): when STT says speech started, the gateway
opens the brain's Converse call and the TTS stream for the turn the utterance may become; at
the endpoint the turn's request goes down them, and nothing else opens a call.

The gateway's Call with scripted STT events, and fakes that record every call opened.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.test_bargein_logic import (
    FINAL_APART_OR_INSIDE,
    FakeBrain,
    FakeTts,
    end_of_utterance,
    make_call,
    speech_started,
    transcript,
    until,
    utterance_ends,
)
from tests.unit.test_gateway_preemptive import ConverseBrain, speculative
from voicebot.gateway import standby
from voicebot.gateway.turn import TurnTimings


async def say(call, utterance: int, text: str) -> None:
    onset, end = 1000 * utterance, 1000 * utterance + 800
    await call.speech.on_stt_event(speech_started(utterance, onset_ms=onset))
    await call.speech.on_stt_event(end_of_utterance(utterance, end))
    await call.speech.on_stt_event(transcript(utterance, text, onset, end, final=True))


async def speak_up(call) -> None:
    """The first utterance's onset: the calls open (and the session is read ahead) now."""
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))


async def stop_speaking(call, text: str) -> None:
    """The first utterance's endpoint and its transcript: the turn starts."""
    await call.speech.on_stt_event(end_of_utterance(0, 1800))
    await call.speech.on_stt_event(transcript(0, text, 1000, 1800, final=True))


def replies(ws) -> list[str]:
    return [e["text"] for e in ws.sent if isinstance(e, dict) and e["type"] == "reply.done"]


@FINAL_APART_OR_INSIDE
async def test_the_calls_open_at_the_onset_and_the_turn_at_the_endpoint_uses_them(together):
    brain, tts = FakeBrain(), FakeTts()
    call, ws = make_call(brain, tts)
    await speak_up(call)
    assert len(brain.opened) == 1 and len(tts.opened) == 1  # open while the caller still speaks
    assert brain.requests == []  # ... and nothing asked yet
    await utterance_ends(call, 0, "When do you open?", 1000, 1800, together)
    await until(lambda: "turn.metrics" in ws.kinds())
    assert ws.kinds().index("transcript.final") < ws.kinds().index("reply.done")
    [metrics] = [e["ms"] for e in ws.sent if isinstance(e, dict) and e["type"] == "turn.metrics"]
    assert metrics["endpoint"] is not None and metrics["stt"] is not None  # both stages timed
    assert [r.text for r in brain.requests] == ["When do you open?"]
    assert len(brain.opened) == 1 and len(tts.opened) == 1  # no call opened at the endpoint
    assert replies(ws) == ["Sure, see you then."] and "audio" in ws.kinds()
    await call.close()


class EagerBrain(FakeBrain):
    """Takes each message of a Converse call as soon as the gateway gives it, as grpc.aio does
    (a task of the call's own reads the request iterator and writes each message), and records
    it in ``log``, which the test shares with the client's events."""

    def __init__(self, log: list[tuple[str, str]]) -> None:
        super().__init__()
        self.log = log
        self.writers: list[asyncio.Future] = []

    def Converse(self, requests, timeout=None, metadata=None):
        taken: asyncio.Queue = asyncio.Queue()

        async def write_each() -> None:
            async for message in requests:
                self.log.append(("brain", message.WhichOneof("request")))
                taken.put_nowait(message)
            taken.put_nowait(None)

        self.writers.append(asyncio.ensure_future(write_each()))  # kept: a task is weakly held

        async def messages():
            while (message := await taken.get()) is not None:
                yield message

        return super().Converse(messages())


async def test_the_turns_request_goes_to_the_brain_before_the_client_hears_transcript_final():
    """At the endpoint the brain's request is on the turn's path and the client's transcript.final
    is not: the gateway lets gRPC take the request before it writes the event (written first, it
    cost the turn a WebSocket write, and the client it woke ran ahead of the gateway)."""
    log: list[tuple[str, str]] = []
    brain = EagerBrain(log)
    call, ws = make_call(brain, FakeTts())
    emit = call.call.emit  # every stage sends its events through the call state

    async def logged(event) -> None:
        log.append(("client", event.kind))
        await emit(event)

    call.call.emit = logged
    await speak_up(call)
    await stop_speaking(call, "When do you open?")
    await until(lambda: "turn.metrics" in ws.kinds())
    assert log.index(("brain", "start")) < log.index(("client", "transcript.final"))
    assert [r.text for r in brain.requests] == ["When do you open?"]
    assert replies(ws) == ["Sure, see you then."]
    await call.close()


async def test_each_utterance_gets_its_own_calls_and_one_without_words_cancels_them():
    brain, tts = FakeBrain(), FakeTts()
    call, ws = make_call(brain, tts)
    await say(call, 0, "")  # a noise: no words, no turn
    assert brain.opened[0].cancelled and tts.opened[0].cancelled
    await say(call, 1, "A table for two.")
    await until(lambda: "turn.metrics" in ws.kinds())
    assert [r.text for r in brain.requests] == ["A table for two."]
    assert len(brain.opened) == 2 and len(tts.opened) == 2  # the second utterance's own
    assert replies(ws) == ["Sure, see you then."]
    await call.close()


async def test_calls_too_old_for_a_whole_turn_are_replaced_by_fresh_ones(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(standby, "MAX_AGE_S", 0.0)  # every standby is too old by its endpoint
    brain, tts = FakeBrain(), FakeTts()
    call, ws = make_call(brain, tts)
    await say(call, 0, "When do you open?")
    await until(lambda: "turn.metrics" in ws.kinds())
    assert brain.opened[0].cancelled and tts.opened[0].cancelled
    assert len(tts.opened) == 2  # a fresh stream at the endpoint
    assert [r.text for r in brain.requests] == ["When do you open?"]  # asked on a fresh Respond call
    assert len(brain.opened) == 1
    assert replies(ws) == ["Sure, see you then."]
    await call.close()


async def test_calls_an_upstream_already_ended_are_not_used():
    brain, tts = FakeBrain(), FakeTts()
    call, ws = make_call(brain, tts)
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))
    brain.opened[0].cancel()  # the brain restarted while the caller spoke: its call is over
    await call.speech.on_stt_event(transcript(0, "When do you open?", 1000, 1800, final=True))
    await until(lambda: "turn.metrics" in ws.kinds())
    assert tts.opened[0].cancelled and len(tts.opened) == 2
    assert replies(ws) == ["Sure, see you then."]  # the caller hears the reply all the same
    await call.close()


async def test_the_end_of_the_call_cancels_the_calls_it_held_open():
    brain, tts = FakeBrain(), FakeTts()
    call, _ws = make_call(brain, tts)
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))
    await call.close()
    assert brain.opened[0].cancelled and tts.opened[0].cancelled
    assert brain.requests == []


async def test_a_preemptive_reply_keeps_its_own_brain_call_and_speaks_on_the_open_tts_stream():
    brain, tts = ConverseBrain(), FakeTts()
    call, ws = make_call(brain, tts)
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))
    await call.speech.on_stt_event(speculative(0, "When do you open?"))
    await asyncio.sleep(0.05)
    await call.speech.on_stt_event(end_of_utterance(0, 2000))
    await call.speech.on_stt_event(transcript(0, "When do you open?", 1000, 2000, final=True))
    await until(lambda: "turn.metrics" in ws.kinds())
    standby_brain, _early_brain = brain.calls
    assert standby_brain.cancelled  # never given a request
    assert [r.text for r in brain.early] == ["When do you open?"]  # one start: the early reply's
    assert brain.committed == ["When do you open?"]
    assert len(tts.opened) == 1  # the stream opened at the onset carried the reply
    assert replies(ws) == ["We open at noon."]
    await call.close()


async def test_a_turn_on_calls_opened_ahead_still_gives_up_after_its_own_timeout():
    """The calls' deadlines run from the onset plus ``MAX_AGE_S``: the turn keeps its own bound."""
    brain, tts = FakeBrain(think_s=30), FakeTts()
    call, ws = make_call(brain, tts, turn_timeout_s=0.3)
    await say(call, 0, "When do you open?")
    await until(lambda: "error" in ws.kinds(), timeout=3)
    errors = [e for e in ws.sent if isinstance(e, dict) and e["type"] == "error"]
    assert errors[0]["code"] == "upstream_unavailable" and "assistant" in errors[0]["message"]
    await call.close()


async def test_a_turn_cancelled_before_its_task_ran_leaves_no_call_open():
    """A cancelled task that never started runs no ``finally``: its calls end by its done callback."""
    brain, tts = FakeBrain(), FakeTts()
    call, _ws = make_call(brain, tts)
    await call.speech.on_stt_event(speech_started(0, onset_ms=1000))
    await call.speech.on_stt_event(transcript(0, "When do you open?", 1000, 1800, final=True))
    call.turn.task.cancel()  # e.g. a barge-in decided in the same loop turn
    await asyncio.sleep(0.05)
    assert brain.opened[0].cancelled and tts.opened[0].cancelled
    await call.close()


# ---- the session read ahead: ``prepare`` on the call opened at the onset ----

async def test_the_call_opened_at_the_onset_has_the_brain_read_the_session_while_the_caller_speaks():
    brain, tts = FakeBrain(), FakeTts()
    call, ws = make_call(brain, tts)
    await speak_up(call)
    await until(lambda: brain.prepared)
    assert [(p.session_id, p.user_id) for p in brain.prepared] == [("s_test", "alice")]  # the auth's user
    await stop_speaking(call, "When do you open?")
    await until(lambda: "turn.metrics" in ws.kinds())
    await say(call, 1, "And on Sundays?")  # the last turn's brain call ended whole: read ahead again
    await until(lambda: len(replies(ws)) == 2)
    assert len(brain.prepared) == 2
    assert [r.text for r in brain.requests] == ["When do you open?", "And on Sundays?"]
    await call.close()


async def test_no_read_ahead_while_the_last_turn_may_still_write_the_session():
    """Speech while the brain still works on the last turn (a barge-in): that turn may yet write
    the session, so the next turn's call is opened without ``prepare`` and the brain reads the
    session when the turn starts."""
    brain, tts = FakeBrain(think_s=0.5), FakeTts()
    call, ws = make_call(brain, tts)
    await say(call, 0, "When do you open?")
    await until(lambda: len(brain.requests) == 1)
    await say(call, 1, "And on Sundays?")  # its onset while the brain still thinks
    await until(lambda: len(brain.requests) == 2 and "turn.metrics" in ws.kinds())
    assert len(brain.opened) == 2  # the second turn on the call opened at its onset ...
    assert len(brain.prepared) == 1  # ... which began with the turn's start, not a prepare
    await call.close()


async def test_a_typed_turn_while_the_caller_speaks_drops_the_read_ahead():
    brain, tts = FakeBrain(), FakeTts()
    call, ws = make_call(brain, tts)
    await speak_up(call)
    await until(lambda: brain.prepared)
    call.start_turn("Actually, make it three.", TurnTimings())  # a text message meanwhile
    assert brain.opened[0].cancelled  # its read may be older than the typed turn's write
    await stop_speaking(call, "At seven.")
    await until(lambda: len(brain.requests) == 2 and "turn.metrics" in ws.kinds())
    assert [r.text for r in brain.requests] == ["Actually, make it three.", "At seven."]
    assert len(brain.prepared) == 1 and len(brain.opened) == 1  # the turn at the endpoint: a fresh call
    await call.close()
