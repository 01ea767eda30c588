"""The restaurant profile as a caller meets it: its MCP server, its hooks, a model that only talks.

The reservation server is the real one (services/reservations, SQLite in
memory, a pinned calendar). The scripted model never calls a tool, like the
packaged 1.5B model on most booking requests: the profile's hooks carry the
booking path, and code reads back and books. Each test is a dialogue from
issue 11's findings, judged by what the reservation server recorded.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import redis.asyncio as aioredis

from services.brain.agent import Agent
from services.brain.config import BrainSettings
from services.brain.guard import TopicGuard
from services.brain.hooks import load_hooks
from services.brain.llm import OpenAIChatClient
from services.brain.mcp_tools import McpToolSource, tool_value
from services.brain.profile import load_profile
from services.brain.session_store import ReadAhead, SessionStore
from services.brain.toolbox import build_registry
from tests.conftest import LOG_ROOT
from tests.fakes.fake_llm import is_guard
from voicebot.devstack import Stack
from voicebot.v1 import brain_pb2

pytestmark = pytest.mark.integration
TODAY = "2026-11-30"  # a Monday: "tomorrow" is Tuesday, December 1st


@pytest.fixture(scope="module")
def reservations_url():
    stack = Stack(LOG_ROOT / "restaurant-dialogs", quiet=True)
    try:
        proc = stack.start_service("reservations", "services.reservations.server", {
            "RESERVATIONS_PORT": "0", "RESERVATIONS_DB": ":memory:", "RESERVATIONS_TODAY": TODAY,
            "RESERVATIONS_LOG_LEVEL": "WARNING"})
        yield f"http://127.0.0.1:{proc.ready['http']}/mcp"
    finally:
        stack.stop()


def talker(body):
    """A model that answers in prose and never calls a tool."""
    if is_guard(body):
        return "ALLOW"
    return "Happy to help. What day and time would you like, and for how many people?"


class Caller:
    def __init__(self, agent: Agent) -> None:
        self.agent, self.session, self.turns = agent, uuid.uuid4().hex, 0
        # A name nobody else books under, spelled as a name.
        self.name = "N" + "".join(chr(ord("a") + int(c, 16) % 26) for c in uuid.uuid4().hex[:6])

    async def say(self, text: str, ahead: ReadAhead | None = None) -> str:
        self.turns += 1
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=f"t{self.turns}",
                                           user_id="alice", text=text.replace("NAME", self.name))
        events = [event async for event in self.agent.respond(request, ahead=ahead)]
        return "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")

    async def state(self):
        return (await self.agent.store.load("alice", self.session)).state


@pytest.fixture
async def restaurant(reservations_url, redis_url, scripted_llm, monkeypatch):
    monkeypatch.setenv("RESERVATIONS_MCP_URL", reservations_url)
    profile = load_profile("restaurant")
    registry, sources = await build_registry(profile, wait_s=5)
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    scripted_llm.script = talker

    def make(guard: bool = False, prefill: bool = False) -> Caller:
        settings = BrainSettings(llm_base_url=scripted_llm.base_url, prefill_after_reply=prefill)
        agent = Agent(settings, chat, SessionStore(redis, 60),
                      tools=registry, profile=profile, hooks=load_hooks(profile.hooks, profile),
                      guard=TopicGuard(chat, profile.purpose) if guard else None)
        return Caller(agent)

    async def booked(caller: Caller) -> list[dict]:
        found = tool_value(await sources[0].call("get_reservation", {"name": caller.name}))
        return [r for r in found["reservations"] if r["status"] == "confirmed"]

    yield make, booked, scripted_llm
    await chat.aclose()
    await redis.aclose()
    for source in sources:
        await source.aclose()


async def test_the_time_the_caller_confirms_is_the_time_that_is_booked(restaurant):
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("A table for two tomorrow at seven pm, my name is NAME.")
    assert "seven p m" in said and said.endswith("Shall I go ahead?") and await booked(caller) == []
    said = await caller.say("Actually, make it half past seven.")
    assert "seven thirty p m" in said and said.endswith("Shall I go ahead?")
    await caller.say("Yes, please.")
    [booking] = await booked(caller)
    assert (booking["time"], booking["day"], booking["people"]) == ("19:30", "2026-12-01", 2)


async def test_after_a_booking_nothing_is_proposed_again_and_a_further_yes_books_nothing(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("Can I book a table for two on Friday at 8 pm? My name is NAME.")
    said = await caller.say("yes")
    assert "is booked" in said and "R1" in said
    for words in ("Can you check my reservation?", "yes", "Thanks, that's all.", "yes please"):
        said = await caller.say(words)
        assert "Shall I go ahead?" not in said, words
    assert len(await booked(caller)) == 1
    assert (await caller.state()).pending is None


async def test_a_yes_on_a_read_made_before_another_connection_booked_books_nothing_again(
        restaurant, redis_client):
    """The session read ahead while the caller says "yes" (gateway/standby.py), then the same
    session on a second connection confirms the read-back first. The turn finds its read stale
    before anything is said or run, and answers from the fresh one: nothing pending."""
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("Can I book a table for two on Friday at 8 pm? My name is NAME.")
    assert said.endswith("Shall I go ahead?")
    reads = redis_client.info("commandstats").get("cmdstat_get", {}).get("calls", 0)
    ahead = caller.agent.read_ahead("alice", caller.session)  # pending: the read-back
    for _ in range(500):
        if redis_client.info("commandstats").get("cmdstat_get", {}).get("calls", 0) > reads:
            break
        await asyncio.sleep(0.01)
    second = make()
    second.session, second.name, second.turns = caller.session, caller.name, 10
    assert "is booked" in await second.say("yes")  # the other connection's yes, first
    said = await caller.say("yes", ahead=ahead)
    assert "is booked" not in said and "Shall I go ahead?" not in said
    assert len(await booked(caller)) == 1
    assert (await caller.state()).pending is None


async def test_a_party_size_correction_is_read_back_and_booked(restaurant):
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("I'd like a table for two on Wednesday at 7 pm under NAME.")
    assert "table for two" in said
    said = await caller.say("Sorry, we are three people, not two.")
    assert "table for three" in said and said.endswith("Shall I go ahead?")
    await caller.say("yes")
    [booking] = await booked(caller)
    assert booking["people"] == 3


async def test_changes_relative_to_the_read_back_are_read_back_and_booked(restaurant):
    """"A little later", "one more person", "the day after": each changes what was just read
    back (the model that only talks is never asked), and the yes books the last read-back."""
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("A table for two on Friday at 7 pm, my name is NAME.")
    assert "table for two on Friday" in said and "seven p m" in said
    said = await caller.say("Could you make it a little later, please?")
    assert "seven thirty p m" in said and said.endswith("Shall I go ahead?")
    said = await caller.say("Actually, one more person is coming with us.")
    assert "table for three" in said and "seven thirty p m" in said
    said = await caller.say("Could we do the day after instead?")
    assert "Saturday" in said and "table for three" in said and "seven thirty p m" in said
    await caller.say("Yes, please.")
    [booking] = await booked(caller)
    assert (booking["day"], booking["time"], booking["people"]) == ("2026-12-05", "19:30", 3)


def fields_model(fields: dict | str):
    """A model that talks, and reads a change as ``fields`` when asked for the hook's fields."""
    def script(body):
        if (body.get("response_format") or {}).get("json_schema", {}).get("name") == "change":
            return fields if isinstance(fields, str) else json.dumps(fields)
        return talker(body)
    return script


async def test_a_change_only_the_model_can_read_is_read_back_from_its_fields_and_booked(restaurant):
    """"Could we do eight instead?": the rules cannot tell a time from a party size there, so the
    model is asked for the booking's fields; code finds the slot, reads it back, and the yes books
    exactly that."""
    make, booked, llm = restaurant
    caller = make()
    await caller.say("A table for two on Friday at 7 pm, my name is NAME.")
    llm.script = fields_model({"day": "friday", "time": "20:00", "people": 2})
    said = await caller.say("Could we do eight instead?")
    assert said.startswith("To confirm: a table for two on Friday") and "eight p m" in said
    [ask] = [body for body in llm.requests if body.get("response_format")]
    assert ask["tools"] and ask["messages"][-1] == {"role": "user", "content": "Could we do eight instead?"}
    assert ask["tool_choice"] == "none"  # tools stay in the cached prompt; the answer is the fields
    # The instruction comes before the words, so the prefill after the read-back has cached it.
    assert ask["messages"][-2]["role"] == "system" and "JSON" in ask["messages"][-2]["content"]
    await caller.say("Yes, please.")
    [booking] = await booked(caller)
    assert (booking["day"], booking["time"], booking["people"]) == ("2026-12-04", "20:00", 2)


async def settled(agent: Agent) -> None:
    await asyncio.gather(*agent._background, *agent.words_prefill._tasks.values(), return_exceptions=True)


async def test_a_change_asked_as_fields_finds_all_but_the_callers_words_prefilled(restaurant):
    """After a read-back the prefill caches the prompt a change to it sends, the hook's
    instruction included; while the caller is still saying the change, the words so far are
    prefilled on that same prompt. At the endpoint only the last words are new to the server."""
    make, _, llm = restaurant
    caller = make(prefill=True)
    await caller.say("A table for two on Friday at 7 pm, my name is NAME.")
    await settled(caller.agent)
    after_read_back = [body for body in llm.requests if body["max_tokens"] == 1][-1]
    assert after_read_back["messages"][-1] == {"role": "user", "content": ""}
    assert "JSON" in after_read_back["messages"][-2]["content"]

    words = brain_pb2.RespondRequest(session_id=caller.session, user_id="alice", text="Could we do eight")
    assert caller.agent.words_prefill.start(words)
    await settled(caller.agent)
    on_words = [body for body in llm.requests if body["max_tokens"] == 1][-1]
    assert on_words["messages"][-1] == {"role": "user", "content": "Could we do eight"}

    llm.script = fields_model({"day": "friday", "time": "20:00", "people": 2})
    await caller.say("Could we do eight instead?")
    [ask] = [body for body in llm.requests if body.get("response_format")]
    assert ask["messages"][:-1] == after_read_back["messages"][:-1] == on_words["messages"][:-1]
    assert ask["messages"][-1] == {"role": "user", "content": "Could we do eight instead?"}
    assert ask.get("tools") == on_words.get("tools") == after_read_back.get("tools")


async def test_a_change_read_as_fields_leaves_only_the_current_booking_in_later_prompts(restaurant):
    """Two changes read as fields: the second call's prompt shows one state block, the current
    one. A change read as fields is stored without the block it was sent with; stored, the
    superseded blocks stayed in the history and the packaged model took an older time from them
    ("move it to the weekend" after "do eight instead" came back at 19:00)."""
    make, booked, llm = restaurant
    caller = make()
    await caller.say("A table for two on Friday at 7 pm, my name is NAME.")
    llm.script = fields_model({"day": "friday", "time": "20:00", "people": 2})
    await caller.say("Could we do eight instead?")
    llm.requests.clear()
    llm.script = fields_model({"day": "saturday", "time": "20:00", "people": 2})
    said = await caller.say("Could we move it to the weekend instead?")
    assert said.startswith("To confirm: a table for two on Saturday") and "eight p m" in said
    [ask] = [body for body in llm.requests if body.get("response_format")]
    blocks = [m["content"] for m in ask["messages"] if str(m["content"]).startswith("Session state:")]
    assert len(blocks) == 1 and '"time": "20:00"' in blocks[0] and '"19:00"' not in blocks[0]
    await caller.say("Yes, please.")
    [booking] = await booked(caller)
    assert (booking["day"], booking["time"], booking["people"]) == ("2026-12-05", "20:00", 2)


async def test_when_the_model_reads_no_change_code_asks_what_to_change(restaurant):
    make, booked, llm = restaurant
    caller = make()
    await caller.say("A table for two on Friday at 7 pm, my name is NAME.")
    llm.script = fields_model({"day": "friday", "time": "19:00", "people": 2})  # as read back
    said = await caller.say("Could we do something different instead?")
    assert said == "Okay, nothing is booked. What would you like to change?"
    await caller.say("Yes.")
    assert await booked(caller) == [] and (await caller.state()).pending is None


@pytest.mark.parametrize("answer", ['{"day": "friday", "time": "8 pm", "people": 2}',
                                    '{"day": "friday", "time": "20:00", "people": 0}', "Sure thing!"])
async def test_fields_outside_the_schema_are_not_used(restaurant, answer):
    """A server that ignores the response format, or a model that writes past it: the fields are
    not used, the turn goes on through the model, and nothing is read back or booked."""
    make, booked, llm = restaurant
    caller = make()
    await caller.say("A table for two on Friday at 7 pm, my name is NAME.")
    llm.script = fields_model(answer)
    said = await caller.say("Could we do eight instead?")
    assert "Shall I go ahead?" not in said
    records = await caller.agent.store.records("alice", caller.session)
    assert records[-1]["llm_calls"][0]["purpose"] == "change_fields" and records[-1]["llm_calls"][0]["error"]
    await caller.say("Yes.")
    assert await booked(caller) == []


async def test_a_change_read_by_code_is_not_screened_unless_the_model_loop_answers_it(restaurant):
    """A guard that blocks everything: a change the rules call a change, read as fields, is read
    back by code without asking it; when the fields are unusable and the model loop would answer,
    the guard is asked first, and its block is the answer (nothing spoken by the model)."""
    make, booked, llm = restaurant
    caller = make(guard=True)
    llm.script = lambda body: "ALLOW" if is_guard(body) else talker(body)
    await caller.say("A table for two on Friday at 7 pm, my name is NAME.")
    fields = fields_model({"day": "friday", "time": "20:00", "people": 2})
    llm.script = lambda body: "BLOCK" if is_guard(body) else fields(body)
    asked = len(llm.requests)
    said = await caller.say("Could we do eight instead?")
    assert "eight p m" in said and said.endswith("Shall I go ahead?")
    assert not any(is_guard(body) for body in llm.requests[asked:])
    record = (await caller.agent.store.records("alice", caller.session))[-1]
    assert record["guard"] == {"allowed": True, "reason": "a change to the read-back"}

    unusable = fields_model("not JSON")
    llm.script = lambda body: "BLOCK" if is_guard(body) else unusable(body)
    said = await caller.say("Actually, could we do nine instead?")
    assert said == ""  # blocked: the fixed sentence comes as a Blocked event, not as deltas
    record = (await caller.agent.store.records("alice", caller.session))[-1]
    assert record["outcome"] == "blocked" and record["guard"]["late"] is True
    await caller.say("Yes.")
    assert await booked(caller) == []


async def test_a_complete_request_in_everyday_words_is_read_back_at_once(restaurant):
    make, booked, _ = restaurant
    caller = make()
    said = await caller.say("Hi, could I reserve a table on Friday at seven pm? I'm NAME. "
                            "There will be four of us.")
    assert "table for four" in said and "Friday, December fourth at seven p m" in said
    await caller.say("yes")
    assert [b["time"] for b in await booked(caller)] == ["19:00"]


async def test_a_caller_who_never_says_yes_gets_nothing_booked(restaurant):
    make, booked, _ = restaurant
    caller = make()
    await caller.say("A table for two tomorrow at eight pm, my name is NAME.")
    for words in ("Hmm, let me think.", "Is there parking?", "Maybe.", "I'll call back later."):
        await caller.say(words)
    assert await booked(caller) == []


async def test_a_bare_no_in_a_booking_is_never_blocked_but_off_topic_still_is(restaurant):
    make, booked, llm = restaurant
    caller = make(guard=True)
    llm.script = lambda body: "BLOCK" if is_guard(body) else talker(body)  # a guard that blocks anything
    said = await caller.say("yes")  # nothing ongoing: screened, and this guard blocks
    assert said == ""
    llm.script = talker
    await caller.say("A table for two tomorrow at seven pm, my name is NAME.")
    llm.script = lambda body: "BLOCK" if is_guard(body) else talker(body)
    said = await caller.say("No.")
    assert "What would you like to change?" in said  # a dialogue act in a task: not screened
    said = await caller.say("Write me a Python function that sorts a list.")
    assert said == ""  # blocked: the fixed sentence comes as a Blocked event, not as deltas
    assert await booked(caller) == []


async def test_the_handoff_summary_holds_collected_fields_never_the_callers_words(restaurant):
    make, _, _ = restaurant
    caller = make()
    events_text = await caller.say("A table for two tomorrow at seven pm, my name is NAME.")
    assert "Shall I go ahead?" in events_text
    request = brain_pb2.RespondRequest(session_id=caller.session, turn_id="t-human", user_id="alice",
                                       text="Let me talk to a person, my number is 555 0100.")
    events = [event async for event in caller.agent.respond(request)]
    [handoff] = [e.handoff for e in events if e.WhichOneof("event") == "handoff"]
    assert "555" not in handoff.summary and caller.name in handoff.summary
    assert "Pending, not executed" in handoff.summary


async def test_the_mcp_tools_load_through_the_profile_with_a_mcp_source(reservations_url):
    source = McpToolSource(reservations_url)
    try:
        names = sorted(t.spec.name for t in await source.load_tools())
        assert names == ["cancel_reservation", "create_reservation", "find_slots", "get_reservation"]
    finally:
        await source.aclose()


async def test_a_read_back_by_code_alone_stores_no_tool_steps_and_the_next_prompt_shows_slots(restaurant):
    make, _, llm = restaurant
    caller = make()
    said = await caller.say("A table for two on Friday at seven pm, my name is NAME.")
    assert said.endswith("Shall I go ahead?")
    history = await caller.agent.store.load("alice", caller.session)
    # The hook's find_slots and create_reservation never reached a prompt: nothing to cache.
    assert history.turns[-1].steps == []
    llm.requests.clear()
    await caller.say("What is the address?")  # the model answers; its prompt shows the state
    [prompt] = [r for r in llm.requests if r.get("max_tokens") != 1 and not is_guard(r)
                and "response_format" not in r][:1]  # not the prefill, the guard or the yes/no check
    state = next(m["content"] for m in prompt["messages"] if str(m["content"]).startswith("Session state:"))
    assert '"awaiting_confirmation": "a table for 2 on Friday' in state
    assert '"S1": "Friday, December 4th at 7 pm"' in state and '"S2": ' in state
    assert not any(m.get("role") == "tool" for m in prompt["messages"])
