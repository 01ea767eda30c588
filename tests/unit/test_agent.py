"""The brain's turn logic with a scripted model over HTTP and a real redis-server."""

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis

from services.brain.agent import Agent
from services.brain.config import BrainSettings
from services.brain.llm import OpenAIChatClient
from services.brain.session_store import SessionStore, Turn
from tests.fakes.fake_llm import last_user_text
from voicebot.v1 import brain_pb2


@pytest.fixture
async def agent_parts(redis_url, scripted_llm):
    redis = aioredis.Redis.from_url(redis_url)
    settings = BrainSettings(llm_base_url=scripted_llm.base_url, llm_deadline_s=0.5)
    chat = OpenAIChatClient(settings.llm_base_url, "m", deadline_s=0.5)
    store = SessionStore(redis, 60)
    yield Agent(settings, chat, store), store, scripted_llm
    await chat.aclose()
    await redis.aclose()


def request(text, session, turn="t1", previous=None):
    return brain_pb2.RespondRequest(session_id=session, turn_id=turn, user_id="alice", text=text,
                                    previous_reply=previous)


async def run(agent, req):
    return [e async for e in agent.respond(req)]


async def test_reply_streams_and_the_turn_is_stored(agent_parts):
    agent, store, llm = agent_parts
    llm.script = lambda b: f"Okay, {last_user_text(b)}."
    session = uuid.uuid4().hex
    events = await run(agent, request("two people", session))
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "final" and set(kinds[:-1]) == {"delta"}
    assert events[-1].final.text == "Okay, two people."
    history = await store.load("alice", session)
    assert [(t.user, t.assistant) for t in history.turns] == [("two people", "Okay, two people.")]


async def test_markdown_is_cleaned_from_the_stream(agent_parts):
    agent, _, llm = agent_parts
    llm.script = lambda _b: "**Sure!** Here: `Tuesday` works."
    events = await run(agent, request("hi", uuid.uuid4().hex))
    assert events[-1].final.text == "Sure! Here: Tuesday works."


async def test_cancelled_turn_stores_nothing(agent_parts):
    agent, store, llm = agent_parts
    llm.delay_s = 2.0
    session = uuid.uuid4().hex
    task = asyncio.create_task(run(agent, request("hello", session)))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await store.load("alice", session)).turns == []


async def test_history_keeps_only_the_spoken_part_of_an_interrupted_reply(agent_parts):
    agent, store, llm = agent_parts
    llm.script = lambda _b: "Tuesday at ten works. Shall I book it?"
    session = uuid.uuid4().hex
    await run(agent, request("Tuesday?", session, "t1"))
    spoken = brain_pb2.SpokenPart(turn_id="t1", text="Tuesday at ten", interrupted=True)
    await run(agent, request("actually Wednesday", session, "t2", spoken))
    history = await store.load("alice", session)
    assert (history.turns[0].assistant, history.turns[0].interrupted) == ("Tuesday at ten", True)
    prompt = [m["content"] for m in llm.requests[-1]["messages"]]
    assert "Tuesday at ten ..." in prompt and "Shall I book it?" not in " ".join(prompt)


async def test_llm_down_gives_the_fallback_sentence(agent_parts):
    agent, _, llm = agent_parts
    llm.fail_next = 100
    events = await run(agent, request("hello", uuid.uuid4().hex))
    assert events[-1].final.fallback is True
    assert events[-1].final.text == BrainSettings().fallback_text


async def test_another_users_history_is_invisible(agent_parts):
    agent, store, _ = agent_parts
    session = uuid.uuid4().hex
    await run(agent, request("my secret is 42", session))
    assert (await store.load("mallory", session)).turns == []


async def test_concurrent_writers_lose_no_update(agent_parts):
    _, store, _ = agent_parts
    session = uuid.uuid4().hex
    await asyncio.gather(*(store.append_turn("alice", session, Turn(f"t{i}", "q", "a")) for i in range(20)))
    history = await store.load("alice", session)
    assert sorted(t.turn_id for t in history.turns) == sorted(f"t{i}" for i in range(20))
    assert history.version == 20
