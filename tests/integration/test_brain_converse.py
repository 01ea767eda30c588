"""Brain.Converse over real gRPC: a preemptive turn is committed by a message, or discarded.

The brain process of the shared ``services`` fixture (scripted LLM), a real redis-server.
"""

from __future__ import annotations

import asyncio
import random
import uuid

import grpc
import pytest
import redis.asyncio as aioredis

from voicebot.brain.runtime.session_store import SessionStore, Turn
from voicebot.common.internal_auth import internal_channel
from voicebot.v1 import brain_pb2, brain_pb2_grpc

pytestmark = pytest.mark.integration
# The test stack's FAQ answer to "When do you open?" (tests/fakes/profiles/stack.yaml).
OPEN = "We open at noon and close at ten in the evening."


def start(session: str, text: str) -> brain_pb2.ConverseRequest:
    return brain_pb2.ConverseRequest(start=brain_pb2.RespondRequest(
        session_id=session, turn_id="t1", user_id="alice", text=text))


async def stored_turns(redis_url: str, session: str) -> list:
    redis = aioredis.Redis.from_url(redis_url)
    try:
        return (await SessionStore(redis, 60).load("alice", session)).turns
    finally:
        await redis.aclose()


async def test_a_committed_turn_streams_early_and_is_stored(services, scripted_llm):
    session = uuid.uuid4().hex
    commit = asyncio.Event()

    async def requests():
        yield start(session, "When do you open?")
        await commit.wait()
        yield brain_pb2.ConverseRequest(commit=brain_pb2.Commit())

    kinds = []
    async with internal_channel(services.brain_addr) as channel:
        async for event in brain_pb2_grpc.BrainStub(channel).Converse(requests()):
            kinds.append(event.WhichOneof("event"))
            if kinds == ["delta"]:
                assert await stored_turns(services.redis_url, session) == []  # not before the commit
                commit.set()
    assert kinds[0] == "delta" and kinds[-1] == "final"
    [turn] = await stored_turns(services.redis_url, session)
    assert turn.assistant == OPEN


async def test_a_turn_the_client_closes_without_a_commit_is_discarded(services, scripted_llm):
    session = uuid.uuid4().hex
    got_text = asyncio.Event()

    async def requests():
        yield start(session, "When do you open?")
        await got_text.wait()  # the endpoint heard other words: half-close, no commit

    kinds = []
    async with internal_channel(services.brain_addr) as channel:
        async for event in brain_pb2_grpc.BrainStub(channel).Converse(requests()):
            kinds.append(event.WhichOneof("event"))
            got_text.set()
    assert "final" not in kinds
    await asyncio.sleep(0.2)
    assert await stored_turns(services.redis_url, session) == []


# ---- the session read ahead (``prepare``: voicebot/gateway/standby.py opens the call at the onset) ----

def prepare(session: str, user: str = "alice") -> brain_pb2.ConverseRequest:
    return brain_pb2.ConverseRequest(prepare=brain_pb2.Prepare(session_id=session, user_id=user))


async def gets_served(redis_url: str) -> int:
    redis = aioredis.Redis.from_url(redis_url)
    try:
        return (await redis.info("commandstats")).get("cmdstat_get", {}).get("calls", 0)
    finally:
        await redis.aclose()


async def converse_ahead(services, session: str, text: str, *, user: str = "alice",
                         between=None, texts: bool = False) -> list:
    """A call that begins with ``prepare``; once Redis has served the read it asked for (and
    ``between`` has run), the turn's start and commit follow. The events' kinds, in order (with
    ``texts``: (kind, text) pairs)."""
    before = await gets_served(services.redis_url)
    read = asyncio.Event()

    async def requests():
        yield prepare(session, user)
        await read.wait()
        yield start(session, text)
        yield brain_pb2.ConverseRequest(commit=brain_pb2.Commit())

    async def after_the_read():
        for _ in range(1000):
            if await gets_served(services.redis_url) > before:
                break
            await asyncio.sleep(0.01)
        if between is not None:
            await between()
        read.set()

    async with internal_channel(services.brain_addr) as channel:
        waiter = asyncio.create_task(after_the_read())
        events = [e async for e in brain_pb2_grpc.BrainStub(channel).Converse(requests())]
        await waiter
    if texts:
        return [(e.WhichOneof("event"), getattr(e, e.WhichOneof("event")).text) for e in events]
    return [e.WhichOneof("event") for e in events]


async def store_turn(redis_url: str, session: str, turn: Turn, user: str = "alice") -> None:
    redis = aioredis.Redis.from_url(redis_url)
    try:
        await SessionStore(redis, 60).append_turn(user, session, turn)
    finally:
        await redis.aclose()


def prompt_text(body: dict) -> str:
    return " ".join(str(m.get("content") or "") for m in body["messages"])


async def test_a_turn_after_prepare_starts_from_the_session_read_while_the_caller_spoke(
        services, scripted_llm):
    session = uuid.uuid4().hex
    await store_turn(services.redis_url, session, Turn("t0", "A table for two.", "For what time?"))
    kinds = await converse_ahead(services, session, "When do you open?")
    assert kinds[0] == "delta" and kinds[-1] == "final"
    # The turn was stored on the history read ahead: the earlier turn is kept before it.
    assert [t.assistant for t in await stored_turns(services.redis_url, session)] == [
        "For what time?", OPEN]


async def test_a_write_between_the_read_ahead_and_the_turn_starts_it_again_on_a_fresh_read(
        services, scripted_llm):
    """Another connection of the session completes a turn while this caller speaks. The turn
    confirms its read ahead before anything leaves the brain: stale, so it runs again on a fresh
    read. The caller hears only the fresh answer, and both turns are stored."""
    session = uuid.uuid4().hex

    async def another_connection():
        await store_turn(services.redis_url, session, Turn("t_other", "Hello?", "Hi there."))

    events = await converse_ahead(services, session, "When do you open?", between=another_connection,
                                  texts=True)
    assert events[-1] == ("final", OPEN)
    assert [kind for kind, _ in events].count("final") == 1  # the stale start never reached the caller
    # Stored on the fresh read: the other connection's turn is kept, not overwritten.
    assert [(t.turn_id, t.assistant) for t in await stored_turns(services.redis_url, session)] == [
        ("t_other", "Hi there."), ("t1", OPEN)]


async def test_a_read_ahead_for_another_user_is_never_used(services, scripted_llm):
    """``prepare`` names mallory's session; the turn is alice's: it reads her own (empty) one."""
    session = uuid.uuid4().hex
    await store_turn(services.redis_url, session, Turn("t0", "My code is 4417.", "Noted."), user="mallory")
    kinds = await converse_ahead(services, session, "What did I say?", user="mallory")
    assert kinds[-1] == "final"
    assert not any("4417" in prompt_text(b) for b in scripted_llm.requests)
    assert [t.user for t in await stored_turns(services.redis_url, session)] == ["What did I say?"]


async def test_prepare_without_ids_is_refused_and_a_call_that_ends_after_it_stores_nothing(services):
    session = uuid.uuid4().hex

    async def no_ids():
        yield brain_pb2.ConverseRequest(prepare=brain_pb2.Prepare(session_id=session))

    async def prepare_only():
        yield prepare(session)  # a false start: the caller said nothing after all

    async with internal_channel(services.brain_addr) as channel:
        stub = brain_pb2_grpc.BrainStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            [e async for e in stub.Converse(no_ids())]
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "user_id" in refused.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            [e async for e in stub.Converse(prepare_only())]
        assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await stored_turns(services.redis_url, session) == []


async def test_a_start_that_says_it_is_committed_needs_no_commit_message(services, scripted_llm):
    """A call opened ahead of its words and started at the endpoint (voicebot/gateway/standby.py): the
    start carries ``committed``, and the turn runs and is stored with nothing more sent (the
    call then ends ``HALF_CLOSE_WAIT_S`` after the turn, for want of the client's half-close); a
    commit message behind it (for an older brain) changes nothing."""
    sessions = [uuid.uuid4().hex, uuid.uuid4().hex]
    more_after_start = asyncio.Event()  # never set: the call stays open, nothing more sent

    async def alone():
        yield brain_pb2.ConverseRequest(start=start(sessions[0], "When do you open?").start, committed=True)
        await more_after_start.wait()

    async def with_commit():
        yield brain_pb2.ConverseRequest(start=start(sessions[1], "When do you open?").start, committed=True)
        yield brain_pb2.ConverseRequest(commit=brain_pb2.Commit())

    async with internal_channel(services.brain_addr) as channel:
        stub = brain_pb2_grpc.BrainStub(channel)
        for requests in (alone(), with_commit()):
            kinds = [e.WhichOneof("event") async for e in stub.Converse(requests, timeout=10)]
            assert kinds[0] == "delta" and kinds[-1] == "final"
    for session in sessions:
        [turn] = await stored_turns(services.redis_url, session)
        assert turn.assistant == OPEN


async def test_the_call_ends_only_once_the_client_has_half_closed(services, scripted_llm):
    """A turn whose client is still writing when the turn is over (the commit behind a committed
    start, for an older brain): the call's end waits for the client's half-close. Ended before
    it, the stream was reset under the client's write, which grpc.aio then reported as INTERNAL
    in place of the call's OK (grpc/grpc#36066)."""
    session = uuid.uuid4().hex
    loop = asyncio.get_running_loop()
    half_closed_at = []

    async def slow_client():
        yield brain_pb2.ConverseRequest(start=start(session, "When do you open?").start, committed=True)
        await asyncio.sleep(0.3)  # the whole turn is over well before this
        yield brain_pb2.ConverseRequest(commit=brain_pb2.Commit())
        half_closed_at.append(loop.time())

    async with internal_channel(services.brain_addr) as channel:
        call = brain_pb2_grpc.BrainStub(channel).Converse(slow_client(), timeout=10)
        kinds = [event.WhichOneof("event") async for event in call]
        ended_at = loop.time()
        assert await call.code() == grpc.StatusCode.OK
    assert kinds[-1] == "final"
    assert half_closed_at and ended_at >= half_closed_at[0]


async def test_clients_whose_last_write_trails_the_turn_all_see_ok(services, scripted_llm):
    """The race itself: 200 committed starts whose commit follows 0-8 ms later, ten at a time.
    Before the brain waited for the half-close, 2 in 300 such calls ended INTERNAL."""
    rng = random.Random(7)

    async def one(channel) -> str:
        session = uuid.uuid4().hex

        async def requests():
            yield brain_pb2.ConverseRequest(start=start(session, "When do you open?").start, committed=True)
            await asyncio.sleep(rng.uniform(0, 0.008))
            yield brain_pb2.ConverseRequest(commit=brain_pb2.Commit())

        try:
            async for _ in brain_pb2_grpc.BrainStub(channel).Converse(requests(), timeout=20):
                pass
        except grpc.aio.AioRpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        return "OK"

    outcomes: dict[str, int] = {}
    async with internal_channel(services.brain_addr) as channel:
        for _ in range(20):
            for outcome in await asyncio.gather(*(one(channel) for _ in range(10))):
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes == {"OK": 200}
