"""An urgent situation comes before anything else in the turn: the guard, a read-back, a booking.

The garage (tests/fakes/garage_mcp.py) names one urgent situation of its own, a fire; the
screen is the real sentence encoder, the model a scripted one, the session store a real
redis-server. The guard is scripted to block everything, so a reply that still says the
situation's sentence shows the urgent check came first.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
import redis.asyncio as aioredis
import yaml

from tests.fakes.fake_llm import is_guard
from tests.fakes.garage_mcp import PROFILE, Garage
from tests.unit.test_off_script import garage_reader
from voicebot.brain.act.toolbox import build_registry
from voicebot.brain.business.profile import parse_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.read.sentence_encoder import MiniLMEncoder
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.v1 import brain_pb2

FIRE = "Please leave the building now and call the fire brigade."
URGENT = {"situations": [{
    "name": "fire", "describe": "a fire or smoke in the garage or a car", "say": FIRE,
    "examples": ["My car is on fire.", "There's smoke coming from the engine.", "Something is burning."]}]}


@pytest.fixture(scope="module")
def garage():
    server = Garage().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def encoder():
    return MiniLMEncoder()


def reader(strict_guard: bool):
    """The garage's reader; a guard that blocks everything (``strict_guard``); and a model that
    names the fire when the words speak of fire, smoke or burning."""
    def read(body) -> str:
        if is_guard(body):
            return "BLOCK" if strict_guard else "ALLOW"
        if body["response_format"]["json_schema"]["name"] == "urgent":
            said = body["messages"][-1]["content"].lower()
            fire = any(word in said for word in ("fire", "smoke", "burning"))
            return json.dumps({"situation": "fire" if fire else "none"})
        return garage_reader(body)

    return read


@pytest.fixture
async def make_caller(garage, encoder, redis_url, scripted_llm, monkeypatch):
    monkeypatch.setenv("GARAGE_URL", garage.url)
    garage.reset()
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    sources_all = []

    async def make(handoff: bool = False, guard: bool = False, **lines: float):
        raw = yaml.safe_load(PROFILE)
        raw["urgent"] = {**json.loads(json.dumps(URGENT)), **lines}
        raw["urgent"]["situations"][0]["handoff"] = handoff
        profile = parse_profile(raw)
        registry, sources = await build_registry(profile, wait_s=2)
        sources_all.extend(sources)
        scripted_llm.script = reader(strict_guard=guard)
        agent = Agent(BrainSettings(llm_base_url=scripted_llm.base_url), chat, SessionStore(redis, 60),
                      tools=registry, profile=profile, encoder=encoder,
                      guard=TopicGuard(chat, profile.purpose) if guard else None,
                      today=lambda: dt.date(2026, 12, 7))
        return Caller(agent)

    yield make
    await chat.aclose()
    await redis.aclose()
    for source in sources_all:
        await source.aclose()


class Caller:
    def __init__(self, agent: Agent) -> None:
        self.agent, self.session, self.turns, self.last = agent, uuid.uuid4().hex, 0, ""

    async def say(self, text: str) -> list[brain_pb2.RespondEvent]:
        previous = brain_pb2.SpokenPart(turn_id=f"t{self.turns}", text=self.last) if self.turns else None
        self.turns += 1
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=f"t{self.turns}",
                                           user_id="alice", text=text, previous_reply=previous)
        events = [event async for event in self.agent.respond(request)]
        self.last = "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")
        return events


def reply(events) -> str:
    return "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")


async def test_the_situations_sentence_comes_before_the_guards_verdict(make_caller):
    caller = await make_caller(guard=True)
    events = await caller.say("My car is on fire in your car park!")
    assert reply(events) == FIRE
    assert not any(e.WhichOneof("event") == "blocked" for e in events)
    assert events[-1].final.text == FIRE


async def test_a_booking_asked_in_the_same_breath_starts_nothing(make_caller, garage):
    caller = await make_caller()
    events = await caller.say("I'd like an oil change for plate MN 7310, "
                              "there's smoke coming from the engine.")
    assert reply(events) == FIRE
    state = (await caller.agent.store.load("alice", caller.session)).state
    assert state.form is None and state.pending is None


async def test_a_read_back_waiting_before_the_situation_can_no_longer_be_run(make_caller, garage):
    caller = await make_caller()
    await caller.say("I'd like an oil change.")
    await caller.say("The plate is M N seven three one zero.")
    await caller.say("Friday.")
    assert "Shall I go ahead?" in reply(await caller.say("Jordan Blake"))
    assert reply(await caller.say("Wait, something is burning under the bonnet!")) == FIRE
    await caller.say("Yes.")
    assert garage.writes() == []


async def test_a_situation_with_a_handoff_hands_the_call_over_after_its_sentence(make_caller):
    caller = await make_caller(handoff=True)
    events = await caller.say("My car is on fire.")
    kinds = [e.WhichOneof("event") for e in events]
    assert reply(events) == FIRE and kinds.index("handoff") > kinds.index("delta")
    handoff = next(e.handoff for e in events if e.WhichOneof("event") == "handoff")
    assert handoff.reason == "urgent_fire"


async def test_an_ordinary_turn_goes_on_as_usual(make_caller):
    caller = await make_caller()
    assert reply(await caller.say("I'd like an oil change.")) == "What is the car's number plate?"


async def test_the_turns_model_reading_waits_for_the_urgent_checks_model(make_caller, scripted_llm):
    """On a few CPU cores the check's model call must not queue behind the reading's."""
    caller = await make_caller(sure_above=0.99, near_above=0.99, ask_above=0.0)  # always asked
    order: list[str] = []
    read = reader(strict_guard=False)

    def recording(body):
        order.append(body["response_format"]["json_schema"]["name"])
        return read(body)

    scripted_llm.script = recording
    await caller.say("I'd like an oil change, something smells a bit odd under the bonnet.")
    assert order.index("urgent") < order.index("reading")
    assert order.count("urgent") == 1


async def test_the_guards_model_call_waits_for_the_urgent_checks_model(make_caller, scripted_llm):
    """Both run beside the turn; the urgent check's call reaches the model first and alone (an
    urgent check whose call timed out behind the guard's took ordinary turns for emergencies)."""
    caller = await make_caller(guard=True, sure_above=0.99, near_above=0.99, ask_above=0.0)
    caller.agent.guard.screen = None  # the guard always asks its model
    order: list[str] = []
    read = reader(strict_guard=False)

    def recording(body):
        order.append("guard" if is_guard(body) else body["response_format"]["json_schema"]["name"])
        return read(body)

    scripted_llm.script = recording
    await caller.say("I'd like an oil change, something smells a bit odd under the bonnet.")
    assert order[:2] == ["urgent", "guard"], order
