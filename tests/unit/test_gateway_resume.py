"""One turn until the caller has heard the reply (voicebot/gateway/resume.py, turn_driver.py), on a
conversation with a fake brain and TTS and scripted STT events: a pause that ended an utterance
is not the end of the turn while the reply is unheard; after it was heard, speech is a barge-in;
a turn that may have written is never sent again; and cancelled replies are bounded."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from tests.unit.test_bargein_logic import (
    FakeBrain,
    FakeCall,
    FakeTts,
    end_with_final,
    make_call,
    speech_started,
    transcript,
    until,
)
from voicebot.v1 import brain_pb2

# Long enough that a loaded 2-core machine scripts the next utterance well within it.
THINK_S = 1.0


def counted(name: str) -> float:
    return REGISTRY.get_sample_value(f"voicebot_gateway_{name}_total") or 0.0


class ConfirmingBrain(FakeBrain):
    """Asks for a yes after ``asks`` (the brain's dialog state "confirm"), as before a write."""

    def __init__(self, asks: str, think_s: float = 0.0) -> None:
        super().__init__(think_s)
        self.asks = asks

    def Respond(self, request, timeout=None, metadata=None):
        if request.text != self.asks:
            return super().Respond(request, timeout, metadata)
        self.requests.append(request)

        async def events():
            yield brain_pb2.RespondEvent(delta=brain_pb2.TextDelta(text="Shall I book it?"))
            final = brain_pb2.Final(text="Shall I book it?", dialog_state="confirm")
            yield brain_pb2.RespondEvent(final=final)

        return FakeCall(events())


async def says(call, utterance: int, text: str, start_ms: int) -> None:
    """An utterance: its onset, a partial with its words, then the endpoint with its final."""
    end_ms = start_ms + 800
    await call.speech.on_stt_event(speech_started(utterance, start_ms))
    await call.speech.on_stt_event(transcript(utterance, text, start_ms, end_ms - 100, final=False))
    await call.speech.on_stt_event(end_with_final(utterance, text, start_ms, end_ms))


def finals(ws) -> list[str]:
    return [e["text"] for e in ws.sent if isinstance(e, dict) and e["type"] == "transcript.final"]


async def test_speech_resumed_before_the_reply_was_heard_cancels_it_and_one_turn_answers_both_parts():
    brain, tts = FakeBrain(think_s=THINK_S), FakeTts(audio_ms=300)
    call, ws = make_call(brain, tts)
    cancelled, resumed = counted("replies_cancelled_unheard"), counted("resumed_turns")
    await says(call, 0, "Could we come on Friday,", 0)
    await until(lambda: len(brain.requests) == 1)  # the reply is being made: nothing heard yet
    await says(call, 1, "or maybe Saturday evening?", 1500)
    await until(lambda: "turn.metrics" in ws.kinds())

    assert [r.text for r in brain.requests] == ["Could we come on Friday,",
                                                "Could we come on Friday, or maybe Saturday evening?"]
    assert finals(ws)[-1] == "Could we come on Friday, or maybe Saturday evening?"
    assert ws.kinds().count("audio.start") == 1 and "interrupt" not in ws.kinds()  # one reply heard
    assert counted("replies_cancelled_unheard") == cancelled + 1
    assert counted("resumed_turns") == resumed + 1
    await call.close()


async def test_speech_after_some_of_the_reply_was_heard_is_a_barge_in_not_the_same_turn():
    brain, tts = FakeBrain(), FakeTts(audio_ms=1000)
    call, ws = make_call(brain, tts)
    cancelled = counted("replies_cancelled_unheard")
    await says(call, 0, "When do you open?", 0)
    await until(lambda: call.turn is not None and call.turn.heard_any(time.perf_counter()))
    await says(call, 1, "And on Sundays?", 1500)
    await until(lambda: ws.kinds().count("turn.metrics") == 1 and len(brain.requests) == 2)

    assert [r.text for r in brain.requests] == ["When do you open?", "And on Sundays?"]
    assert "interrupt" in ws.kinds()
    assert counted("replies_cancelled_unheard") == cancelled
    await call.close()


async def test_a_turn_answering_a_question_for_a_yes_is_never_sent_again_when_speech_resumes():
    """The brain writes only after a yes: a "Yes." turn may have written by the time the caller
    goes on, so its words are not sent again with theirs (the write would run twice)."""
    brain = ConfirmingBrain("A table for four at seven.", think_s=THINK_S)
    call, ws = make_call(brain, FakeTts(audio_ms=300))
    await says(call, 0, "A table for four at seven.", 0)
    await until(lambda: "turn.metrics" in ws.kinds())
    cancelled = counted("replies_cancelled_unheard")
    await says(call, 1, "Yes.", 3000)
    await until(lambda: len(brain.requests) == 2)  # thinking on the yes
    await says(call, 2, "And a high chair, please.", 4000)
    await until(lambda: len(brain.requests) == 3 and ws.kinds().count("turn.metrics") == 2)

    assert [r.text for r in brain.requests] == ["A table for four at seven.", "Yes.",
                                                "And a high chair, please."]
    assert counted("replies_cancelled_unheard") == cancelled
    await call.close()


@pytest.mark.parametrize(("interval_s", "cancelled_unheard"), [(30.0, 1), (0.0, 2)])
async def test_a_caller_who_keeps_resuming_gets_one_cancelled_reply_per_interval_then_replies_go_out(
        interval_s, cancelled_unheard):
    brain, tts = FakeBrain(think_s=THINK_S), FakeTts(audio_ms=300)
    call, ws = make_call(brain, tts, resume_min_interval_s=interval_s)
    cancelled, kept = counted("replies_cancelled_unheard"), counted("replies_kept_unheard")
    await says(call, 0, "I would like", 0)
    await until(lambda: len(brain.requests) == 1)
    await says(call, 1, "a table.", 1500)  # resumed: the first reply is cancelled unheard
    await until(lambda: len(brain.requests) == 2)
    await says(call, 2, "For two.", 3000)  # resumed again while the joined turn is thinking
    await until(lambda: "turn.metrics" in ws.kinds())

    assert counted("replies_cancelled_unheard") == cancelled + cancelled_unheard
    texts = [r.text for r in brain.requests]
    if cancelled_unheard == 1:  # the second reply went out, and the last final waited for it
        assert counted("replies_kept_unheard") == kept + 1
        assert texts == ["I would like", "I would like a table.", "For two."]
        assert finals(ws) == ["I would like", "I would like a table.", "For two."]
        events = [e for e in ws.sent if isinstance(e, dict)]
        first_audio = next(i for i, e in enumerate(events) if e["type"] == "audio.start")
        last_final = next(i for i, e in enumerate(events) if e["type"] == "transcript.final"
                          and e["text"] == "For two.")
        assert first_audio < last_final  # the caller heard the kept reply before the next turn
    else:
        assert texts == ["I would like", "I would like a table.", "I would like a table. For two."]
    await call.close()
