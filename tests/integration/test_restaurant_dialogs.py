"""The restaurant as a caller meets it: its real MCP server, its profile, no code of its own.

The reservation server is the real one (examples/restaurant, SQLite in
memory, a pinned calendar). The scripted model is the only fake: it reads
nothing unless a test says so, so every booking here is carried by code's
task engine (``form.py``) from the tools' schemas and the profile. Each test is
a dialogue, judged by what the reservation server recorded.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from tests.conftest import LOG_ROOT
from tests.fakes.fake_llm import is_guard
from voicebot.brain.act.mcp_tools import tool_value
from voicebot.brain.act.toolbox import build_registry
from voicebot.brain.business.profile import load_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.read.sentence_encoder import MiniLMEncoder
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import ReadAhead, SessionStore
from voicebot.devstack import Stack
from voicebot.v1 import brain_pb2

pytestmark = pytest.mark.integration
TODAY = "2026-11-30"  # a Monday: "tomorrow" is Tuesday, December 1st


@pytest.fixture(scope="module")
def reservations_url():
    stack = Stack(LOG_ROOT / "restaurant-dialogs", quiet=True)
    try:
        proc = stack.start_service("reservations", "examples.restaurant.server", {
            "RESERVATIONS_PORT": "0", "RESERVATIONS_DB": ":memory:", "RESERVATIONS_TODAY": TODAY,
            "RESERVATIONS_LOG_LEVEL": "WARNING"})
        yield f"http://127.0.0.1:{proc.ready['http']}/mcp"
    finally:
        stack.stop()


def reads_nothing(body):
    """A model that reads nothing and claims a booking whenever it gets a chance to talk."""
    if is_guard(body):
        return "ALLOW"
    if body.get("response_format"):
        return json.dumps({"intent": "other"})
    return "Okay, I've booked a table for four at seven p m."


class Caller:
    def __init__(self, agent: Agent) -> None:
        self.agent, self.session, self.turns = agent, uuid.uuid4().hex, 0
        # A name nobody else books under, spelled as a name.
        self.name = "N" + "".join(chr(ord("a") + int(c, 16) % 26) for c in uuid.uuid4().hex[:6])
        self.events: list[brain_pb2.RespondEvent] = []

    async def say(self, text: str, ahead: ReadAhead | None = None, context: dict | None = None) -> str:
        # The gateway's report: the caller heard all of the previous reply.
        previous = brain_pb2.SpokenPart(turn_id=f"t{self.turns}", text=self.played()) if self.turns else None
        self.turns += 1
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=f"t{self.turns}",
                                           user_id="alice", text=text.replace("NAME", self.name),
                                           session_context=context or {}, previous_reply=previous)
        self.events = [event async for event in self.agent.respond(request, ahead=ahead)]
        return "".join(e.delta.text for e in self.events if e.WhichOneof("event") == "delta")

    def played(self) -> str:
        """The last reply as the gateway plays it: its text, or the guard's blocked sentence."""
        return "".join(e.delta.text or e.blocked.text for e in self.events
                       if e.WhichOneof("event") in ("delta", "blocked"))

    async def state(self):
        return (await self.agent.store.load("alice", self.session)).state


@pytest.fixture(scope="module")
def encoder():
    return MiniLMEncoder()  # the packaged sentence encoder: it picks the task from the examples


@pytest.fixture
async def restaurant(reservations_url, redis_url, scripted_llm, monkeypatch, encoder):
    monkeypatch.setenv("RESERVATIONS_MCP_URL", reservations_url)
    profile = load_profile("restaurant")
    registry, sources = await build_registry(profile, wait_s=5)
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    scripted_llm.script = reads_nothing

    callers: list[Caller] = []

    def make(guard: bool = False, **parts) -> Caller:
        settings = BrainSettings(llm_base_url=scripted_llm.base_url)
        agent = Agent(settings, chat, SessionStore(redis, 60), tools=registry, profile=profile,
                      guard=TopicGuard(chat, profile.purpose) if guard else None,
                      encoder=encoder, today=lambda: dt.date.fromisoformat(TODAY), **parts)
        callers.append(Caller(agent))
        return callers[-1]

    async def booked(caller: Caller, status: str = "confirmed") -> list[dict]:
        found = tool_value(await sources[0].call("get_reservation", {"name": caller.name}))
        return [r for r in found["reservations"] if r["status"] == status]

    yield make, booked, scripted_llm
    for caller in callers:  # the slots are shared by every test of the module: free them again
        for booking in await booked(caller):
            await sources[0].call("cancel_reservation", {"reservation_id": booking["reservation_id"]})
    await chat.aclose()
    await redis.aclose()
    for source in sources:
        await source.aclose()


async def test_a_booking_in_one_line_is_read_back_and_booked_after_a_plain_yes(restaurant):
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("A table for two tomorrow at seven pm, my name is NAME.")
    assert "December first at seven p m" in said and said.endswith("Shall I go ahead?")
    assert await booked(caller) == []
    said = await caller.say("Yes, please.")
    [booking] = await booked(caller)
    assert (booking["time"], booking["day"], booking["people"]) == ("19:00", "2026-12-01", 2)
    assert "is booked" in said


async def test_a_booking_over_several_turns_asks_one_field_at_a_time(restaurant):
    make, booked, _ = restaurant
    caller = make()
    assert await caller.say("I'd like to book a table.") == "Which day would you like to come?"
    assert await caller.say("Friday.") == "At what time?"
    assert await caller.say("Eight.") == "For how many people?"
    assert await caller.say("Four of us.") == "Under what name shall I book it?"
    said = await caller.say("NAME")
    assert "a table for four on Friday, December fourth at eight p m" in said
    await caller.say("Yes.")
    [booking] = await booked(caller)
    assert (booking["time"], booking["day"], booking["people"]) == ("20:00", "2026-12-04", 4)


@pytest.mark.parametrize("change, field, value", [
    ("Actually, make it half past seven.", "time", "19:30"),
    ("No, for three people.", "people", 3),
    ("Make it Thursday instead.", "day", "2026-12-03"),
    ("Yes at nine.", "time", "21:00"),
    ("Sure, but for three.", "people", 3),
    # a correction names the old value first and the new one last
    ("Not two people, three.", "people", 3),
    ("Not Wednesday but Thursday.", "day", "2026-12-03"),
    ("At seven, no wait, at eight.", "time", "20:00"),
    ("Make it three, sorry, four people.", "people", 4),
])
async def test_a_change_of_any_field_is_read_back_anew_and_only_the_new_one_is_booked(
        restaurant, change, field, value):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("A table for two on Wednesday at seven pm under NAME.")
    said = await caller.say(change)
    assert said.endswith("Shall I go ahead?") and await booked(caller) == []
    await caller.say("Yes.")
    [booking] = await booked(caller)
    assert booking[field] == value


@pytest.mark.parametrize("answer", ["Okay?", "Hmm, maybe.", "Is that the terrace?", "Yes?", "I guess so"])
async def test_a_question_or_a_hedge_hears_the_read_back_again_and_books_nothing(restaurant, answer):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("A table for two on Wednesday at seven pm under NAME.")
    said = await caller.say(answer)
    assert "a table for two on Wednesday" in said and said.endswith("Please say yes or no.")
    assert await booked(caller) == []
    await caller.say("Yes.")
    assert len(await booked(caller)) == 1  # the yes to the repeated read-back runs it, once


async def test_no_then_a_new_value_reads_back_the_new_value(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("A table for two on Wednesday at seven pm under NAME.")
    said = await caller.say("No.")
    assert "What would you like to change?" in said
    said = await caller.say("Seven thirty.")
    assert "seven thirty p m" in said and said.endswith("Shall I go ahead?")
    await caller.say("Yes")
    [booking] = await booked(caller)
    assert booking["time"] == "19:30"


async def test_an_impossible_time_gets_the_free_times_offered_and_one_is_taken(restaurant):
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("A table for two on Wednesday at eleven pm under NAME.")
    assert "nothing is free" in said and "Which would you like?" in said
    said = await caller.say("Nine thirty then.")
    assert "nine thirty p m" in said and said.endswith("Shall I go ahead?")
    await caller.say("Yes.")
    [booking] = await booked(caller)
    assert booking["time"] == "21:30"


async def test_a_party_larger_than_any_table_hears_the_restaurants_own_reason(restaurant):
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("A table for six on Wednesday at seven pm under NAME.")
    assert "our largest table seats four people, so we cannot book a table for six" in said.lower(), said
    assert await booked(caller) == []


async def test_a_caller_who_never_says_yes_gets_nothing_booked(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("A table for two on Wednesday at seven pm under NAME.")
    for words in ("Hmm.", "Let me think.", "What about parking?", "No thanks, I'll call back."):
        await caller.say(words)
    assert await booked(caller) == []


async def test_a_question_mid_task_is_answered_and_the_task_goes_on(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("I'd like to book a table for two on Friday.")
    said = await caller.say("Do you have vegetarian dishes?")
    assert said.endswith("At what time?")
    await caller.say("At eight.")
    said = await caller.say("NAME")
    assert said.endswith("Shall I go ahead?")
    await caller.say("Yes")
    assert len(await booked(caller)) == 1


async def test_book_then_cancel_in_one_call_cancels_that_booking_after_its_own_yes(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("A table for two on Saturday at eight pm under NAME.")
    await caller.say("Yes.")
    assert len(await booked(caller)) == 1
    said = await caller.say("Actually, please cancel my booking.")
    assert "cancelling your reservation on Saturday" in said and said.endswith("Shall I go ahead?")
    assert len(await booked(caller)) == 1
    said = await caller.say("Yes.")
    assert "is cancelled" in said
    assert await booked(caller) == [] and len(await booked(caller, "cancelled")) == 1


async def test_two_bookings_in_one_call_each_need_their_own_yes(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("A table for two on Friday at seven pm under NAME.")
    await caller.say("Yes.")
    said = await caller.say("And another table for four on Saturday at eight pm, also under NAME.")
    assert "four on Saturday" in said and said.endswith("Shall I go ahead?")
    assert len(await booked(caller)) == 1
    await caller.say("Yes.")
    assert sorted(b["day"] for b in await booked(caller)) == ["2026-12-04", "2026-12-05"]


async def test_after_a_booking_a_further_yes_books_nothing(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("A table for two on Friday at 8 pm. My name is NAME.")
    await caller.say("yes")
    for words in ("yes", "Thanks, that's all.", "yes please"):
        said = await caller.say(words)
        assert "Shall I go ahead?" not in said, words
    assert len(await booked(caller)) == 1


async def test_two_turns_without_the_field_asked_hand_off_with_what_was_collected(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("I'd like to book a table for two on Friday.")
    await caller.say("Blue.")
    await caller.say("The weather is nice.")
    handoff = [e.handoff for e in caller.events if e.WhichOneof("event") == "handoff"]
    assert handoff and handoff[0].reason == "not_understood"
    assert "people 2" in handoff[0].summary and "2026-12-04" in handoff[0].summary
    assert await booked(caller) == []


async def test_model_text_never_reaches_the_caller(restaurant):
    """The scripted model claims a booking whenever it may talk: it never gets to."""
    make, booked, _ = restaurant
    caller = make()
    for words in ("Hello there.", "Is there a corkage fee?", "Do you do weddings?", "Seven pm instead."):
        said = await caller.say(words)
        assert "booked" not in said.lower(), words
    assert await booked(caller) == []


def guarded(make, llm, blocks: Callable[[str], bool]) -> Caller:
    """A caller whose topic guard asks its model (no screen), which blocks the turns ``blocks``
    picks by their words."""
    def script(body):
        if is_guard(body):
            return "BLOCK" if blocks(json.dumps(body)) else "ALLOW"
        return reads_nothing(body)

    llm.script = script
    caller = make(guard=True)
    caller.agent.guard.screen = None
    return caller


async def test_a_bare_no_in_a_booking_is_never_blocked_but_off_topic_still_is(restaurant):
    make, _, llm = restaurant
    caller = guarded(make, llm, lambda said: "table for two" not in said)
    await caller.say("A table for two on Wednesday at seven pm under NAME.")
    said = await caller.say("No.")
    assert "What would you like to change?" in said
    said = await caller.say("Write me a poem about the sea.")
    assert said == "" and caller.events[-1].WhichOneof("event") == "blocked"


async def test_a_turn_blocked_while_a_read_back_waits_hears_the_read_back_again_and_a_yes_books_it(
        restaurant):
    """The guard's block does not lose the read-back: it is said again after the block, and the
    caller's next plain yes answers it (a yes to the block alone would book nothing)."""
    make, booked, llm = restaurant
    caller = guarded(make, llm, lambda said: "cake" in said)
    await caller.say("A table for two on Wednesday at seven pm under NAME.")
    await caller.say("Sorry, one thing first: can we bring our own birthday cake?")
    played = caller.played()
    assert caller.events[-1].WhichOneof("event") == "blocked" and await booked(caller) == []
    assert played.startswith("Sorry") and "a table for two on Wednesday" in played, played
    assert played.endswith("Please say yes or no."), played
    await caller.say("Yes, go ahead.")
    [booking] = await booked(caller)
    assert (booking["day"], booking["time"], booking["people"]) == ("2026-12-02", "19:00", 2)


async def test_a_turn_blocked_in_the_middle_of_the_form_hears_the_question_again(restaurant):
    make, _, llm = restaurant
    caller = guarded(make, llm, lambda said: "poem" in said)
    asked = await caller.say("I'd like to book a table for two on Wednesday at seven pm.")
    await caller.say("Write me a poem about the sea.")
    assert caller.events[-1].WhichOneof("event") == "blocked"
    assert caller.played().endswith(asked) and caller.played() != asked, caller.played()
    said = await caller.say("NAME")
    assert said.endswith("Shall I go ahead?"), said


async def test_the_calls_metadata_fills_a_field_of_the_same_name_as_data(restaurant):
    """A phone line's custom parameter ``name`` fills the booking's name; nothing else is taken."""
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("A table for two on Friday at seven pm.", context={"name": caller.name, "x": "y"})
    assert f"under the name {caller.name}" in said and said.endswith("Shall I go ahead?")
    await caller.say("Yes.")
    assert len(await booked(caller)) == 1


async def test_the_same_request_again_after_a_failed_check_checks_again(restaurant):
    make, _, _ = restaurant
    caller = make()
    agent = caller.agent
    real = agent.dispatcher.run

    async def down(tool, call, args, ctx):
        from voicebot.brain.act.tools import ToolResult
        return ToolResult(call, "unavailable", {"ok": False, "error": "down"})

    agent.dispatcher.run = down
    said = await caller.say("Can I book a table for two on Friday at seven pm under NAME?")
    assert said == "Sorry, I can't check the reservation book right now. Please try again in a moment."
    agent.dispatcher.run = real
    said = await caller.say("Can I book a table for two on Friday at seven pm under NAME?")
    assert said.endswith("Shall I go ahead?")


async def test_a_change_only_the_models_reading_understands_is_read_back_anew(restaurant):
    """"Could we do eight instead?" has no time the rules take: the model reads it, code reads back."""
    make, booked, llm = restaurant
    llm.script = lambda body: "ALLOW" if is_guard(body) else json.dumps(
        {"time": "eight"} if "eight" in body["messages"][-1]["content"] else {"intent": "other"})
    caller = make()
    await caller.say("A table for two on Wednesday at seven pm under NAME.")
    said = await caller.say("Could we do eight instead?")
    assert "eight p m" in said and said.startswith("To confirm:")
    await caller.say("Yes.")
    [booking] = await booked(caller)
    assert booking["time"] == "20:00"
