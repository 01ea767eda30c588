"""The clinic and the salon as callers meet them: their real MCP servers, their profiles, no code.

Each server is the real one (SQLite in memory, a pinned calendar), the sentence
encoder the packaged one; the scripted model only reads (it copies the reason for
a visit when asked). Judged by what the server recorded.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.conftest import LOG_ROOT
from tests.fakes.fake_llm import is_guard
from voicebot.brain.act.mcp_tools import tool_value
from voicebot.brain.act.toolbox import build_registry
from voicebot.brain.business.knowledge import open_knowledge
from voicebot.brain.business.profile import load_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.sentence_encoder import MiniLMEncoder
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.devstack import Stack
from voicebot.v1 import brain_pb2

pytestmark = pytest.mark.integration
TODAY = "2026-11-30"  # a Monday
SERVERS = {"clinic": ("examples.clinic.server", "CLINIC"), "salon": ("examples.salon.server", "SALON")}


@pytest.fixture(scope="module")
def urls():
    stack = Stack(LOG_ROOT / "business-dialogs", quiet=True)
    try:
        found = {}
        for name, (module, prefix) in SERVERS.items():
            proc = stack.start_service(name, module, {
                f"{prefix}_PORT": "0", f"{prefix}_DB": ":memory:", f"{prefix}_TODAY": TODAY,
                f"{prefix}_LOG_LEVEL": "WARNING"})
            found[name] = f"http://127.0.0.1:{proc.ready['http']}/mcp"
        yield found
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def encoder():
    return MiniLMEncoder()


def reads_the_reason(body):
    """Reads only the reason for a visit ("..., for a sore throat.")."""
    if is_guard(body):
        return "ALLOW"
    said = body["messages"][-1]["content"].split("The caller said: ", 1)[-1]
    reason = re.search(r"\bfor (an? [a-z ]+?)[.!]?$", said)
    return json.dumps({"intent": "other", "reason": reason[1] if reason else None})


class Caller:
    def __init__(self, agent: Agent) -> None:
        self.agent, self.session, self.turns = agent, uuid.uuid4().hex, 0
        self.last = ""  # the last reply, as the gateway would play it
        self.name = "N" + "".join(chr(ord("a") + int(c, 16) % 26) for c in uuid.uuid4().hex[:6])

    async def say(self, text: str) -> str:
        # The gateway's report: the caller heard all of the previous reply.
        previous = brain_pb2.SpokenPart(turn_id=f"t{self.turns}", text=self.last) if self.turns else None
        self.turns += 1
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=f"t{self.turns}",
                                           user_id="alice", text=text.replace("NAME", self.name),
                                           previous_reply=previous)
        events = [event async for event in self.agent.respond(request)]
        self.last = "".join(e.delta.text or e.blocked.text for e in events
                            if e.WhichOneof("event") in ("delta", "blocked"))
        return "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")


@pytest.fixture
async def business(urls, redis_url, scripted_llm, monkeypatch, encoder):
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    scripted_llm.script = reads_the_reason
    sources_all, indexes = [], []

    async def make(name: str):
        monkeypatch.setenv(f"{SERVERS[name][1]}_MCP_URL", urls[name])
        profile = load_profile(name)
        registry, sources = await build_registry(profile, wait_s=5)
        sources_all.extend(sources)
        knowledge = await open_knowledge(profile.knowledge, Path(profile.base_dir), encoder)
        indexes.append(knowledge)
        agent = Agent(BrainSettings(llm_base_url=scripted_llm.base_url), chat, SessionStore(redis, 60),
                      tools=registry, profile=profile, encoder=encoder, knowledge=knowledge,
                      today=lambda: dt.date.fromisoformat(TODAY))
        return Caller(agent), sources[0]

    yield make
    await chat.aclose()
    await redis.aclose()
    for source in sources_all:
        await source.aclose()
    for index in indexes:
        await index.aclose()


async def appointments(source, name: str) -> list[dict]:
    found = tool_value(await source.call("find_appointments", {"patient_name": f"Sam {name}"}))
    return [a for a in found["appointments"] if a["status"] == "confirmed"]


async def visits(source, name: str) -> list[dict]:
    found = tool_value(await source.call("find_visits", {"customer_name": f"Alex {name}"}))
    return [v for v in found["visits"] if v["status"] == "booked"]


async def test_a_clinic_appointment_over_several_turns_is_booked_after_the_yes(business):
    caller, source = await business("clinic")
    assert await caller.say("Hi, I need an appointment.") == "Which day would you like to come in?"
    assert await caller.say("Wednesday.") == "What time suits you?"
    assert await caller.say("Ten.") == "What is the patient's full name?"
    assert await caller.say("Sam NAME") == "What is the reason for the visit, in a few words?"
    said = await caller.say("A sore throat.")
    assert "on Wednesday, December second at ten a m with Dr" in said and said.endswith("Shall I go ahead?")
    assert await appointments(source, caller.name) == []
    await caller.say("Yes.")
    [booked] = await appointments(source, caller.name)
    assert (booked["date"], booked["start"]) == ("2026-12-02", "10:00")


async def test_a_clinic_request_in_one_line_with_a_clinician_books_that_clinician(business):
    caller, source = await business("clinic")
    said = await caller.say("Can I see Dr. Kim on Thursday at 2 pm? My name is Sam NAME, for a rash.")
    assert "with Dr. Kim" in said and "about a rash" in said
    said = await caller.say("No, with Dr. Patel please.")
    assert "with Dr. Patel" in said
    await caller.say("Yes.")
    [booked] = await appointments(source, caller.name)
    assert (booked["clinician"], booked["start"]) == ("Dr. Patel", "14:00")


async def test_a_clinic_weekend_day_is_said_closed_and_another_day_asked(business):
    caller, source = await business("clinic")
    said = await caller.say("Can I see Dr. Kim on Saturday at 10 am? My name is Sam NAME, for a cough.")
    assert "nothing is free" in said and said.endswith("Would another day suit you?")
    said = await caller.say("Tuesday then.")
    assert "Tuesday, December first at ten a m" in said
    await caller.say("Yes.")
    [booked] = await appointments(source, caller.name)
    assert booked["date"] == "2026-12-01"


async def test_a_salon_visit_is_booked_cancelled_in_the_same_call_each_after_its_yes(business):
    caller, source = await business("salon")
    said = await caller.say("A haircut with Mia on Friday at 11 am, my name is Alex NAME.")
    assert "a haircut with Mia on Friday, December fourth at eleven a m" in said
    await caller.say("Yes, please.")
    [visit] = await visits(source, caller.name)
    assert (visit["service"], visit["stylist"], visit["time"]) == ("haircut", "Mia", "11:00")
    said = await caller.say("Please cancel that visit.")
    assert said.startswith("To confirm: cancelling your haircut on Friday")
    await caller.say("Yes.")
    assert await visits(source, caller.name) == []


async def test_a_salon_colour_too_late_in_the_day_gets_times_offered(business):
    caller, source = await business("salon")
    said = await caller.say("A colour on Saturday at 5 pm, my name is Alex NAME.")
    assert "nothing is free" in said and "four thirty p m" in said
    said = await caller.say("Four thirty then.")
    assert said.endswith("Shall I go ahead?")
    await caller.say("Yes.")
    [visit] = await visits(source, caller.name)
    assert (visit["service"], visit["time"]) == ("colour", "16:30")


async def test_a_salon_question_is_answered_from_its_knowledge_only(business):
    caller, _ = await business("salon")
    assert "thirty five dollars" in (await caller.say("How much is a haircut?")).replace("-", " ")
    said = await caller.say("Do you do manicures?")
    assert said.startswith("Sorry, I don't have that information.")
