"""The brain's turn logic: scenarios with a scripted model over HTTP, fake tools and a real redis-server.

Each test states a scenario and checks the record of what happened (LLM calls,
tool runs, events, history), not the wording.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid

import pytest
import redis.asyncio as aioredis

from services.brain.agent import Agent, LoopLimits
from services.brain.config import BrainSettings
from services.brain.guard import TopicGuard
from services.brain.guard_screen import ExampleScreen
from services.brain.llm import OpenAIChatClient
from services.brain.metrics import READ_BACKS_MIMICKED
from services.brain.profile import Profile
from services.brain.session_store import SessionStore, Turn
from services.brain.tools import FunctionTool, ToolKind, ToolRegistry, ToolSpec
from tests.fakes.engines import FakeSentenceEncoder
from tests.fakes.fake_llm import is_guard, last_user_text
from voicebot.v1 import brain_pb2

SLOTS_SCHEMA = {"type": "object", "properties": {"day": {"type": "string"}, "people": {"type": "integer"}},
                "required": ["day"], "additionalProperties": False}


class ToolLog:
    """Fake tools that record every run."""

    def __init__(self):
        self.runs: list[tuple[str, dict]] = []
        self.started = {name: asyncio.Event() for name in ("find_slots", "opening_hours")}

    def registry(self) -> ToolRegistry:
        async def find_slots(ctx, day, people=2):
            self.runs.append(("find_slots", {"day": day, "people": people}))
            self.started["find_slots"].set()
            # Concurrency check: finishes only if opening_hours runs at the same time (or alone).
            await asyncio.wait_for(self.started["opening_hours"].wait(), 2) if self.pair else None
            return {"slots": ["S1 Tuesday 19:00", "S2 Tuesday 20:30"]}

        async def opening_hours(ctx):
            self.runs.append(("opening_hours", {}))
            self.started["opening_hours"].set()
            await asyncio.wait_for(self.started["find_slots"].wait(), 2) if self.pair else None
            return {"hours": "noon to ten"}

        def create_booking(ctx, slot):
            self.runs.append(("create_booking", {"slot": slot}))
            return {"booked": slot}

        self.pair = False
        return ToolRegistry([
            FunctionTool(ToolSpec("find_slots", "Find free tables", SLOTS_SCHEMA, ToolKind.READ_ONLY),
                         find_slots),
            FunctionTool(ToolSpec("opening_hours", "Opening hours", {"type": "object", "properties": {}},
                                  ToolKind.READ_ONLY), opening_hours),
            FunctionTool(ToolSpec("create_booking", "Book a slot", {
                "type": "object", "properties": {"slot": {"type": "string"}}, "required": ["slot"]},
                ToolKind.IRREVERSIBLE), create_booking),
        ])


@pytest.fixture
async def brain(redis_url, scripted_llm):
    redis = aioredis.Redis.from_url(redis_url)
    clients: list[OpenAIChatClient] = []
    tools = ToolLog()

    def make(guard=False, limits=None, clock=None, with_tools=True, prefill=False):
        settings = BrainSettings(llm_base_url=scripted_llm.base_url, llm_deadline_s=0.5,
                                 prefill_after_reply=prefill)
        chat = OpenAIChatClient(settings.llm_base_url, "m", deadline_s=0.5)
        clients.append(chat)
        kwargs = {"clock": clock} if clock else {}
        return Agent(settings, chat, SessionStore(redis, 60), tools=tools.registry() if with_tools else None,
                     guard=TopicGuard(chat, "answering questions") if guard else None, limits=limits,
                     **kwargs)

    yield make, SessionStore(redis, 60), scripted_llm, tools
    for chat in clients:
        await chat.aclose()
    await redis.aclose()


def request(text, session=None, turn="t1", previous=None):
    return brain_pb2.RespondRequest(session_id=session or uuid.uuid4().hex, turn_id=turn, user_id="alice",
                                    text=text, previous_reply=previous)


async def run(agent, req):
    return [e async for e in agent.respond(req)]


def kinds(events):
    return [e.WhichOneof("event") for e in events]


def spoken(events):
    return "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")


def main_requests(llm):
    return [r for r in llm.requests if not is_guard(r)]


def tool_results(body):
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


# ---- the basic turn -------------------------------------------------------
async def test_reply_streams_and_the_turn_is_stored(brain):
    make, store, llm, _ = brain
    llm.script = lambda b: f"Okay, {last_user_text(b)}."
    req = request("two people")
    events = await run(make(), req)
    assert kinds(events)[-1] == "final" and set(kinds(events)[:-1]) == {"delta"}
    assert events[-1].final.text == "Okay, two people."
    history = await store.load("alice", req.session_id)
    assert [(t.user, t.assistant) for t in history.turns] == [("two people", "Okay, two people.")]


async def test_a_completed_turns_record_is_stored_with_its_history(brain):
    make, store, llm, _ = brain
    llm.script = lambda _b: "We open at noon."
    req = request("when do you open")
    await run(make(), req)
    [record] = await store.records("alice", req.session_id)
    assert (record["turn_id"], record["outcome"], record["reply"]) == ("t1", "completed", "We open at noon.")
    assert "history_write_failed" not in record


async def test_a_failed_history_write_still_ends_the_turn_and_its_record_says_so(brain):
    make, store, llm, _ = brain
    llm.script = lambda _b: "We open at noon."
    agent, req = make(), request("when do you open")

    async def refused(*_args, **_kwargs):
        raise aioredis.ConnectionError("redis went away")

    agent.store.update = refused  # the turn's end only: its read went through
    events = await run(agent, req)
    assert kinds(events)[-1] == "final" and events[-1].final.text == "We open at noon."
    [record] = await store.records("alice", req.session_id)
    assert record["outcome"] == "completed" and record["history_write_failed"] is True
    assert (await store.load("alice", req.session_id)).turns == []


async def test_markdown_is_cleaned_from_the_stream(brain):
    make, _, llm, _ = brain
    llm.script = lambda _b: "**Sure!** Here: `Tuesday` works."
    assert (await run(make(), request("hi")))[-1].final.text == "Sure! Here: Tuesday works."


async def test_llm_down_gives_the_fallback_sentence(brain):
    make, _, llm, _ = brain
    llm.fail_next = 100
    events = await run(make(), request("hello"))
    assert events[-1].final.fallback is True
    assert events[-1].final.text == Profile().sentences.fallback


# ---- tools and the loop's stops --------------------------------------------
async def test_tool_call_then_answer(brain):
    make, _, llm, tools = brain

    def script(body):
        if not tool_results(body):
            return {"tool_calls": [{"name": "find_slots", "arguments": {"day": "Tuesday", "people": 2}}]}
        return "Tuesday at seven or half past eight."

    llm.script = script
    events = await run(make(), request("a table Tuesday"))
    assert tools.runs == [("find_slots", {"day": "Tuesday", "people": 2})]
    assert [e.tool.status for e in events if e.WhichOneof("event") == "tool"] == ["started", "succeeded"]
    assert spoken(events) == "Tuesday at seven or half past eight."


async def test_loop_cap_then_one_last_call_without_tools(brain):
    make, store, llm, tools = brain
    calls = iter(range(100))
    llm.script = lambda b: ("Here is what I found." if "tools" not in b else
                            {"tool_calls": [{"name": "find_slots",
                                             "arguments": {"day": f"day {next(calls)}"}}]})
    req = request("anything free?")
    events = await run(make(), req)
    requests = main_requests(llm)
    assert len(requests) == 4 and ["tools" in r for r in requests] == [True, True, True, False]
    assert len(tools.runs) == 3
    assert spoken(events) == "Here is what I found."
    assert "answer the caller now" in requests[-1]["messages"][-1]["content"]
    record = (await store.records("alice", req.session_id))[-1]
    assert record["outcome"] == "completed" and len(record["llm_calls"]) == 4


async def test_repeated_identical_call_is_not_run_twice(brain):
    make, store, llm, tools = brain
    llm.script = lambda b: ("Sorry, nothing is free." if "tools" not in b else
                            {"tool_calls": [{"name": "find_slots",
                                             "arguments": {"people": 2, "day": "Monday"}}]})
    req = request("Monday?")
    await run(make(), req)
    assert tools.runs == [("find_slots", {"day": "Monday", "people": 2})]
    assert len(main_requests(llm)) == 3  # call, repeat (refused), final without tools
    assert (await store.records("alice", req.session_id))[-1]["stop"] == "repeated_call"


async def test_wall_time_cap(brain):
    make, _, llm, tools = brain
    now = [0.0]

    def clock():
        now[0] += 30.0  # every look at the clock is half a minute later
        return now[0]

    llm.script = lambda b: ("Done." if "tools" not in b else
                            {"tool_calls": [{"name": "find_slots", "arguments": {"day": str(now[0])}}]})
    await run(make(clock=clock), request("slow?"))
    # The first step's tool still runs (its result is what the answer is built from);
    # then time is up and the next call is the last one, without tools.
    assert ["tools" in r for r in main_requests(llm)] == [True, False]
    assert len(tools.runs) == 1


@pytest.mark.parametrize("written", [
    '{"name": "find_slots", "arguments": {"day": "Friday"}}',
    '<tool_call>\n{"name": "find_slots", "arguments": {"day": "Friday"}}\n</tool_call>',
    '```json\n{"name": "find_slots", "arguments": "{\\"day\\": \\"Friday\\"}"}\n```',
])
async def test_tool_call_written_as_text_is_run_not_spoken(brain, written):
    make, _, llm, tools = brain
    llm.script = lambda b: "Friday works." if tool_results(b) else written
    events = await run(make(), request("Friday?"))
    assert tools.runs == [("find_slots", {"day": "Friday", "people": 2})]
    assert spoken(events) == "Friday works."


async def test_a_botched_text_tool_call_is_never_spoken_and_goes_back_as_an_error(brain):
    make, _, llm, tools = brain
    botched = '{{"name": "findslots", "arguments": {"day": "Friday", "people": two}}}'
    llm.script = lambda b: "Which day would you like?" if tool_results(b) else botched
    events = await run(make(), request("Friday?"))
    assert spoken(events) == "Which day would you like?" and tools.runs == []
    error = tool_results(main_requests(llm)[-1])[0]["error"]
    assert "unknown tool 'findslots'" in error and "find_slots" in error


async def test_double_braced_text_call_is_repaired(brain):
    make, _, llm, tools = brain
    llm.script = lambda b: "Friday works." if tool_results(b) else \
        '{{"name": "find_slots", "arguments": {"day": "Friday"}}}}'
    await run(make(), request("Friday?"))
    assert tools.runs == [("find_slots", {"day": "Friday", "people": 2})]


@pytest.mark.parametrize(("call", "error"), [
    ({"name": "find_slots", "arguments": "{day: Friday"}, "not valid JSON"),
    ({"name": "find_slots", "arguments": {"day": 5}}, "day: 5 is not of type 'string'"),
    ({"name": "find_slots", "arguments": {"day": "Fri", "user_id": "bob"}}, "Additional properties"),
    ({"name": "launch_rocket", "arguments": {}}, "unknown tool 'launch_rocket'"),
])
async def test_bad_calls_go_back_to_the_model_as_errors(brain, call, error):
    make, _, llm, tools = brain
    llm.script = lambda b: "Let me try that again." if tool_results(b) else {"tool_calls": [call]}
    events = await run(make(), request("Friday?"))
    result = tool_results(main_requests(llm)[-1])[0]
    assert result["ok"] is False and error in result["error"]
    assert tools.runs == [] and spoken(events) == "Let me try that again."


async def test_a_write_called_by_the_model_never_runs_and_code_reads_it_back(brain):
    make, store, llm, tools = brain
    llm.script = lambda b: "Booked it for you!" if tool_results(b) else {
        "tool_calls": [{"name": "create_booking", "arguments": {"slot": "S1"}}]}
    req = request("book it now")
    events = await run(make(), req)
    assert tools.runs == [] and len(main_requests(llm)) == 1  # the loop ended at the proposal
    said = spoken(events)
    assert "Booked it" not in said and said.endswith("Shall I go ahead?")
    assert "book a slot with slot S1" in said  # built by code from the tool's title and arguments
    state = (await store.load("alice", req.session_id)).state
    assert state.pending.tool == "create_booking" and state.pending.args == {"slot": "S1"}


async def test_read_only_calls_of_one_step_run_concurrently(brain):
    make, _, llm, tools = brain
    agent = make()
    tools.pair = True  # each tool waits until the other has started: only concurrency finishes
    llm.script = lambda b: "Noon to ten, and Tuesday is free." if tool_results(b) else {"tool_calls": [
        {"name": "find_slots", "arguments": {"day": "Tuesday"}}, {"name": "opening_hours", "arguments": {}}]}
    await run(agent, request("hours and Tuesday?"))
    assert all(r["ok"] for r in tool_results(main_requests(llm)[-1]))


# ---- the topic guard ---------------------------------------------------------
async def test_guard_block_cancels_the_loop_and_stores_nothing_it_made(brain):
    make, store, llm, tools = brain
    llm.script = lambda b: ({"content": "BLOCK", "delay_s": 0.3} if is_guard(b) else
                            {"tool_calls": [{"name": "find_slots", "arguments": {"day": "now"}}]})
    req = request("write me a python script")
    events = await run(make(guard=True), req)
    assert kinds(events) == ["blocked"]
    assert tools.runs == []  # the tool waited for the guard, and the guard said no
    [turn] = (await store.load("alice", req.session_id)).turns  # the exchange, and only that
    assert turn.assistant == Profile().sentences.blocked and turn.steps == []
    assert (await store.records("alice", req.session_id))[-1]["outcome"] == "blocked"


async def test_after_a_blocked_turn_the_next_prompt_is_prefilled_too(brain):
    """The blocked exchange is in the next prompt, so it is cached while the caller listens."""
    make, _, llm, _ = brain
    llm.script = lambda b: "BLOCK" if is_guard(b) else "Here is a script."
    agent, req = make(guard=True, prefill=True), request("write me a python script")
    await run(agent, req)
    await asyncio.gather(*agent._background)
    prefill = main_requests(llm)[-1]
    assert prefill["max_tokens"] == 1 and prefill["messages"][-3:] == [
        {"role": "user", "content": "write me a python script"},
        {"role": "assistant", "content": Profile().sentences.blocked},
        {"role": "user", "content": ""}]


async def test_slow_guard_holds_text_back_until_it_passes(brain):
    make, store, llm, _ = brain
    llm.script = lambda b: {"content": "ALLOW", "delay_s": 0.4} if is_guard(b) else "Happy to help."
    req = request("do you have parking?")
    loop = asyncio.get_running_loop()
    started, first_delta_at = loop.time(), None
    async for event in make(guard=True).respond(req):
        if event.WhichOneof("event") == "delta" and first_delta_at is None:
            first_delta_at = loop.time() - started
    # The model answered at once; its text could only leave after the guard's verdict.
    assert first_delta_at is not None and first_delta_at >= 0.35
    record = (await store.records("alice", req.session_id))[-1]
    assert record["guard"]["allowed"] is True and record["outcome"] == "completed"


async def test_ambiguous_question_passes_the_guard(brain):
    make, _, llm, _ = brain
    llm.script = lambda b: "ALLOW" if is_guard(b) else "We are near the station."
    events = await run(make(guard=True), request("is it far?"))
    assert kinds(events)[-1] == "final" and "station" in spoken(events)


async def test_guard_down_lets_the_turn_through(brain):
    make, _, llm, _ = brain
    llm.script = lambda b: {"content": "ALLOW", "delay_s": 10} if is_guard(b) else "Yes, we are open."
    agent = make(guard=True)
    agent.guard.timeout_s = 0.3
    assert spoken(await run(agent, request("open today?"))) == "Yes, we are open."


async def test_a_turn_the_screen_passes_asks_no_guard_and_says_who_decided(brain):
    """With a quick screen (a fake encoder here), "do you have parking?" is plainly in the domain:
    the reply streams without the LLM guard's call; "write me a python script" still asks it."""
    make, store, llm, _ = brain
    llm.script = lambda b: "BLOCK" if is_guard(b) else "Yes, behind the building."
    agent = make(guard=True)
    encoder = FakeSentenceEncoder({"Is there parking?": [1, 0], "Write code.": [0, 1],
                                   "do you have parking?": [0.95, 0.1], "write me a python script": [0.1, 1]})
    agent.guard.screen = ExampleScreen(encoder, ["Is there parking?"], ["Write code."], common_blocks=())
    parking, script = request("do you have parking?"), request("write me a python script")
    assert spoken(await run(agent, parking)) == "Yes, behind the building."
    assert not any(is_guard(r) for r in llm.requests)
    assert kinds(await run(agent, script)) == ["blocked"]
    assert sum(is_guard(r) for r in llm.requests) == 1
    passed = (await store.records("alice", parking.session_id))[-1]["guard"]
    blocked = (await store.records("alice", script.session_id))[-1]["guard"]
    assert (passed["by"], passed["allowed"]) == ("screen", True)
    assert (blocked["by"], blocked["allowed"]) == ("llm", False)


class SlowScreenEncoder(FakeSentenceEncoder):
    """Takes ``seconds`` per encode, as the real one takes a few ms of a worker thread; notes when
    each encode ended."""

    def __init__(self, vectors, seconds: float) -> None:
        super().__init__(vectors)
        self.seconds, self.ended = seconds, []

    def encode(self, texts):
        time.sleep(self.seconds)
        self.ended.append(time.monotonic())
        return super().encode(texts)


async def test_the_reply_asks_the_model_only_once_the_screen_has_judged(brain):
    """The screen takes 0.2 s here. Words the LLM guard must judge: its call reaches the LLM server
    before the reply's, so the server prefills the two together instead of the guard's after the
    reply's (whose text waits for the verdict). Words the screen passes: the reply's call goes
    once the screen is done, and the guard's LLM is never asked."""
    make, _, llm, _ = brain
    arrived: list[tuple[str, float]] = []

    def script(body):
        arrived.append(("guard" if is_guard(body) else "reply", time.monotonic()))
        return "ALLOW" if is_guard(body) else "Yes, behind the building."

    llm.script = script
    agent = make(guard=True)
    encoder = SlowScreenEncoder({"Is there parking?": [1, 0], "Write code.": [0, 1],
                                 "do you have parking?": [0.95, 0.1], "is it far?": [0.5, 0.5]}, 0.2)
    agent.guard.screen = ExampleScreen(encoder, ["Is there parking?"], ["Write code."], common_blocks=())

    assert spoken(await run(agent, request("do you have parking?"))) == "Yes, behind the building."
    assert [who for who, _ in arrived] == ["reply"]
    assert arrived[0][1] >= encoder.ended[-1]

    arrived.clear()
    assert spoken(await run(agent, request("is it far?"))) == "Yes, behind the building."
    assert [who for who, _ in arrived] == ["guard", "reply"]

    # BRAIN_GUARD_SCREEN_FIRST=false (vLLM on a GPU): the reply's call goes at once, before the
    # screen has judged the words; its text is still held until the guard passes them.
    agent.settings.guard_screen_first = False
    arrived.clear()
    assert spoken(await run(agent, request("do you have parking?"))) == "Yes, behind the building."
    assert [who for who, _ in arrived] == ["reply"]
    assert arrived[0][1] < encoder.ended[-1]


# ---- context, history, cancellation -------------------------------------------
async def test_prompt_prefix_is_byte_stable_between_calls(brain):
    make, _, llm, _ = brain
    llm.script = lambda b: "Tuesday works." if b["messages"][-1]["role"] == "tool" else \
        {"tool_calls": [{"name": "find_slots", "arguments": {"day": last_user_text(b)}}]}
    agent, session = make(), uuid.uuid4().hex
    for number, text in enumerate(["Tuesday?", "Wednesday?", "Thursday?"]):
        await run(agent, request(text, session, f"t{number}"))
    bodies = main_requests(llm)
    assert len(bodies) == 6
    for before, after in itertools.pairwise(bodies):
        # The whole previous prompt, state blocks included, is where the next one starts.
        prefix = json.dumps(before["messages"], sort_keys=True)[:-1]
        assert json.dumps(after["messages"], sort_keys=True).startswith(prefix)
        assert json.dumps(before.get("tools")) == json.dumps(after.get("tools")) or "tools" not in after


async def test_the_next_prompt_is_prefilled_while_the_caller_listens(redis_url, scripted_llm):
    redis = aioredis.Redis.from_url(redis_url)
    settings = BrainSettings(llm_base_url=scripted_llm.base_url, prefill_after_reply=True)
    chat = OpenAIChatClient(settings.llm_base_url, "m")
    agent, session = Agent(settings, chat, SessionStore(redis, 60)), uuid.uuid4().hex
    scripted_llm.script = lambda _b: "We open at noon."
    await run(agent, request("When do you open?", session, "t1"))
    await asyncio.gather(*agent._background)
    prefill = scripted_llm.requests[-1]
    # The reply, then the opening of the caller's next message (empty), so the template's tokens
    # that close the reply and open the next message are cached as well.
    assert prefill["max_tokens"] == 1 and prefill["messages"][-2:] == [
        {"role": "assistant", "content": "We open at noon."}, {"role": "user", "content": ""}]
    await run(agent, request("And on Sundays?", session, "t2"))
    await asyncio.gather(*agent._background)
    turn_two = scripted_llm.requests[-2]
    shared = prefill["messages"][:-1]
    assert turn_two["messages"][:len(shared)] == shared
    new = turn_two["messages"][len(shared):]
    # Only the caller's words: the session state is unchanged (still empty), so no block repeats it.
    assert new == [{"role": "user", "content": "And on Sundays?"}]
    await chat.aclose()
    await redis.aclose()


async def test_after_a_read_back_the_prefill_holds_the_state_block_of_a_change_to_it(brain):
    """A change to a pending action goes through the model with a new state block (the dropped
    action's note, the collected fields, the references): ~150 tokens. The prefill after the
    read-back sends that block already, so at the change only the caller's words are new."""
    make, store, llm, _ = brain
    llm.script = lambda b: {"tool_calls": [
        {"name": "create_booking", "arguments": {"slot": last_user_text(b)}}]}
    agent, session = make(prefill=True), uuid.uuid4().hex
    await run(agent, request("S1", session, "t1"))  # the model proposes; code reads it back
    await asyncio.gather(*agent._background)
    prefill = llm.requests[-1]
    assert prefill["max_tokens"] == 1 and prefill["messages"][-1] == {"role": "user", "content": ""}
    block = prefill["messages"][-2]
    assert block["role"] == "system" and "is changing what they were asked to confirm" in block["content"]

    await run(agent, request("Actually, make it S2 instead", session, "t2"))
    change = main_requests(llm)[-1]
    shared = prefill["messages"][:-1]
    assert change["messages"][:len(shared)] == shared
    assert change["messages"][len(shared)] == {"role": "user", "content": "Actually, make it S2 instead"}
    pending = (await store.load("alice", session)).state.pending
    assert pending is not None and pending.args == {"slot": "Actually, make it S2 instead"}


@pytest.mark.parametrize("prefix", ["", '<tool_call>\n{"name": "'])
async def test_a_change_to_the_pending_action_must_come_back_as_a_tool_call(brain, prefix):
    """Measured with the packaged model: asked to change a read-back, it wrote a read-back of
    its own as text ("To confirm: ... Shall I go ahead?"), which no pending action backed. The
    change's first model call must be a tool call: ``tool_choice: "required"``, or where the
    server does not enforce that, the start of the tool-call syntax as the start of the message."""
    make, store, llm, _ = brain
    llm.script = lambda b: {"tool_calls": [
        {"name": "create_booking", "arguments": {"slot": last_user_text(b)}}]}
    agent, session = make(), uuid.uuid4().hex
    agent.settings.llm_tool_call_prefix = prefix
    await run(agent, request("S1", session, "t1"))
    first = main_requests(llm)[-1]
    assert "tool_choice" not in first and first["messages"][-1]["role"] == "user"  # a new request

    await run(agent, request("Actually, make it S2 instead", session, "t2"))
    change = main_requests(llm)[-1]
    if prefix:
        assert "tool_choice" not in change
        assert change["messages"][-1] == {"role": "assistant", "content": prefix}
    else:
        assert change["tool_choice"] == "required" and change["messages"][-1]["role"] == "user"
    [record] = [r for r in await store.records("alice", session) if r["turn_id"] == "t2"]
    assert record["llm_calls"][0]["tool_required"] is True
    pending = (await store.load("alice", session)).state.pending
    assert pending is not None and pending.read_back_turn == "t2"
    # What is stored is the call as the model made it, not the request's forced start.
    stored = (await store.load("alice", session)).turns[-1]
    assert [step["tool_calls"][0]["function"]["name"] for step in stored.steps
            if step["role"] == "assistant"] == ["create_booking"]
    assert all(prefix not in str(step.get("content")) for step in stored.steps if prefix)


async def test_a_read_back_the_model_writes_itself_is_never_spoken_and_it_is_asked_for_the_call(brain):
    """The model answers a booking request with a read-back of its own, as text: the caller
    never hears it (no pending action stands behind it); the same prompt goes again as a
    required tool call, and what the caller hears is code's read-back of that call."""
    make, store, llm, _ = brain

    def model(body):
        if body.get("tool_choice") == "required":
            return {"tool_calls": [{"name": "create_booking", "arguments": {"slot": "S1"}}]}
        return "To confirm: slot S1 is booked for you. Shall I go ahead?"

    llm.script = model
    req = request("Book S1 for me")
    caught_before = READ_BACKS_MIMICKED._value.get()
    events = await run(make(), req)
    assert READ_BACKS_MIMICKED._value.get() == caught_before + 1  # operators see it on /metrics
    first, second = main_requests(llm)
    assert "tool_choice" not in first and second["tool_choice"] == "required"
    assert second["messages"] == first["messages"]  # asked again on the same (cached) prompt
    said = spoken(events)
    assert said == "To confirm: book a slot with slot S1. Shall I go ahead?"  # code's, from the call
    state = (await store.load("alice", req.session_id)).state
    assert state.pending is not None and state.pending.read_back_turn == req.turn_id
    [record] = await store.records("alice", req.session_id)
    assert [c.get("mimicked_read_back", False) for c in record["llm_calls"]] == [True, False]


async def test_a_read_back_of_its_own_when_no_tool_call_may_follow_gives_the_fallback(brain):
    make, _, llm, _ = brain
    llm.script = lambda _b: "To confirm: it is all done. Shall I go ahead?"
    events = await run(make(with_tools=False), request("Book it"))
    assert spoken(events) == "Sorry, I'm having trouble right now. Could you say that again?"
    assert len(main_requests(llm)) == 1


async def test_history_has_no_orphan_tool_calls(brain):
    make, store, llm, _ = brain
    llm.script = lambda b: "Done." if tool_results(b) else {"tool_calls": [
        {"name": "find_slots", "arguments": {"day": "Mon"}}, {"name": "nope", "arguments": {}}]}
    req = request("Monday?")
    await run(make(), req)
    steps = (await store.load("alice", req.session_id)).turns[0].steps
    call_ids = [c["id"] for s in steps if s["role"] == "assistant" for c in s["tool_calls"]]
    result_ids = [s["tool_call_id"] for s in steps if s["role"] == "tool"]
    assert call_ids and sorted(call_ids) == sorted(result_ids)


async def test_cancelled_turn_stores_nothing_and_starts_no_tool(brain):
    make, store, llm, tools = brain
    llm.script = lambda _b: {"tool_calls": [{"name": "find_slots", "arguments": {"day": "x"}}],
                             "delay_s": 1.0}
    req = request("hello")
    task = asyncio.create_task(run(make(), req))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(1.0)  # the LLM's scripted answer would have arrived by now
    assert tools.runs == []
    assert (await store.load("alice", req.session_id)).turns == []
    assert (await store.records("alice", req.session_id))[-1]["outcome"] == "cancelled"


async def test_history_keeps_only_the_spoken_part_of_an_interrupted_reply(brain):
    make, store, llm, _ = brain
    llm.script = lambda _b: "Tuesday at ten works. Shall I book it?"
    agent, session = make(), uuid.uuid4().hex
    await run(agent, request("Tuesday?", session, "t1"))
    heard = brain_pb2.SpokenPart(turn_id="t1", text="Tuesday at ten", interrupted=True)
    await run(agent, request("actually Wednesday", session, "t2", heard))
    history = await store.load("alice", session)
    assert (history.turns[0].assistant, history.turns[0].interrupted) == ("Tuesday at ten", True)
    prompt = [m["content"] for m in main_requests(llm)[-1]["messages"]]
    assert "Tuesday at ten ..." in prompt and "Shall I book it?" not in " ".join(prompt)


async def test_a_turn_cut_off_before_it_completed_keeps_question_and_heard_part(brain):
    make, store, llm, _ = brain
    llm.script = lambda _b: "Sure."
    agent, session = make(), uuid.uuid4().hex
    heard = brain_pb2.SpokenPart(turn_id="t1", text="Tuesday at", interrupted=True,
                                 user_text="is Tuesday free?")
    await run(agent, request("actually Wednesday", session, "t2", heard))
    history = await store.load("alice", session)
    assert [(t.user, t.assistant, t.interrupted) for t in history.turns] == [
        ("is Tuesday free?", "Tuesday at", True), ("actually Wednesday", "Sure.", False)]


async def test_another_users_history_is_invisible(brain):
    make, store, _, _ = brain
    req = request("my secret is 42")
    await run(make(), req)
    assert (await store.load("mallory", req.session_id)).turns == []


async def test_concurrent_writers_lose_no_update(brain):
    _, store, _, _ = brain
    session = uuid.uuid4().hex
    await asyncio.gather(*(store.append_turn("alice", session, Turn(f"t{i}", "q", "a")) for i in range(20)))
    history = await store.load("alice", session)
    assert sorted(t.turn_id for t in history.turns) == sorted(f"t{i}" for i in range(20))
    assert history.version == 20


def test_limits_default_to_four_llm_calls():
    assert LoopLimits().max_llm_calls == 4 == BrainSettings().max_llm_calls


async def test_a_broken_tag_written_by_the_model_is_never_read_aloud(brain):
    make, _, llm, _ = brain
    llm.script = lambda _b: "<tools</tools"
    events = await run(make(with_tools=False), request("An appointment please"))
    assert "<" not in spoken(events) and spoken(events) == Profile().sentences.fallback


async def test_the_yes_no_classifier_goes_to_the_side_client_not_the_main_slot(redis_url, scripted_llm):
    """On llama-server the main client is pinned to the session's slot: a classifier call there
    would evict the session's cached prompt, so it has a client (a slot) of its own."""
    redis = aioredis.Redis.from_url(redis_url)
    settings = BrainSettings(llm_base_url=scripted_llm.base_url)
    main = OpenAIChatClient(settings.llm_base_url, "m", extra_body={"id_slot": 0})
    side = OpenAIChatClient(settings.llm_base_url, "m", extra_body={"id_slot": 2})
    agent = Agent(settings, main, SessionStore(redis, 60), side_chat=side)
    scripted_llm.script = lambda _b: '{"decision": "yes"}'
    await agent._classify("To confirm: a table for two. Shall I go ahead?", "I suppose that works")
    [body] = scripted_llm.requests
    assert body["id_slot"] == 2 and "response_format" in body
    await main.aclose()
    await side.aclose()
    await redis.aclose()


async def test_a_warm_up_slower_than_the_first_token_timeout_is_asked_again_then_the_guard_is_warmed(
        redis_url, scripted_llm):
    # The first prefill outlasts the client's first-token timeout (as the packaged model's ~860
    # tokens do on two cores); the server caches it anyway, so the next ask is answered at once.
    asked: list[str] = []

    def script(body):
        asked.append("guard" if is_guard(body) else "main")
        return {"content": "ALLOW" if is_guard(body) else "Hi.", "delay_s": 1.0 if len(asked) == 1 else 0}

    scripted_llm.script = script
    redis = aioredis.Redis.from_url(redis_url)
    settings = BrainSettings(llm_base_url=scripted_llm.base_url)
    chat = OpenAIChatClient(settings.llm_base_url, "m", first_token_timeout_s=0.3, deadline_s=0.3)
    agent = Agent(settings, chat, SessionStore(redis, 60), guard=TopicGuard(chat, "answering questions"))
    await agent.warm_up()
    assert asked == ["main", "main", "guard"]
    await chat.aclose()
    await redis.aclose()


async def test_the_record_says_how_far_ahead_of_its_commit_a_turn_started(brain):
    """A preemptive turn committed 0.2 s after it started, and a turn committed from the start."""
    make, store, llm, _ = brain
    llm.script = lambda b: "We open at six."
    agent = make()
    early, committed = request("when do you open?"), asyncio.Event()

    async def commit_later():
        await asyncio.sleep(0.2)
        committed.set()

    committing = asyncio.create_task(commit_later())
    assert spoken([e async for e in agent.respond(early, committed)]) == "We open at six."
    await committing
    at_once = request("when do you open?")
    await run(agent, at_once)
    ahead = (await store.records("alice", early.session_id))[-1]
    plain = (await store.records("alice", at_once.session_id))[-1]
    assert ahead["committed_ms"] >= 150 and ahead["committed_ms"] <= ahead["ms"]
    assert plain["committed_ms"] <= plain["ms"] and plain["committed_ms"] < ahead["committed_ms"]


async def test_a_stock_refusal_is_stored_but_not_shown_to_the_model_again(brain):
    """The STT misheard a question and the model gave its stock refusal: the caller heard it and
    the history keeps it, but the next prompt leaves the exchange out, so the model does not
    copy it onto the plain question that follows."""
    make, store, llm, _ = brain
    refusal = "I'm sorry, but I can't assist with that."
    llm.script = lambda b: refusal if last_user_text(b) == "D-serve breakfast" else "Yes, we do."
    agent, session = make(), uuid.uuid4().hex
    assert spoken(await run(agent, request("D-serve breakfast", session))) == refusal
    plain = request("Do you have vegan desserts?", session, turn="t2")
    assert spoken(await run(agent, plain)) == "Yes, we do."
    stored = (await store.load("alice", session)).turns
    assert [(t.user, t.refused) for t in stored] == [("D-serve breakfast", True),
                                                     ("Do you have vegan desserts?", False)]
    said = [m["content"] for m in main_requests(llm)[-1]["messages"] if m["role"] in ("user", "assistant")]
    assert said == ["Do you have vegan desserts?"]
