"""Brain.Prefill over real gRPC: the caller's words so far reach the LLM server as a one-token
prompt; a bad request is refused with the field named, an unauthenticated one refused outright.

The brain process of the shared ``services`` fixture (scripted LLM), a real redis-server.
"""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from tests.fakes.fake_llm import last_user_text
from voicebot.common.internal_auth import internal_channel
from voicebot.v1 import brain_pb2, brain_pb2_grpc

pytestmark = pytest.mark.integration


def words(text: str, user: str = "alice") -> brain_pb2.RespondRequest:
    return brain_pb2.RespondRequest(session_id=uuid.uuid4().hex, user_id=user, text=text)


async def test_the_words_so_far_are_prefilled_and_nothing_is_answered(services, scripted_llm):
    scripted_llm.script = lambda _b: "We open at noon."
    async with internal_channel(services.brain_addr) as channel:
        result = await brain_pb2_grpc.BrainStub(channel).Prefill(words("Do you have vegetar"), timeout=5)
    assert result.started
    for _ in range(100):  # it runs in the background: the answer came before the LLM call
        sent = [r for r in scripted_llm.requests if last_user_text(r) == "Do you have vegetar"]
        if sent:
            break
        await asyncio.sleep(0.05)
    assert sent and all(r["max_tokens"] == 1 for r in sent)


async def test_a_prefill_without_a_user_is_refused_with_the_field_named(services):
    async with internal_channel(services.brain_addr) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await brain_pb2_grpc.BrainStub(channel).Prefill(words("Hello", user=""), timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "user_id" in refused.value.details()


async def test_a_prefill_without_the_internal_token_is_refused(services):
    async with grpc.aio.insecure_channel(services.brain_addr) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await brain_pb2_grpc.BrainStub(channel).Prefill(words("Hello"), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
