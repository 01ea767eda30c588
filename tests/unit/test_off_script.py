"""Callers who leave the script, at a business no one here wrote code for (a garage).

A scripted model that only reads, a garage MCP server (tests/fakes/garage_mcp.py: a plate
with a schema pattern, a second task for the same car) and a real redis-server. Each test
is one kind of off-script turn: a code spelled out, a tool's field error, a business
refusal, an error of unknown shape, "the same car", and a question while a read-back waits.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid

import pytest
import redis.asyncio as aioredis
import yaml

from tests.fakes.fake_llm import is_guard
from tests.fakes.garage_mcp import PROFILE, Garage
from voicebot.brain.act.toolbox import build_registry
from voicebot.brain.business.profile import parse_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.v1 import brain_pb2

TODAY = dt.date(2026, 12, 7)  # a Monday


@pytest.fixture(scope="module")
def garage():
    server = Garage().start()
    yield server
    server.stop()


def garage_reader(body) -> str:
    """A model that copies words, carrier phrases and all ("The plate is MN 7310")."""
    if is_guard(body):
        return "ALLOW"
    schema = body["response_format"]["json_schema"]
    if schema["name"] == "urgent":
        return json.dumps({"situation": "none"})
    said = body["messages"][-1]["content"].split("The caller said: ", 1)[-1]
    properties = schema["schema"]["properties"]
    reading: dict = dict.fromkeys(properties)
    lowered = said.lower()
    if "intent" in properties:
        reading["intent"] = ("book_wash" if "wash" in lowered else "book_service" if "service" in lowered
                             or "oil" in lowered else "question" if said.endswith("?") else "other")
    plate = re.search(r"(?:the plate is|plate)\s+([A-Za-z0-9 ]+)", said, re.I)
    if "plate" in properties and plate:
        reading["plate"] = f"The plate is {plate[1].strip()}"
    return json.dumps(reading)


class Caller:
    def __init__(self, agent: Agent) -> None:
        self.agent, self.session, self.turns, self.last = agent, uuid.uuid4().hex, 0, ""

    async def say(self, text: str) -> str:
        previous = brain_pb2.SpokenPart(turn_id=f"t{self.turns}", text=self.last) if self.turns else None
        self.turns += 1
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=f"t{self.turns}",
                                           user_id="alice", text=text, previous_reply=previous)
        self.events = [event async for event in self.agent.respond(request)]
        self.last = "".join(e.delta.text for e in self.events if e.WhichOneof("event") == "delta")
        return self.last

    async def state(self):
        return (await self.agent.store.load("alice", self.session)).state


@pytest.fixture
async def caller(garage, redis_url, scripted_llm, monkeypatch):
    monkeypatch.setenv("GARAGE_URL", garage.url)
    garage.reset()
    profile = parse_profile(yaml.safe_load(PROFILE))
    registry, sources = await build_registry(profile, wait_s=2)
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    scripted_llm.script = garage_reader
    agent = Agent(BrainSettings(llm_base_url=scripted_llm.base_url), chat, SessionStore(redis, 60),
                  tools=registry, profile=profile, today=lambda: TODAY)
    yield Caller(agent)
    await chat.aclose()
    await redis.aclose()
    for source in sources:
        await source.aclose()


async def book_an_oil_change(caller: Caller, plate_words: str) -> str:
    assert await caller.say("I'd like to book an oil change.") == "What is the car's number plate?"
    assert await caller.say(plate_words) == "Which day?"
    assert await caller.say("Friday.") == "What name shall I put it under?"
    return await caller.say("Jordan Blake")


async def test_a_spelled_plate_is_one_code_read_back_character_by_character(caller, garage):
    said = await book_an_oil_change(caller, "The plate is M N seven three one zero.")
    assert "for M N seven three one zero on Friday" in said and "thousand" not in said
    await caller.say("Yes.")
    [(tool, args)] = garage.writes()
    assert (tool, args["plate"], args["customer_name"]) == ("book_service", "MN7310", "Jordan Blake")


async def test_the_model_copying_carrier_words_leaves_only_the_value(caller, garage):
    said = await caller.say("I'd like an oil change for the car with plate MN 7310.")
    assert said == "Which day?"
    state = await caller.state()
    assert state.form.values["plate"] == "MN7310"


async def test_a_field_the_tool_rejects_is_asked_again_and_the_other_values_kept(caller, garage):
    await book_an_oil_change(caller, "The plate is A B nine nine nine nine.")
    said = await caller.say("Yes.")
    assert said.startswith("Sorry, that plate was not accepted.")
    assert said.endswith("What is the car's number plate?")
    said = await caller.say("A as in alpha, B as in bravo, one two three four.")
    assert "for A B one two three four on Friday" in said and "for Jordan Blake" in said
    await caller.say("Yes.")
    assert [args["plate"] for _, args in garage.writes()] == ["AB9999", "AB1234"]


async def test_the_profiles_error_map_names_the_field_and_the_sentence(caller, garage):
    await book_an_oil_change(caller, "The plate is M N seven three one zero.")
    garage.plan["book_service"] = ["error:unknown car in our records"]
    said = await caller.say("Yes.")
    assert said == "Sorry, I can't find that plate. Could you spell it? What is the car's number plate?"
    assert (await caller.state()).form.values["customer_name"] == "Jordan Blake"


async def test_a_business_refusal_is_said_in_the_businesss_words(caller, garage):
    await book_an_oil_change(caller, "The plate is M N seven three one zero.")
    garage.plan["book_service"] = ["refuse"]
    said = await caller.say("Yes.")
    assert "nothing was done" in said and "The queue is closed for the weekend." in said
    assert (await caller.state()).pending is None


async def test_a_write_error_of_unknown_shape_is_an_unknown_outcome_a_person_checks(caller, garage):
    await book_an_oil_change(caller, "The plate is M N seven three one zero.")
    garage.plan["book_service"] = ["error:Traceback (most recent call last)"]
    said = await caller.say("Yes.")
    assert said.startswith("I could not confirm that it went through")
    assert any(e.WhichOneof("event") == "handoff" for e in caller.events)
    await caller.say("Yes.")
    assert len(garage.writes()) == 1  # never retried blindly


async def test_the_same_car_and_the_callers_name_carry_to_the_next_task(caller, garage):
    await book_an_oil_change(caller, "The plate is M N seven three one zero.")
    assert "is booked" in await caller.say("Yes.")
    said = await caller.say("Can you also wash the same car on Saturday?")
    assert said == ("To confirm: a car wash for M N seven three one zero on Saturday, "
                    "December twelfth, for Jordan Blake. Shall I go ahead?")
    await caller.say("Yes.")
    assert [(tool, args["plate"]) for tool, args in garage.writes()] == [
        ("book_service", "MN7310"), ("book_wash", "MN7310")]


async def test_without_the_same_only_the_carried_name_comes_along(caller, garage):
    await book_an_oil_change(caller, "The plate is M N seven three one zero.")
    await caller.say("Yes.")
    assert await caller.say("I'd like a car wash too.") == "What is the car's number plate?"
    assert (await caller.state()).form.values == {"customer_name": "Jordan Blake"}


async def test_a_question_while_a_read_back_waits_is_answered_then_read_back_again(caller, garage):
    await book_an_oil_change(caller, "The plate is M N seven three one zero.")
    said = await caller.say("Before I say yes, where exactly are you?")
    assert said.startswith("Sorry, I don't have that information.")
    assert "Just to be sure: a oil change for M N seven three one zero" in said
    assert garage.writes() == []
    await caller.say("Yes.")
    assert len(garage.writes()) == 1


def test_a_carried_field_the_task_does_not_have_fails_the_start():
    from voicebot.brain.act.tools import ToolKind, ToolRegistry, ToolSpec
    from voicebot.brain.business.tasks import TaskError, build_tasks

    raw = yaml.safe_load(PROFILE.replace("${GARAGE_URL}", "http://127.0.0.1:1/mcp"))
    raw["tasks"]["book_wash"]["carry"] = ["phone"]
    registry = ToolRegistry()
    for name in ("book_service", "book_wash"):
        registry.register(_Spec(ToolSpec(name, name, {"type": "object", "properties": {
            "plate": {"type": "string"}, "day": {"type": "string"}, "customer_name": {"type": "string"},
            "service": {"type": "string"}}, "required": ["plate", "day", "customer_name"]},
            ToolKind.WRITE)))
    with pytest.raises(TaskError, match=r"tasks\.book_wash\.carry: the task has no field phone"):
        build_tasks(parse_profile(raw), registry)


class _Spec:
    def __init__(self, spec) -> None:
        self.spec = spec

    async def run(self, args, ctx):  # pragma: no cover - never called
        return {}



async def test_the_same_again_for_another_day_is_the_last_task_with_that_day(caller, garage):
    await book_an_oil_change(caller, "The plate is M N seven three one zero.")
    assert "is booked" in await caller.say("Yes.")
    said = await caller.say("Can I have the same again for Saturday?")
    assert said == ("To confirm: a oil change for M N seven three one zero on Saturday, December twelfth, "
                    "for Jordan Blake. Shall I go ahead?")
    await caller.say("Yes.")
    assert [args["day"] for _, args in garage.writes()] == ["2026-12-11", "2026-12-12"]
