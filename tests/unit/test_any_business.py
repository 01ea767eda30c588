"""Any business by configuration: a helpdesk the brain has never seen, with no task settings at all.

A scripted model over the OpenAI-compatible HTTP API that only *reads* (it answers
the JSON reading schema), an IT-helpdesk MCP server (tests/fakes/helpdesk_mcp.py:
other tool names and shapes than the restaurant, a bearer token, real MCP over
HTTP), a real redis-server. Its tasks come from the tools' input schemas alone.
Each scenario is one rule of the task engine, checked on what the MCP server
recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import uuid

import pytest
import redis.asyncio as aioredis
import yaml

from tests.fakes.fake_llm import is_guard
from tests.fakes.helpdesk_mcp import PROFILE, Helpdesk
from voicebot.brain.act.toolbox import build_registry
from voicebot.brain.business.profile import parse_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.common.speech_text import speakable
from voicebot.v1 import brain_pb2

TOKEN = "desk-secret"
PRINTER = {"summary": "the printer on floor two is jammed", "priority": "high"}


@pytest.fixture(scope="module")
def helpdesk():
    desk = Helpdesk(token=TOKEN).start()
    yield desk
    desk.stop()


def caller_words(body) -> str:
    """The caller's words in a reading request."""
    return body["messages"][-1]["content"].split("The caller said: ", 1)[-1]


def desk_reader(body):
    """A model that only reads: the task and the words for each field, as JSON."""
    if is_guard(body):
        return "ALLOW"
    assert body.get("response_format"), "the model is only ever asked for a reading"
    said = caller_words(body).lower()
    reading: dict = {"intent": "other"}
    if ("open" in said and "ticket" in said) or "printer" in said:
        reading["intent"] = "open_ticket"
    if "close" in said:
        reading["intent"] = "close_ticket"
    if "printer" in said:
        reading["summary"] = "the printer on floor two is jammed"
    if "laptop" in said:
        reading["summary"] = "my laptop will not start"
    for level in ("low", "normal", "high"):
        if level in said:
            reading["priority"] = level
    if "urgent" in said:
        reading["priority"] = "extreme"  # not one of the schema's values: code must drop it
    return json.dumps(reading)


class Caller:
    def __init__(self, agent: Agent, session: str | None = None) -> None:
        self.agent, self.session, self.turns = agent, session or uuid.uuid4().hex, 0
        self.last: tuple[str, str] | None = None  # the last reply: (turn id, text)

    def report(self, heard_only: str | None = None) -> brain_pb2.SpokenPart | None:
        """The gateway's report of the last reply: heard to the end, or ``heard_only`` these words
        of it (cut off by a barge-in or a failure)."""
        if self.last is None:
            return None
        turn_id, text = self.last
        heard = text if heard_only is None else heard_only
        return brain_pb2.SpokenPart(turn_id=turn_id, text=heard, interrupted=heard_only is not None)

    async def say(self, text: str, heard_only: str | None = None) -> list[brain_pb2.RespondEvent]:
        self.turns += 1
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=f"t{self.turns}", user_id="alice",
                                           text=text, previous_reply=self.report(heard_only))
        events = [event async for event in self.agent.respond(request)]
        self.last = (request.turn_id, reply_text(events))
        return events

    async def state(self):
        return (await self.agent.store.load("alice", self.session)).state


@pytest.fixture
async def desk(helpdesk, redis_url, scripted_llm, monkeypatch):
    monkeypatch.setenv("HELPDESK_URL", helpdesk.url)
    monkeypatch.setenv("HELPDESK_TOKEN", TOKEN)
    helpdesk.reset()
    profile = parse_profile(yaml.safe_load(PROFILE))
    registry, sources = await build_registry(profile, wait_s=2)
    redis = aioredis.Redis.from_url(redis_url)
    settings = BrainSettings(llm_base_url=scripted_llm.base_url, llm_deadline_s=0.5)
    chat = OpenAIChatClient(settings.llm_base_url, "m", deadline_s=0.5)

    async def no_sleep(_seconds):
        return None

    agent = Agent(settings, chat, SessionStore(redis, 60), tools=registry, profile=profile, sleep=no_sleep)
    scripted_llm.script = desk_reader
    yield Caller(agent), helpdesk, scripted_llm
    await chat.aclose()
    await redis.aclose()
    for source in sources:
        await source.aclose()


def spoken(events):
    return "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")


def reply_text(events):
    """What the gateway would play: the text of the deltas, or the blocked sentence."""
    return spoken(events) + "".join(e.blocked.text for e in events if e.WhichOneof("event") == "blocked")


def final(events):
    return events[-1].final


# ---- tasks from the tools' schemas -------------------------------------------------
async def test_every_write_tool_is_a_task_built_from_its_schema(desk):
    caller, _, _ = desk
    tasks = caller.agent.forms.tasks
    assert sorted(tasks) == ["close_ticket", "open_ticket"]
    open_ticket = tasks["open_ticket"]
    assert [(f.name, f.type, f.required) for f in open_ticket.fields] == [
        ("summary", "text", True), ("priority", "choice", True)]
    assert open_ticket.field("priority").choices == ("low", "normal", "high")  # from the pattern
    assert [(f.name, f.type) for f in tasks["close_ticket"].fields] == [("ticket_id", "reference")]


async def test_a_request_in_one_line_is_read_back_by_code_and_runs_once_after_a_plain_yes(desk):
    caller, helpdesk, _ = desk
    events = await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    assert spoken(events) == ("Let me check: open a high priority ticket about the printer on floor two "
                              "is jammed. Shall I go ahead?")
    assert helpdesk.writes() == []
    events = await caller.say("Yes, please.")
    [(name, args)] = helpdesk.writes()
    assert name == "open_ticket" and {k: args[k] for k in PRINTER} == PRINTER
    assert "someone will contact you today" in spoken(events)
    assert "555" not in spoken(events)  # a hidden field never reaches the caller


async def test_code_asks_for_each_missing_field_with_one_question(desk):
    caller, helpdesk, _ = desk
    assert spoken(await caller.say("I need to open a ticket.")) == "What is the summary?"
    said = spoken(await caller.say("My laptop will not start."))
    assert said == "Which priority would you like: low, normal or high?"
    said = spoken(await caller.say("Normal."))
    assert "normal priority ticket about my laptop will not start" in said.lower()
    await caller.say("yes")
    [(_, args)] = helpdesk.writes()
    assert (args["summary"], args["priority"]) == ("My laptop will not start", "normal")


async def test_a_value_outside_the_schema_is_never_used_and_the_field_is_asked(desk):
    caller, helpdesk, _ = desk
    said = spoken(await caller.say("The printer on floor two is jammed, open a ticket, it is urgent."))
    assert said == "Which priority would you like: low, normal or high?"
    assert helpdesk.writes() == []


async def test_a_further_yes_after_the_write_runs_nothing(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    await caller.say("yes")
    for words in ("yes", "yes please", "go ahead"):
        await caller.say(words)
    assert len(helpdesk.writes()) == 1


@pytest.mark.parametrize("answer", ["Okay?", "Hmm.", "Maybe.", "Yes?"])
async def test_only_a_plain_yes_runs_the_write(desk, answer):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    said = spoken(await caller.say(answer))
    assert said.startswith("Just to be sure: open a high priority ticket") and helpdesk.writes() == []


async def test_a_yes_that_carries_a_change_is_a_new_read_back_never_the_old_write(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    said = spoken(await caller.say("Yes, but make it low."))
    assert "a low priority ticket" in said and helpdesk.writes() == []
    await caller.say("Yes.")
    [(_, args)] = helpdesk.writes()
    assert args["priority"] == "low"


async def test_a_yes_over_the_details_of_the_read_back_gets_it_read_back_again(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    said = spoken(await caller.say("yes", heard_only="Let me check: open a"))
    assert said.startswith("Just to be sure") and helpdesk.writes() == []
    await caller.say("yes")
    assert len(helpdesk.writes()) == 1


async def test_a_yes_over_the_closing_question_runs_what_was_heard(desk):
    caller, helpdesk, _ = desk
    events = await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    heard = spoken(events).removesuffix(" Shall I go ahead?")
    await caller.say("yes", heard_only=heard)
    assert len(helpdesk.writes()) == 1


async def test_a_yes_when_only_the_closing_question_was_played_gets_the_read_back_again(desk):
    """TTS failed on the read-back's first sentence: the caller heard "Shall I go ahead?" alone."""
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    said = spoken(await caller.say("yes", heard_only="Shall I go ahead?"))
    assert said.startswith("Just to be sure: open a high priority ticket") and helpdesk.writes() == []
    await caller.say("yes")
    assert len(helpdesk.writes()) == 1


async def test_a_yes_without_a_report_of_the_read_back_gets_it_read_back_again(desk):
    """A resumed session (a new socket, a restarted gateway) has no record of what was played:
    nothing says the read-back was heard."""
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    resumed = brain_pb2.RespondRequest(session_id=caller.session, turn_id="t2", user_id="alice", text="yes")
    said = spoken([event async for event in caller.agent.respond(resumed)])
    assert said.startswith("Just to be sure: open a high priority ticket") and helpdesk.writes() == []


async def test_a_report_of_another_reply_is_no_evidence_for_the_read_back(desk):
    caller, helpdesk, _ = desk
    events = await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    other = brain_pb2.SpokenPart(turn_id="t0", text=reply_text(events))
    request = brain_pb2.RespondRequest(session_id=caller.session, turn_id="t2", user_id="alice", text="yes",
                                       previous_reply=other)
    [event async for event in caller.agent.respond(request)]
    assert helpdesk.writes() == []


async def test_a_bare_no_drops_the_action_and_asks_what_to_change(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    said = spoken(await caller.say("No."))
    assert said == "Okay, nothing is done. What would you like to change?"
    assert (await caller.state()).pending is None
    await caller.say("yes")
    assert helpdesk.writes() == []


async def test_a_new_ticket_gets_a_reference_and_closing_it_needs_its_own_yes(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    await caller.say("yes")
    said = spoken(await caller.say("Please close it."))
    assert said == "Let me check: close a ticket for your ticket about the printer on floor two is jammed. " \
                   "Shall I go ahead?"
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]
    await caller.say("yes")
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket", "close_ticket"]
    assert helpdesk.writes()[1][1] == {"ticket_id": "tkt-0002"}  # the real id, never the reference


async def test_for_random_values_the_read_back_heard_is_the_call_that_runs(desk):
    """A property: whatever values the caller gives, what runs is what was read back."""
    caller, helpdesk, llm = desk
    rng = random.Random(7)
    words = ["printer", "screen", "mouse", "network", "badge", "vpn", "keyboard", "camera"]
    for _ in range(12):
        summary = " ".join(rng.sample(words, 2)) + f" number {rng.randint(1, 999)}"
        priority = rng.choice(["low", "normal", "high"])
        llm.script = lambda body, s=summary, p=priority: "ALLOW" if is_guard(body) else json.dumps(
            {"intent": "open_ticket", "summary": s, "priority": p})
        caller.session, before = uuid.uuid4().hex, len(helpdesk.writes())
        said = spoken(await caller.say(f"Open a {priority} ticket about {summary}, please."))
        await caller.say("Yes.")
        [(_, args)] = helpdesk.writes()[before:]
        assert speakable(f"open a {args['priority']} priority ticket about {args['summary']}") in said
        assert (args["summary"], args["priority"]) == (summary, priority)


# ---- failures ---------------------------------------------------------------
async def test_a_refused_write_is_not_retried_and_nothing_stays_pending(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    helpdesk.plan["open_ticket"] = ["refuse"]
    said = spoken(await caller.say("yes"))
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]  # once, not retried
    assert "nothing was done" in said
    state = await caller.state()
    assert state.pending is None and "refused" in state.last_outcome
    await caller.say("yes")
    assert len(helpdesk.writes()) == 1


async def test_a_write_that_times_out_with_a_key_is_retried_with_the_same_key(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    helpdesk.plan["open_ticket"] = ["timeout"]
    events = await caller.say("yes")
    keys = {args["idempotency_key"] for _, args in helpdesk.writes()}
    assert len(helpdesk.writes()) >= 2 and len(keys) == 1
    assert final(events).dialog_state == "done"


async def test_a_write_without_a_key_that_times_out_hands_off_and_is_never_retried(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    await caller.say("yes")
    await caller.say("Please close it.")
    helpdesk.plan["close_ticket"] = ["timeout"]
    events = await caller.say("yes")
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket", "close_ticket"]  # unknown outcome: once
    [handoff] = [e.handoff for e in events if e.WhichOneof("event") == "handoff"]
    assert handoff.reason == "unknown_outcome"


async def test_the_mcp_server_is_reached_with_the_profiles_auth_header(helpdesk, monkeypatch):
    monkeypatch.setenv("HELPDESK_URL", helpdesk.url)
    monkeypatch.setenv("HELPDESK_TOKEN", "wrong")
    with pytest.raises(Exception, match="helpdesk"):
        await build_registry(parse_profile(yaml.safe_load(PROFILE)), wait_s=0.5)


async def test_a_tool_server_that_is_down_makes_the_bot_say_it_cannot_check(redis_url, scripted_llm,
                                                                           monkeypatch):
    desk = Helpdesk(token=TOKEN).start()
    monkeypatch.setenv("HELPDESK_URL", desk.url)
    monkeypatch.setenv("HELPDESK_TOKEN", TOKEN)
    profile = parse_profile({**yaml.safe_load(PROFILE), "knowledge": {"tools": ["search_articles"]}})
    registry, sources = await build_registry(profile, wait_s=2)
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    agent = Agent(BrainSettings(llm_base_url=scripted_llm.base_url), chat, SessionStore(redis, 60),
                  tools=registry, profile=profile, sleep=lambda _s: asyncio.sleep(0))
    scripted_llm.script = desk_reader
    try:
        caller = Caller(agent)
        said = spoken(await caller.say("Are there any articles about printers?"))
        assert said == "I found Restart the print spooler."  # a knowledge tool's answer
        desk.stop()
        said = spoken(await caller.say("Are there any articles about printers?"))
        assert "I don't have that information" in said  # never a guess
    finally:
        await chat.aclose()
        await redis.aclose()
        for source in sources:
            await source.aclose()


# ---- preemptive turns (started before the endpoint) -------------------------------
async def preemptive(caller: Caller, text: str):
    """Start a turn that is not committed yet; returns (events so far, task, committed)."""
    caller.turns += 1
    request = brain_pb2.RespondRequest(session_id=caller.session, turn_id=f"t{caller.turns}",
                                       user_id="alice", text=text, previous_reply=caller.report())
    committed, events = asyncio.Event(), []

    async def run():
        async for event in caller.agent.respond(request, committed):
            events.append(event)

    return events, asyncio.create_task(run()), committed


async def test_a_preemptive_yes_never_writes_before_its_commit(desk):
    caller, helpdesk, _ = desk
    await caller.say("The printer on floor two is jammed, please open a high priority ticket.")
    _, task, _ = await preemptive(caller, "yes")
    await asyncio.sleep(0.5)
    assert helpdesk.writes() == []
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert helpdesk.writes() == [] and (await caller.state()).pending is not None  # still pending
    await caller.say("yes")  # the real turn, after the endpoint
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]


async def test_a_committed_preemptive_turn_is_an_ordinary_turn(desk):
    caller, _, _ = desk
    events, task, committed = await preemptive(caller, "I need to open a ticket.")
    await asyncio.sleep(0.3)
    committed.set()
    await asyncio.wait_for(task, 10)
    assert spoken(events) == "What is the summary?" and events[-1].WhichOneof("event") == "final"
    [stored] = (await caller.agent.store.load("alice", caller.session)).turns
    assert stored.user == "I need to open a ticket."


async def test_a_value_the_caller_never_said_is_the_models_invention_and_never_used(desk):
    """Under a schema a small model fills every key; code keeps only words the caller said."""
    caller, helpdesk, llm = desk
    llm.script = lambda body: "ALLOW" if is_guard(body) else json.dumps(
        {"intent": "open_ticket", "summary": "the server room is on fire", "priority": "high"})
    said = spoken(await caller.say("Hello, I need to open a ticket about something."))
    assert said == "What is the summary?" and helpdesk.writes() == []


async def test_a_question_while_a_read_back_waits_never_becomes_a_text_value(desk):
    """A model that copies the question into the free-text field changes nothing: the question
    is answered (here: not known) and the same read-back is said again."""
    caller, helpdesk, llm = desk
    said = spoken(await caller.say("The printer on floor two is jammed, please open a high priority ticket."))
    assert "the printer on floor two is jammed" in said
    llm.script = lambda body: "ALLOW" if is_guard(body) else json.dumps(
        {"intent": "question", "summary": "is the helpdesk open on weekends", "priority": None})
    said = spoken(await caller.say("Before I say yes, is the helpdesk open on weekends?"))
    assert "ticket about the printer on floor two is jammed" in said
    assert "about is the helpdesk open" not in said
    llm.script = desk_reader
    await caller.say("Yes.")
    [(_, args)] = helpdesk.writes()
    assert args["summary"] == "the printer on floor two is jammed"
