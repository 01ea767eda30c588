"""Brain.Prefill: while the caller is still speaking, the LLM server gets the prompt a turn on
the words so far would send, so at the endpoint only the last words are new to it. It never
answers, runs a tool or stores anything, and it never competes with a real turn."""

from __future__ import annotations

import asyncio

from tests.fakes.fake_llm import is_guard, last_user_text
from tests.unit.test_agent import brain, main_requests, request, run  # noqa: F401 (brain: a fixture)


def without_last_words(body):
    """The prompt up to the caller's message, and the tools: what the prefill must have cached."""
    return body["messages"][:-1], body.get("tools")


async def settled(agent):
    for task in list(agent.words_prefill._tasks.values()):
        await asyncio.gather(task, return_exceptions=True)


async def test_the_turn_prompt_starts_with_what_the_prefill_sent(brain):  # noqa: F811
    make, store, llm, tools = brain
    llm.script = lambda b: "ALLOW" if is_guard(b) else "We open at noon."
    agent = make(guard=True)
    first = request("When do you open?", turn="t1")
    await run(agent, first)
    before = await store.load("alice", first.session_id)
    words = request("And on", session=first.session_id, turn="")
    assert agent.words_prefill.start(words)
    await settled(agent)
    prefills = [r for r in llm.requests if r["max_tokens"] == 1]
    main, guard = ([r for r in prefills if not is_guard(r)], [r for r in prefills if is_guard(r)])
    assert [last_user_text(r) for r in main] == ["And on"]
    assert len(guard) == 1 and "And on" in last_user_text(guard[0])
    # Nothing answered, ran or stored.
    assert tools.runs == [] and (await store.load("alice", first.session_id)).turns == before.turns
    await run(agent, request("And on Sundays?", session=first.session_id, turn="t2"))
    turn = main_requests(llm)[-1]
    assert last_user_text(turn) == "And on Sundays?"
    assert without_last_words(turn) == without_last_words(main[0])


async def test_a_turn_cancels_the_prefill_and_none_starts_while_it_runs(brain):  # noqa: F811
    make, _, llm, _ = brain
    llm.script = lambda b: {"content": "Sure.", "delay_s": 5.0 if b["max_tokens"] == 1 else 0.4}
    agent = make()
    session = request("x").session_id
    assert agent.words_prefill.start(request("Can I", session=session, turn=""))
    prefill = agent.words_prefill._tasks[("alice", session)]
    turn = asyncio.create_task(run(agent, request("Can I bring my dog?", session=session)))
    await asyncio.sleep(0.1)
    assert prefill.cancelled() or prefill.done()
    assert not agent.words_prefill.start(request("Can I bring", session=session, turn=""))
    await turn
    assert agent.words_prefill.start(request("And my cat", session=session, turn=""))


async def test_newer_words_replace_the_older_prefill_and_the_total_is_bounded(brain):  # noqa: F811
    make, _, llm, _ = brain
    llm.script = lambda b: {"content": "Sure.", "delay_s": 5.0}
    agent = make()
    agent.words_prefill.max_in_flight = 2
    session = request("x").session_id
    assert agent.words_prefill.start(request("Do you", session=session, turn=""))
    older = agent.words_prefill._tasks[("alice", session)]
    assert agent.words_prefill.start(request("Do you have", session=session, turn=""))
    await asyncio.sleep(0)
    assert older.cancelled()
    assert agent.words_prefill.start(request("Hello", turn=""))  # another session: two in flight
    assert not agent.words_prefill.start(request("Hi there", turn=""))  # a third: refused
    for task in list(agent.words_prefill._tasks.values()):
        task.cancel()
