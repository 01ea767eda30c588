"""Brain.Converse over real gRPC: a preemptive turn is committed by a message, or discarded.

The brain process of the shared ``services`` fixture (scripted LLM), a real redis-server.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis

from services.brain.session_store import SessionStore
from voicebot.common.internal_auth import internal_channel
from voicebot.v1 import brain_pb2, brain_pb2_grpc

pytestmark = pytest.mark.integration


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
    scripted_llm.script = lambda _b: "We open at noon."
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
    assert turn.assistant == "We open at noon."


async def test_a_turn_the_client_closes_without_a_commit_is_discarded(services, scripted_llm):
    scripted_llm.script = lambda _b: "We open at noon."
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
