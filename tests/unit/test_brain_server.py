"""voicebot/brain/server.py without sockets: Converse over a fake agent."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref

from voicebot.brain.server import BrainServicer
from voicebot.v1 import brain_pb2


class SlowAgent:
    """Streams a delta every 20 ms, forever (a turn the client will discard)."""

    async def respond(self, request, committed=None, ahead=None):
        while True:
            yield brain_pb2.RespondEvent(turn_id=request.turn_id, delta=brain_pb2.TextDelta(text="word "))
            await asyncio.sleep(0.02)


class ShortAgent:
    """A turn that says two things and ends."""

    async def respond(self, request, committed=None, ahead=None):
        for text in ("Sure, ", "we open at nine."):
            yield brain_pb2.RespondEvent(turn_id=request.turn_id, delta=brain_pb2.TextDelta(text=text))


class Context:
    def invocation_metadata(self):
        return ()

    async def send_initial_metadata(self, metadata):
        pass

    async def abort(self, code, details):
        raise AssertionError(f"aborted: {code} {details}")


def start() -> brain_pb2.ConverseRequest:
    return brain_pb2.ConverseRequest(start=brain_pb2.RespondRequest(
        session_id="s", turn_id="t", user_id="u", text="hello"))


async def test_a_discarded_converse_turn_leaves_its_trace_context_cleanly(caplog):
    """Each step of the turn ran in a task of its own, so the span's context was attached in one
    task's context and detached in another's: OpenTelemetry logged "Failed to detach context"
    for every discarded preemptive turn."""
    half_closed = asyncio.Event()

    async def requests():
        yield start()
        await half_closed.wait()  # then the stream ends without a commit: a discard

    servicer = BrainServicer(SlowAgent())
    got = []
    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        async for event in servicer.Converse(requests(), Context()):
            got.append(event)
            if len(got) == 3:
                half_closed.set()
        await asyncio.sleep(0.05)
    assert len(got) == 3
    assert "Failed to detach context" not in caplog.text


async def test_a_converse_call_closed_between_events_leaves_its_trace_context_cleanly(caplog):
    async def requests():
        yield start()
        await asyncio.Event().wait()  # the client neither commits nor half-closes

    converse = BrainServicer(SlowAgent()).Converse(requests(), Context())
    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        got = [await anext(converse), await anext(converse)]
        await converse.aclose()  # grpc closes the handler (the client cancelled)
    assert len(got) == 2
    assert "Failed to detach context" not in caplog.text


async def test_a_finished_converse_turn_is_freed_without_the_cycle_collector():
    """The turn's end was a StopAsyncIteration caught in the handler: the exception's traceback
    held the handler's frame, and the frame (through its task) the exception, so every turn's
    call state waited for the cycle collector, and under load every young collection of the
    brain walked thousands of them (make bench-gateway's collector pauses show it)."""
    async def requests():
        yield start()
        yield brain_pb2.ConverseRequest(commit=brain_pb2.Commit())

    context = Context()
    freed = weakref.ref(context)
    gc.collect()
    gc.disable()
    try:
        got = [event async for event in BrainServicer(ShortAgent()).Converse(requests(), context)]
        del context
        await asyncio.sleep(0.01)  # the commit's reader, cancelled, finishes
        assert [event.delta.text for event in got] == ["Sure, ", "we open at nine."]
        assert freed() is None, "the finished turn's call state is held in a reference cycle"
    finally:
        gc.enable()
