"""Brain.Prefill over real gRPC: the caller's words so far start the knowledge search (counted on
the brain's /metrics); a bad request is refused with the field named, an unauthenticated one
refused outright.

The brain process of the shared ``services`` fixture (scripted LLM), a real redis-server.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
import uuid

import grpc
import pytest

from voicebot.common.internal_auth import internal_channel
from voicebot.v1 import brain_pb2, brain_pb2_grpc

pytestmark = pytest.mark.integration


def words(text: str, user: str = "alice") -> brain_pb2.RespondRequest:
    return brain_pb2.RespondRequest(session_id=uuid.uuid4().hex, user_id=user, text=text)


def prefetches(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(r"^voicebot_knowledge_prefetches_total (\S+)$", text, re.M)
    return float(found[1]) if found else 0.0


async def test_the_words_so_far_start_the_knowledge_search_and_nothing_is_answered(services, scripted_llm):
    port = services.metrics_ports["brain"]
    before = await asyncio.to_thread(prefetches, port)
    async with internal_channel(services.brain_addr) as channel:
        result = await brain_pb2_grpc.BrainStub(channel).Prefill(words("Do you have park"), timeout=5)
    assert result.started
    for _ in range(100):  # it runs in the background: the answer came before the search
        if await asyncio.to_thread(prefetches, port) > before:
            break
        await asyncio.sleep(0.05)
    assert await asyncio.to_thread(prefetches, port) == before + 1
    assert scripted_llm.requests == []  # the model is not asked: nothing is answered


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
