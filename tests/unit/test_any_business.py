"""Any business by configuration: a helpdesk the brain has never seen, through its profile only.

A scripted model over the OpenAI-compatible HTTP API, an IT-helpdesk MCP server
(tests/fakes/helpdesk_mcp.py: other tool names and shapes than the restaurant,
a bearer token, real MCP over HTTP), a real redis-server. Each scenario is one
rule of confirm-before-write, checked on what the MCP server recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import pytest
import redis.asyncio as aioredis
import yaml

from services.brain.agent import Agent
from services.brain.config import BrainSettings
from services.brain.guard import TopicGuard
from services.brain.llm import OpenAIChatClient
from services.brain.profile import parse_profile
from services.brain.session_store import SessionStore
from services.brain.toolbox import build_registry
from tests.fakes.fake_llm import is_guard, last_user_text
from tests.fakes.helpdesk_mcp import PROFILE, Helpdesk
from voicebot.v1 import brain_pb2

TOKEN = "desk-secret"
PRINTER = {"summary": "the printer on floor two is jammed", "priority": "high"}


@pytest.fixture(scope="module")
def helpdesk():
    desk = Helpdesk(token=TOKEN).start()
    yield desk
    desk.stop()


def tool_results(body):
    """This turn's tool results (after the caller's last words)."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return [json.loads(m["content"]) for m in messages[last_user + 1:] if m["role"] == "tool"]


def desk_model(body):
    """A model that calls the tools a helpdesk needs; it also tries to talk like a confirmation."""
    if is_guard(body):
        return "ALLOW"
    said, results = last_user_text(body).lower(), tool_results(body)
    if results:
        return "Here is what I found."
    if "printer" in said and "ticket" in said:
        return {"tool_calls": [{"name": "open_ticket", "arguments": PRINTER}]}
    if "low" in said:
        return {"tool_calls": [{"name": "open_ticket", "arguments": {**PRINTER, "priority": "low"}}]}
    if "articles" in said:
        return {"tool_calls": [{"name": "search_articles", "arguments": {"query": "printer"}}]}
    if "my tickets" in said:
        return {"tool_calls": [{"name": "my_tickets", "arguments": {}}]}
    if "close t1" in said:
        return {"tool_calls": [{"name": "close_ticket", "arguments": {"ticket_id": "T1"}}]}
    if "prepare" in said:
        return "I have prepared a high priority ticket for you. Shall I open it?"
    return "It usually takes about a day."


class Caller:
    def __init__(self, agent: Agent, session: str | None = None) -> None:
        self.agent, self.session, self.turns = agent, session or uuid.uuid4().hex, 0

    async def say(self, text: str, heard_only: str | None = None) -> list[brain_pb2.RespondEvent]:
        """``heard_only``: the caller cut the previous reply off after these words (barge-in)."""
        self.turns += 1
        previous = None
        if heard_only is not None:
            previous = brain_pb2.SpokenPart(turn_id=f"t{self.turns - 1}", text=heard_only, interrupted=True)
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=f"t{self.turns}",
                                           user_id="alice", text=text, previous_reply=previous)
        return [event async for event in self.agent.respond(request)]

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
    scripted_llm.script = desk_model
    yield Caller(agent), helpdesk, scripted_llm
    await chat.aclose()
    await redis.aclose()
    for source in sources:
        await source.aclose()


def spoken(events):
    return "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")


def final(events):
    return events[-1].final


# ---- what the model is offered ------------------------------------------------
async def test_every_tool_is_offered_under_its_own_name_writes_included(desk):
    caller, _, llm = desk
    await caller.say("how long does a repair take?")
    offered = sorted(t["function"]["name"] for t in llm.requests[-1]["tools"])
    assert offered == ["close_ticket", "my_tickets", "open_ticket", "search_articles"]  # excluded: gone
    schema = next(t for t in llm.requests[-1]["tools"] if t["function"]["name"] == "open_ticket")
    assert "idempotency_key" not in schema["function"]["parameters"]["properties"]  # code fills it


async def test_read_only_tools_run_freely(desk):
    caller, helpdesk, _ = desk
    events = await caller.say("any articles about printers?")
    assert [c[0] for c in helpdesk.calls] == ["search_articles"]
    assert spoken(events) == "Here is what I found." and final(events).dialog_state == "listen"


# ---- confirm before write ----------------------------------------------------
async def test_a_write_is_read_back_by_code_and_runs_once_after_yes(desk):
    caller, helpdesk, _ = desk
    events = await caller.say("my printer is jammed, please open a ticket")
    assert helpdesk.writes() == []  # the call became a pending action, nothing ran
    assert spoken(events) == ("Let me check: open a high priority ticket about the printer on floor two "
                              "is jammed. Shall I go ahead?")  # the profile's template, filled by code
    assert (await caller.state()).pending.args == PRINTER
    events = await caller.say("yes please")
    [(name, args)] = helpdesk.writes()
    assert name == "open_ticket" and args["summary"] == PRINTER["summary"] and args["priority"] == "high"
    assert args["idempotency_key"].startswith(caller.session)  # chosen by code
    assert "T1" in spoken(events) and final(events).dialog_state == "done"
    state = await caller.state()
    assert state.pending is None and "T1" in state.refs


async def test_a_further_yes_after_the_write_runs_nothing(desk):
    caller, helpdesk, _ = desk
    await caller.say("my printer is jammed, please open a ticket")
    await caller.say("yes")
    await caller.say("yes")
    await caller.say("yes, do it")
    assert len(helpdesk.writes()) == 1


async def test_yes_runs_only_what_the_immediately_preceding_turn_read_back(desk):
    caller, helpdesk, _ = desk
    await caller.say("my printer is jammed, please open a ticket")
    events = await caller.say("how long will that take?")  # something else was said since
    assert spoken(events) == "It usually takes about a day."
    events = await caller.say("yes")
    assert helpdesk.writes() == []  # not heard just now: the read-back comes again instead
    assert "open a high priority ticket" in spoken(events) and "Shall I go ahead?" in spoken(events)
    await caller.say("yes")
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]


async def test_a_yes_over_the_details_of_the_read_back_gets_it_read_back_again(desk):
    caller, helpdesk, _ = desk
    await caller.say("my printer is jammed, please open a ticket")
    events = await caller.say("yes", heard_only="Let me check: open a high priority")
    assert helpdesk.writes() == [] and "Shall I go ahead?" in spoken(events)
    await caller.say("yes")
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]


async def test_a_yes_over_the_closing_question_runs_what_was_heard(desk):
    caller, helpdesk, _ = desk
    events = await caller.say("my printer is jammed, please open a ticket")
    heard = spoken(events).split(" Shall I")[0]  # the whole action, then the caller's yes
    await caller.say("yes", heard_only=heard + " Shall")
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]


async def test_a_correction_makes_a_new_pending_action_and_the_old_one_is_gone(desk):
    caller, helpdesk, _ = desk
    await caller.say("my printer is jammed, please open a ticket")
    first = (await caller.state()).pending
    events = await caller.say("no, make it low priority")
    second = (await caller.state()).pending
    assert helpdesk.writes() == [] and second.id != first.id and second.args["priority"] == "low"
    assert "open a low priority ticket" in spoken(events)
    await caller.say("yes")
    [(_, args)] = helpdesk.writes()
    assert args["priority"] == "low"  # the corrected action, never the rejected one


async def test_a_correction_the_model_does_not_turn_into_a_call_leaves_nothing_to_confirm(desk):
    caller, helpdesk, llm = desk
    await caller.say("my printer is jammed, please open a ticket")
    llm.script = lambda b: "ALLOW" if is_guard(b) else "Sure, I changed it to low priority. Shall I open it?"
    await caller.say("actually, make it low priority instead")
    assert (await caller.state()).pending is None
    await caller.say("yes")
    assert helpdesk.writes() == []  # a proposal the model only talked about cannot be confirmed


async def test_a_blocked_turn_after_the_read_back_means_a_yes_gets_the_read_back_again(desk):
    caller, helpdesk, llm = desk
    agent = caller.agent
    agent.guard = TopicGuard(agent.chat, agent.profile.purpose)
    await caller.say("my printer is jammed, please open a ticket")
    llm.script = lambda body: "BLOCK" if is_guard(body) else desk_model(body)
    await caller.say("Actually I'd rather have it as a low priority one, you know what I mean?")
    llm.script = desk_model
    events = await caller.say("yes")
    assert helpdesk.writes() == []  # the bot's last words were the blocked sentence, not the read-back
    assert "Shall I go ahead?" in spoken(events)
    await caller.say("yes")
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]


async def test_a_bare_no_drops_the_pending_action_and_asks_what_to_change(desk):
    caller, helpdesk, llm = desk
    await caller.say("my printer is jammed, please open a ticket")
    before = len(llm.requests)
    events = await caller.say("no")
    assert len(llm.requests) == before  # code answered, no model call
    assert "What would you like to change?" in spoken(events)
    assert (await caller.state()).pending is None
    await caller.say("yes")
    assert helpdesk.writes() == []


async def test_a_reply_that_sounds_like_a_proposal_cannot_lead_to_a_write(desk):
    caller, helpdesk, _ = desk
    events = await caller.say("please prepare something for my printer")
    assert "Shall I open it?" in spoken(events) and (await caller.state()).pending is None
    await caller.say("yes")
    await caller.say("yes please, open it")
    assert helpdesk.writes() == []


async def test_references_name_entities_and_a_write_without_a_template_is_read_back_from_its_title(desk):
    caller, helpdesk, llm = desk
    events = await caller.say("what are my tickets?")
    results = tool_results(llm.requests[-1])
    [ticket] = results[0]["result"]["tickets"]
    assert ticket["ticket_id"] == "T1" and "reporter_phone" not in ticket  # no internal id, no phone
    events = await caller.say("close t1 please")
    assert spoken(events) == ("Let me check: close a ticket for your ticket about a broken monitor. "
                              "Shall I go ahead?")
    await caller.say("yes")
    assert helpdesk.writes() == [("close_ticket", {"ticket_id": "tkt-0001"})]  # the real id, by code


async def test_a_reference_never_issued_in_this_session_is_refused(desk):
    caller, helpdesk, llm = desk
    await caller.say("close t1 please")  # T1 was never shown in this conversation
    assert (await caller.state()).pending is None and helpdesk.writes() == []
    error = tool_results(llm.requests[-1])[0]["error"]
    assert "not a reference from this conversation" in error


async def test_an_unknown_tool_error_names_only_the_tools_offered(desk):
    caller, _, llm = desk
    llm.script = lambda b: "ALLOW" if is_guard(b) else ("Okay." if tool_results(b) else {
        "tool_calls": [{"name": "forbidden_tool", "arguments": {}}]})
    await caller.say("do the forbidden thing")
    error = tool_results(llm.requests[-1])[0]["error"]
    assert "forbidden_tool" in error
    assert "available: close_ticket, my_tickets, open_ticket, search_articles" in error


# ---- failures ---------------------------------------------------------------
async def test_a_refused_write_is_not_retried_and_nothing_stays_pending(desk):
    caller, helpdesk, _ = desk
    await caller.say("my printer is jammed, please open a ticket")
    helpdesk.plan["open_ticket"] = ["refuse"]
    await caller.say("yes")
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]  # once, not retried
    state = await caller.state()
    assert state.pending is None and "refused" in state.last_outcome
    await caller.say("yes")
    assert len(helpdesk.writes()) == 1


async def test_a_write_that_times_out_with_a_key_is_retried_with_the_same_key(desk):
    caller, helpdesk, _ = desk
    await caller.say("my printer is jammed, please open a ticket")
    helpdesk.plan["open_ticket"] = ["timeout"]
    events = await caller.say("yes")
    keys = {args["idempotency_key"] for _, args in helpdesk.writes()}
    assert len(helpdesk.writes()) >= 2 and len(keys) == 1
    assert final(events).dialog_state == "done"


async def test_a_write_without_a_key_that_times_out_hands_off_and_is_never_retried(desk):
    caller, helpdesk, _ = desk
    await caller.say("what are my tickets?")
    await caller.say("close t1 please")
    helpdesk.plan["close_ticket"] = ["timeout"]
    events = await caller.say("yes")
    assert [w[0] for w in helpdesk.writes()] == ["close_ticket"]  # the outcome is unknown: once
    [handoff] = [e.handoff for e in events if e.WhichOneof("event") == "handoff"]
    assert handoff.reason == "unknown_outcome" and "close a ticket" in handoff.summary


async def test_a_tool_server_that_is_down_makes_the_bot_say_it_cannot_check(redis_url, scripted_llm,
                                                                           monkeypatch):
    desk = Helpdesk(token=TOKEN).start()
    monkeypatch.setenv("HELPDESK_URL", desk.url)
    monkeypatch.setenv("HELPDESK_TOKEN", TOKEN)
    profile = parse_profile(yaml.safe_load(PROFILE))
    registry, sources = await build_registry(profile, wait_s=2)
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    agent = Agent(BrainSettings(llm_base_url=scripted_llm.base_url), chat, SessionStore(redis, 60),
                  tools=registry, profile=profile, sleep=lambda _s: asyncio.sleep(0))
    scripted_llm.script = desk_model
    try:
        desk.stop()
        events = await Caller(agent).say("any articles about printers?")
        assert spoken(events).endswith("Sorry, I can't reach the ticket system right now.")
    finally:
        await chat.aclose()
        await redis.aclose()
        for source in sources:
            await source.aclose()


async def test_the_mcp_server_is_reached_with_the_profiles_auth_header(helpdesk, monkeypatch):
    monkeypatch.setenv("HELPDESK_URL", helpdesk.url)
    monkeypatch.setenv("HELPDESK_TOKEN", "wrong")
    with pytest.raises(Exception, match="helpdesk"):
        await build_registry(parse_profile(yaml.safe_load(PROFILE)), wait_s=0.5)


# ---- preemptive turns (started before the endpoint) -------------------------------
async def preemptive(caller: Caller, text: str):
    """Start a turn that is not committed yet; returns (events so far, task, committed)."""
    caller.turns += 1
    request = brain_pb2.RespondRequest(session_id=caller.session, turn_id=f"t{caller.turns}",
                                       user_id="alice", text=text)
    committed, events = asyncio.Event(), []

    async def run():
        async for event in caller.agent.respond(request, committed):
            events.append(event)

    return events, asyncio.create_task(run()), committed


async def test_a_discarded_preemptive_turn_runs_no_tools_and_leaves_no_history(desk):
    caller, helpdesk, _ = desk
    _, task, _ = await preemptive(caller, "any articles about printers?")
    await asyncio.sleep(0.5)  # the model asked for a tool: it waits for the commit
    assert helpdesk.calls == []
    task.cancel()  # the endpoint heard other words: discarded
    with contextlib.suppress(asyncio.CancelledError):
        await task
    history = await caller.agent.store.load("alice", caller.session)
    assert history.turns == [] and helpdesk.calls == []


async def test_a_committed_preemptive_turn_is_an_ordinary_turn(desk):
    caller, helpdesk, _ = desk
    events, task, committed = await preemptive(caller, "any articles about printers?")
    await asyncio.sleep(0.3)
    assert helpdesk.calls == []
    committed.set()
    await asyncio.wait_for(task, 10)
    assert [c[0] for c in helpdesk.calls] == ["search_articles"]
    assert spoken(events) == "Here is what I found." and events[-1].WhichOneof("event") == "final"
    [stored] = (await caller.agent.store.load("alice", caller.session)).turns
    assert stored.user == "any articles about printers?"


async def test_a_preemptive_yes_never_writes_before_its_commit(desk):
    caller, helpdesk, _ = desk
    await caller.say("my printer is jammed, please open a ticket")
    _, task, _ = await preemptive(caller, "yes")
    await asyncio.sleep(0.5)
    assert helpdesk.writes() == []
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert helpdesk.writes() == [] and (await caller.state()).pending is not None  # still pending
    await caller.say("yes")  # the real turn, after the endpoint
    assert [w[0] for w in helpdesk.writes()] == ["open_ticket"]
