"""The reservation demo through the real MCP reservation server: propose, confirm, book, once."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from services.brain.agent import Agent
from services.brain.config import BrainSettings
from services.brain.llm import OpenAIChatClient
from services.brain.mcp_tools import McpToolSource, tool_value
from services.brain.reservation_tools import reservation_registry
from services.brain.session_store import SessionStore
from tests.conftest import LOG_ROOT
from tests.unit.test_brain_tools import BOOK_ALL, booking_model, spoken
from voicebot.devstack import Stack
from voicebot.v1 import brain_pb2

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reservations_url():
    stack = Stack(LOG_ROOT / "reservations", quiet=True)
    try:
        proc = stack.start_service("reservations", "services.reservations.server", {
            "RESERVATIONS_PORT": "0", "RESERVATIONS_DB": ":memory:", "RESERVATIONS_TODAY": "2026-11-30"})
        yield f"http://127.0.0.1:{proc.ready['http']}/mcp"
    finally:
        stack.stop()


async def test_booking_by_conversation_writes_exactly_one_reservation(reservations_url, redis_url,
                                                                    scripted_llm):
    source = McpToolSource(reservations_url)
    tools = {tool.spec.name: tool for tool in await source.load_tools()}
    redis = aioredis.Redis.from_url(redis_url)
    settings = BrainSettings(llm_base_url=scripted_llm.base_url)
    chat = OpenAIChatClient(settings.llm_base_url, "m")
    agent = Agent(settings, chat, SessionStore(redis, 60), tools=reservation_registry(tools))
    session = uuid.uuid4().hex
    try:
        scripted_llm.script = booking_model(name=f"Jamie-{session[:6]}")

        async def lookup():
            return tool_value(await source.call("get_reservation", {"name": f"Jamie-{session[:6]}"}))

        async def say(text, turn):
            request = brain_pb2.RespondRequest(session_id=session, turn_id=turn, user_id="alice", text=text)
            return [e async for e in agent.respond(request)]

        proposal = await say(BOOK_ALL, "t1")
        assert "Shall I book it?" in spoken(proposal)
        before = await lookup()
        assert before["reservations"] == []  # nothing booked before the yes
        done = await say("yes", "t2")
        assert done[-1].final.dialog_state == "done" and "R1" in spoken(done)
        after = await lookup()
        [booked] = after["reservations"]
        assert booked["time"] == "19:00" and booked["people"] == 2 and "phone" not in booked
        await say("yes", "t3")  # a second yes has nothing pending: still one booking
        again = await lookup()
        assert len(again["reservations"]) == 1
    finally:
        await chat.aclose()
        await redis.aclose()
        await source.aclose()
