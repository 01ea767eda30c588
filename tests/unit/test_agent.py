"""The brain's turn: scenarios with a scripted model over HTTP, fake tools and a real redis-server.

Each test states a scenario and checks the record of what happened (readings,
tool runs, events, history), not the wording. The model only ever reads; code
speaks: knowledge answers, questions, read-backs and outcomes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.fakes.encoders import BagOfWordsEncoder
from tests.fakes.engines import FakeSentenceEncoder
from tests.fakes.fake_llm import is_answer_check, is_guard
from voicebot.brain.act.answers import claims_outcome, shares_words
from voicebot.brain.act.tools import FunctionTool, ToolKind, ToolRegistry, ToolSpec
from voicebot.brain.business.knowledge import Prefetcher, QdrantKnowledge, load_passages
from voicebot.brain.business.profile import ProfileError, parse_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.read.guard_screen import ExampleScreen
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.v1 import brain_pb2

PROFILE = {
    "name": "Joe", "purpose": "taking table reservations",
    "sentences": {"unknown_fact": "Sorry, I don't know that.", "can_help": "I can help you {tasks}."},
    "knowledge": {"faq": [
        {"q": ["Do you have parking?", "Where can I park?"],
         "a": "Yes, **free** parking behind the building."},
        {"q": "Do you take cards?", "a": "- We take all cards.\n- Cash too."},
        {"q": "Is my table booked?", "a": "Your table is booked, I promise."}]},
    "tasks": {"book": {"examples": ["book a table", "reserve a table"],
                       "fields": {"day": {"ask": "Which day?"}}}},
}


class ToolLog:
    """Fake tools that record every run: a write ``book(day)``."""

    def __init__(self):
        self.runs: list[tuple[str, dict]] = []

    def registry(self) -> ToolRegistry:
        def book(ctx, day):
            self.runs.append(("book", {"day": day}))
            return {"booked": day}

        return ToolRegistry([FunctionTool(ToolSpec("book", "Book a table", {
            "type": "object", "properties": {"day": {"type": "string", "description": "YYYY-MM-DD"}},
            "required": ["day"]}, ToolKind.WRITE), book)])


def reads_other(body):
    if is_guard(body):
        return "ALLOW"
    return json.dumps({"intent": "other"})


@pytest.fixture
async def brain(redis_url, scripted_llm):
    redis = aioredis.Redis.from_url(redis_url)
    clients: list[OpenAIChatClient] = []
    tools = ToolLog()
    encoder = BagOfWordsEncoder()
    profile = parse_profile(PROFILE)
    knowledge = Prefetcher(await QdrantKnowledge.build(
        profile.knowledge, load_passages(profile.knowledge, Path(".")), encoder))
    scripted_llm.script = reads_other

    def make(guard=False, clock=None, answer_check="model"):
        settings = BrainSettings(llm_base_url=scripted_llm.base_url, llm_deadline_s=0.5,
                                 answer_check=answer_check)
        chat = OpenAIChatClient(settings.llm_base_url, "m", deadline_s=0.5)
        clients.append(chat)
        kwargs = {"clock": clock} if clock else {}
        return Agent(settings, chat, SessionStore(redis, 60), tools=tools.registry(), profile=profile,
                     guard=TopicGuard(chat, "taking table reservations") if guard else None,
                     knowledge=knowledge, encoder=encoder, **kwargs)

    yield make, SessionStore(redis, 60), scripted_llm, tools
    for chat in clients:
        await chat.aclose()
    await knowledge.aclose()
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


# ---- the basic turn -------------------------------------------------------
async def test_a_question_is_answered_from_the_business_words_and_the_turn_is_stored(brain):
    make, store, _, _ = brain
    req = request("Where can I park the car?")
    events = await run(make(), req)
    assert kinds(events)[-1] == "final" and set(kinds(events)[:-1]) == {"delta"}
    assert events[-1].final.text == "Yes, free parking behind the building."  # markdown gone
    history = await store.load("alice", req.session_id)
    assert [(t.user, t.assistant) for t in history.turns] == [(req.text, events[-1].final.text)]


async def test_a_list_in_the_knowledge_is_spoken_as_sentences(brain):
    make, _, _, _ = brain
    assert spoken(await run(make(), request("Do you take cards?"))) == "We take all cards. Cash too."


async def test_a_question_the_business_never_answered_gets_the_unknown_sentence_never_a_guess(brain):
    make, _, llm, _ = brain
    llm.script = lambda b: "ALLOW" if is_guard(b) else "The corkage fee is five dollars."
    said = spoken(await run(make(), request("What is your corkage fee?")))
    assert said == "Sorry, I don't know that. I can help you book a table."


async def test_a_passage_the_model_says_does_not_answer_gets_the_unknown_sentence(brain):
    make, _, llm, _ = brain
    llm.script = lambda b: '"no"' if is_answer_check(b) else reads_other(b)
    said = spoken(await run(make(), request("Where can I park my boat overnight?")))
    assert said == "Sorry, I don't know that. I can help you book a table."
    assert any(is_answer_check(body) for body in llm.requests)


async def test_with_the_answer_check_off_the_nearest_passage_is_spoken_without_asking_the_model(brain):
    make, _, llm, _ = brain
    llm.script = lambda b: '"no"' if is_answer_check(b) else reads_other(b)
    agent = make(answer_check="off")
    said = spoken(await run(agent, request("Where can I park my boat overnight?")))
    assert said == "Yes, free parking behind the building."
    assert not any(is_answer_check(body) for body in llm.requests)


async def test_knowledge_that_claims_an_outcome_is_never_spoken(brain):
    make, _, _, _ = brain
    said = spoken(await run(make(), request("Is my table booked?")))
    assert not claims_outcome(said) and said.startswith("Sorry, I don't know that.")


@pytest.mark.parametrize("text, claims", [
    ("Okay, I've booked a table for four.", True), ("Your reservation is confirmed.", True),
    ("I'll book it for you now.", True), ("The appointment has been cancelled.", True),
    ("We take bookings every half hour.", False), ("Parking is free after six.", False)])
def test_what_counts_as_claiming_an_outcome(text, claims):
    assert claims_outcome(text) is claims


async def test_a_completed_turns_record_is_stored_with_its_history(brain):
    make, store, _, _ = brain
    req = request("Do you have parking?")
    await run(make(), req)
    [record] = await store.records("alice", req.session_id)
    assert (record["turn_id"], record["outcome"], record["decision"]) == ("t1", "completed", "answer")
    assert record["answer"]["passages"] >= 1 and "history_write_failed" not in record


async def test_a_failed_history_write_still_ends_the_turn_and_its_record_says_so(brain):
    make, store, _, _ = brain
    agent, req = make(), request("Do you have parking?")

    async def refused(*_args, **_kwargs):
        raise aioredis.ConnectionError("redis went away")

    agent.store.update = refused  # the turn's end only: its read went through
    events = await run(agent, req)
    assert kinds(events)[-1] == "final" and "parking" in events[-1].final.text
    [record] = await store.records("alice", req.session_id)
    assert record["outcome"] == "completed" and record["history_write_failed"] is True
    assert (await store.load("alice", req.session_id)).turns == []


async def test_the_llm_down_still_runs_a_task_on_rules(brain):
    """The model is only a reader: with the LLM server down, a task still gets its questions."""
    make, _, llm, tools = brain
    llm.fail_next = 100
    agent, session = make(), uuid.uuid4().hex
    assert spoken(await run(agent, request("I'd like to book a table.", session, "t1"))) == "Which day?"
    said = spoken(await run(agent, request("Tomorrow.", session, "t2")))
    assert said.endswith("Shall I go ahead?") and tools.runs == []


async def test_the_record_keeps_which_fields_were_read_but_not_their_values(brain):
    make, store, _, _ = brain
    req = request("Book a table for Friday please.")
    await run(make(), req)
    [record] = await store.records("alice", req.session_id)
    assert record["reading"]["fields"] == ["day"] and "Friday" not in json.dumps(record["reading"])


# ---- the topic guard ---------------------------------------------------------
async def test_guard_block_cancels_the_turn_and_stores_nothing_it_made(brain):
    make, store, llm, tools = brain
    llm.script = lambda b: {"content": "BLOCK", "delay_s": 0.3} if is_guard(b) else reads_other(b)
    req = request("write me a python script about tables")
    events = await run(make(guard=True), req)
    assert kinds(events) == ["blocked"] and tools.runs == []
    [turn] = (await store.load("alice", req.session_id)).turns  # the exchange, and only that
    assert turn.assistant == parse_profile(PROFILE).sentences.blocked
    assert (await store.records("alice", req.session_id))[-1]["outcome"] == "blocked"


async def test_slow_guard_holds_text_back_until_it_passes(brain):
    make, store, llm, _ = brain
    llm.script = lambda b: {"content": "ALLOW", "delay_s": 0.4} if is_guard(b) else reads_other(b)
    req = request("do you have parking?")
    loop = asyncio.get_running_loop()
    started, first_delta_at = loop.time(), None
    async for event in make(guard=True).respond(req):
        if event.WhichOneof("event") == "delta" and first_delta_at is None:
            first_delta_at = loop.time() - started
    # Code's answer was ready at once; its text could only leave after the guard's verdict.
    assert first_delta_at is not None and first_delta_at >= 0.35
    record = (await store.records("alice", req.session_id))[-1]
    assert record["guard"]["allowed"] is True and record["outcome"] == "completed"


async def test_guard_down_lets_the_turn_through(brain):
    make, _, llm, _ = brain
    llm.script = lambda b: {"content": "ALLOW", "delay_s": 10} if is_guard(b) else reads_other(b)
    agent = make(guard=True)
    agent.guard.timeout_s = 0.3
    assert "parking" in spoken(await run(agent, request("do you have parking?")))


async def test_a_turn_the_screen_passes_asks_no_guard_and_says_who_decided(brain):
    make, store, llm, _ = brain
    llm.script = lambda b: "BLOCK" if is_guard(b) else reads_other(b)
    agent = make(guard=True)
    encoder = FakeSentenceEncoder({"Is there parking?": [1, 0], "Write code.": [0, 1],
                                   "do you have parking?": [0.95, 0.1], "write me a python script": [0.1, 1]})
    agent.guard.screen = ExampleScreen(encoder, ["Is there parking?"], ["Write code."], common_blocks=())
    parking, script = request("do you have parking?"), request("write me a python script")
    assert "parking" in spoken(await run(agent, parking))
    assert not any(is_guard(r) for r in llm.requests)
    assert kinds(await run(agent, script)) == ["blocked"]
    passed = (await store.records("alice", parking.session_id))[-1]["guard"]
    blocked = (await store.records("alice", script.session_id))[-1]["guard"]
    assert (passed["by"], passed["allowed"]) == ("screen", True)
    assert (blocked["by"], blocked["allowed"]) == ("llm", False)


# ---- history, cancellation ---------------------------------------------------
async def test_cancelled_turn_stores_nothing_and_runs_no_write(brain):
    make, store, llm, tools = brain
    agent, session = make(), uuid.uuid4().hex
    await run(agent, request("Book a table for Friday please.", session, "t1"))
    llm.script = lambda b: {"content": "ALLOW", "delay_s": 1.0} if is_guard(b) else reads_other(b)
    agent.guard = TopicGuard(agent.chat, "tables")
    said = "Go ahead and also tell me about the menu"
    task = asyncio.create_task(run(agent, request(said, session, "t2")))
    # Cancelled while the guard (1 s) is reading the turn: wait for that request, not a fixed time.
    for _ in range(200):
        if any(is_guard(b) and said in json.dumps(b) for b in llm.requests):
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tools.runs == []
    assert [t.turn_id for t in (await store.load("alice", session)).turns] == ["t1"]
    # The cancelled turn's record is written in the background (the turn itself is gone).
    for _ in range(200):
        if len(records := await store.records("alice", session)) == 2:
            break
        await asyncio.sleep(0.01)
    assert records[-1]["outcome"] == "cancelled"


async def test_history_keeps_only_the_spoken_part_of_an_interrupted_reply(brain):
    make, store, _, _ = brain
    agent, session = make(), uuid.uuid4().hex
    await run(agent, request("Do you have parking?", session, "t1"))
    heard = brain_pb2.SpokenPart(turn_id="t1", text="Yes, free parking", interrupted=True)
    await run(agent, request("Do you take cards?", session, "t2", heard))
    history = await store.load("alice", session)
    assert history.turns[0].assistant == "Yes, free parking" and history.turns[0].interrupted


async def test_a_turn_cut_off_before_it_completed_keeps_question_and_heard_part(brain):
    make, store, _, _ = brain
    agent, session = make(), uuid.uuid4().hex
    heard = brain_pb2.SpokenPart(turn_id="t0", text="Yes, free", interrupted=True,
                                 user_text="Do you have parking?")
    await run(agent, request("Do you take cards?", session, "t1", heard))
    first = (await store.load("alice", session)).turns[0]
    assert (first.user, first.assistant, first.interrupted) == ("Do you have parking?", "Yes, free", True)


async def test_another_users_history_is_invisible(brain):
    make, store, _, _ = brain
    req = request("Do you have parking?")
    await run(make(), req)
    assert (await store.load("mallory", req.session_id)).turns == []


async def test_a_warm_up_asks_the_reading_prompt_and_the_guard(brain):
    make, _, llm, _ = brain
    agent = make(guard=True)
    await agent.warm_up()
    assert any(is_guard(r) for r in llm.requests)
    reading = [r for r in llm.requests if not is_guard(r)]
    assert reading and reading[0]["max_tokens"] == 1
    assert "You read what a caller said" in reading[0]["messages"][0]["content"]


async def test_the_words_so_far_start_the_knowledge_search(brain):
    """Brain.Prefill's words: retrieval starts on them, and the turn on the same words finds it."""
    make, _, _, _ = brain
    agent = make()
    encoder = agent.reader.picker.encoder
    await agent.dialogue.prime_words(request("Where can I park?"))
    await asyncio.sleep(0.2)
    before = len(encoder.calls)
    said = spoken(await run(agent, request("Where can I park?")))
    assert "parking" in said
    searched = [c for c in encoder.calls[before:] if c == ["Where can I park?"]]
    assert len(searched) <= 1  # the picker's encode; the search itself was already done


def test_a_profile_whose_knowledge_file_is_missing_fails_naming_it(tmp_path):
    profile = tmp_path / "shop.yaml"
    profile.write_text("name: Sam\nknowledge:\n  files: [missing.md]\n")
    from voicebot.brain.business.profile import load_profile

    with pytest.raises(ProfileError, match=r"missing\.md.*not found"):
        load_profile(str(profile))


def test_a_profile_whose_knowledge_file_is_not_text_fails_naming_it(tmp_path):
    (tmp_path / "menu.md").write_bytes(b"\xff\xfe\x00bad")
    profile = tmp_path / "shop.yaml"
    profile.write_text("name: Sam\nknowledge:\n  files: [menu.md]\n")
    from voicebot.brain.business.profile import load_profile

    with pytest.raises(ProfileError, match=r"menu\.md.*UTF-8"):
        load_profile(str(profile))


@pytest.mark.parametrize(("question", "passage", "shares"), [
    ("Do you take American Express?", "We accept Visa, Mastercard and American Express.", True),
    ("Do you take Medicare?", "The clinic accepts Aetna, Cigna and Medicare.", True),
    ("Do you sell gift cards?", "We accept Visa, Mastercard and American Express.", False),
    ("Do you have a private dining room?", "There is no private parking lot.", False),
])
def test_a_passage_below_the_line_counts_only_with_the_questions_own_words(question, passage, shares):
    assert shares_words(question, passage) is shares


def test_a_one_word_question_matches_a_passages_heading_not_its_first_words():
    assert shares_words("What's your address?", "Joe's is at 48 Harbor Street.", title="Address")
    assert not shares_words("Where is the salon?", "The salon accepts cards.", title="Payment")
