"""Deciding is a pure function: (session state, reading) -> one decision of a closed set.

``Conversation.decide`` calls no model and no tool; each row below is a state, a reading (what
the read stage made of the words) and the one decision code must make. A step that needs a
read-only tool's answer is ``Find``; the form's step is then taken again with the result.
"""

from __future__ import annotations

import datetime as dt
import inspect
from typing import Any

import pytest

from voicebot.brain.act.actions import WriteOutcome
from voicebot.brain.act.toolcalls import ToolCall
from voicebot.brain.act.tools import ToolResult
from voicebot.brain.business.profile import Profile
from voicebot.brain.business.references import References
from voicebot.brain.business.tasks import FieldSpec, Finder, TaskSpec
from voicebot.brain.decide import decisions as d
from voicebot.brain.decide.conversation import Conversation, TurnFacts
from voicebot.brain.decide.form import Forms
from voicebot.brain.decide.state import FormState, PendingAction, SessionState
from voicebot.brain.read.confirm import Answer as Reply
from voicebot.brain.read.reading import OTHER, QUESTION, Reading
from voicebot.brain.runtime.session_store import Turn
from voicebot.v1.brain_pb2 import SpokenPart

TODAY = dt.date(2026, 12, 7)  # a Monday
BOOK = TaskSpec(
    name="book_visit", title="booking a visit", lookup=False,
    fields=(FieldSpec("day", "date", "Which day would you like?", True),
            FieldSpec("time", "time", "What time suits you?", True),
            FieldSpec("name", "name", "What name should I put it under?", True)),
    finders=(Finder(argument="slot_id", tool="free_slots", args={"day": "day"}, match={"time": "time"},
                    offer="{time}"),),
    arguments=("name",), read_back="a visit on {day} at {time} for {name}")
FIND = TaskSpec(name="find_visit", title="finding a visit", lookup=True,
                fields=(FieldSpec("name", "name", "Under which name?", True),), arguments=("name",),
                found="a visit on {day} at {time}")
PROFILE = Profile(name="Garage Nord")
S = PROFILE.sentences
A_VISIT = PendingAction(tool="book_visit", args={"name": "Kim", "slot_id": "s2"},
                        action="a visit on Wednesday at 9 AM for Kim", read_back_turn="t1")


def conversation() -> Conversation:
    forms = Forms({"book_visit": BOOK, "find_visit": FIND}, S,
                  References(PROFILE.references, PROFILE.hidden_fields), lambda: TODAY)
    return Conversation(PROFILE, forms)


def reading(intent: str = OTHER, values: dict[str, Any] | None = None, **acts: Any) -> Reading:
    return Reading(intent, values or {}, "rules", text=acts.pop("text", "words"), **acts)


def pending() -> SessionState:
    state = SessionState(form=FormState(task="book_visit", values={
        "day": "2026-12-09", "time": "09:00", "name": "Kim"}))
    state.propose(A_VISIT)
    return state


def in_form(asking: str = "time", **values: Any) -> SessionState:
    return SessionState(form=FormState(task="book_visit", values=values, asking=asking))


HEARD = TurnFacts("t2", Turn("t1", "Kim, please.", f"Let me check: {A_VISIT.action}. Shall I?"),
                  SpokenPart(turn_id="t1", text=f"Let me check: {A_VISIT.action}. Shall I?"))
NOT_HEARD = TurnFacts("t2", HEARD.last_turn, None)
FREE = {"result": [{"slot_id": "s1", "time": "08:00"}, {"slot_id": "s2", "time": "09:00"}]}


def result(tool: str, outcome: str, content: dict[str, Any]) -> ToolResult:
    return ToolResult(ToolCall("c1", tool, "{}"), outcome, content)


# (state, reading, turn) -> the decision's kind and what it carries
CASES = [
    ("a person, from a pending read-back", pending, reading(for_person=True), HEARD,
     d.Handoff("caller_request", S.handoff)),
    ("a person, with no task", SessionState, reading(for_person=True), HEARD,
     d.Handoff("caller_request", S.handoff)),
    ("a plain yes to the read-back heard in full", pending, reading(answer=Reply.YES), HEARD,
     d.Run(A_VISIT)),
    ("a yes with no report of what was heard", pending, reading(answer=Reply.YES), NOT_HEARD,
     d.Ask("", S.confirm_again.format(action=A_VISIT.action))),
    ("a hedge", pending, reading(answer=Reply.UNSURE), HEARD,
     d.Ask("", S.confirm_again.format(action=A_VISIT.action))),
    ("a bare no", pending, reading(answer=Reply.NO), HEARD, d.Ask("", S.ask_what_to_change)),
    ("a question while the read-back waits", pending,
     reading(QUESTION, question=True, text="Where exactly are you?"), HEARD,
     d.Answer("Where exactly are you?", S.confirm_again.format(action=A_VISIT.action))),
    ("a new value while the read-back waits: the finder is asked first", pending,
     reading("book_visit", {"time": "10 am"}, answer=Reply.CHANGE), HEARD,
     d.Find("free_slots", {"day": "2026-12-09"})),
    ("the model could not read the words", SessionState, reading(failed=True), HEARD,
     d.Fallback(S.fallback)),
    ("a task named with one value: the next field asked", SessionState,
     reading("book_visit", {"day": "Wednesday"}), HEARD, d.Ask("time", "What time suits you?")),
    ("thanks with no task", SessionState, reading(closing=True), HEARD, d.Say(S.goodbye)),
    ("a question with no task", SessionState, reading(QUESTION, question=True, text="Do you fix vans?"),
     HEARD, d.Answer("Do you fix vans?")),
    ("a question while a field is asked", lambda: in_form("time", day="2026-12-09"),
     reading(QUESTION, question=True, text="How long does it take?"), HEARD,
     d.Answer("How long does it take?", "What time suits you?")),
    ("the field's answer: the finder is asked", lambda: in_form("time", day="2026-12-09", name="Kim"),
     reading("book_visit", {"time": "9 am"}), HEARD, d.Find("free_slots", {"day": "2026-12-09"})),
    ("nothing for the field asked", lambda: in_form("time", day="2026-12-09"), reading(), HEARD,
     d.Ask("time", S.ask_again.format(question="What time suits you?"))),
    ("thanks in the middle of a task", lambda: in_form("time"), reading(closing=True), HEARD,
     d.Say(S.nothing_done)),
    ("a lookup with its field: the tool is asked", SessionState, reading("find_visit", {"name": "Kim"}),
     HEARD, d.Find("find_visit", {"name": "Kim"})),
]


@pytest.mark.parametrize(("state", "words", "turn", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_decide_makes_one_decision_of_the_closed_set(state, words, turn, expected) -> None:
    decision = conversation().decide(state(), words, turn)
    assert decision == expected


def test_deciding_awaits_nothing() -> None:
    """No model, no tool, no Redis: a decision is a function of its inputs."""
    assert not inspect.iscoroutinefunction(Conversation.decide)
    assert not inspect.iscoroutinefunction(Forms.next_step)


def test_two_turns_with_nothing_for_the_field_hand_off() -> None:
    talk, state = conversation(), in_form("time", day="2026-12-09")
    assert isinstance(talk.decide(state, reading(), HEARD), d.Ask)
    assert talk.decide(state, reading(), HEARD) == d.Handoff("not_understood", S.handoff)


def test_a_bare_no_drops_the_action_so_a_later_yes_runs_nothing() -> None:
    talk, state = conversation(), pending()
    talk.decide(state, reading(answer=Reply.NO), HEARD)
    assert state.pending is None
    assert not isinstance(talk.decide(state, reading(answer=Reply.YES), HEARD), d.Run)


def test_the_wished_time_free_makes_the_read_back_of_exactly_that_slot() -> None:
    talk, state = conversation(), in_form("time", day="2026-12-09", name="Kim")
    find = talk.decide(state, reading("book_visit", {"time": "9 am"}), HEARD)
    assert isinstance(find, d.Find)
    read_back = talk.forms.next_step(state, "t2", {find.key: result("free_slots", "succeeded", FREE)})
    assert isinstance(read_back, d.ReadBack)
    assert read_back.action.args == {"name": "Kim", "slot_id": "s2"}
    assert state.pending == read_back.action and read_back.action.read_back_turn == "t2"
    assert "at 9 am for Kim" in read_back.text


def test_the_wished_time_taken_offers_what_is_free() -> None:
    talk, state = conversation(), in_form("time", day="2026-12-09", name="Kim")
    find = talk.decide(state, reading("book_visit", {"time": "7 pm"}), HEARD)
    offer = talk.forms.next_step(state, "t2", {find.key: result("free_slots", "succeeded", FREE)})
    assert isinstance(offer, d.Offer) and offer.field == "time"
    assert offer.options == ("8 am", "9 am")
    assert state.pending is None


def test_a_day_with_nothing_free_asks_for_another_day() -> None:
    talk, state = conversation(), in_form("time", day="2026-12-09", name="Kim")
    find = talk.decide(state, reading("book_visit", {"time": "7 pm"}), HEARD)
    step = talk.forms.next_step(state, "t2", {find.key: result("free_slots", "succeeded", {"result": []})})
    assert isinstance(step, d.Ask) and step.field == "day"
    assert "day" not in state.form.values


def test_a_finder_that_cannot_be_reached_says_so_and_proposes_nothing() -> None:
    talk, state = conversation(), in_form("time", day="2026-12-09", name="Kim")
    find = talk.decide(state, reading("book_visit", {"time": "9 am"}), HEARD)
    step = talk.forms.next_step(state, "t2", {find.key: result("free_slots", "unavailable", {"ok": False})})
    assert step == d.Say(S.tool_unavailable)
    assert state.pending is None


def test_a_lookup_says_what_it_found() -> None:
    talk, state = conversation(), SessionState()
    find = talk.decide(state, reading("find_visit", {"name": "Kim"}), HEARD)
    found = talk.forms.next_step(state, "t2", {find.key: result("find_visit", "succeeded", {
        "result": [{"day": "Wednesday", "time": "9 AM"}]})})
    assert isinstance(found, d.Found) and "a visit on Wednesday at 9 AM" in found.text
    assert state.form is None


@pytest.mark.parametrize(("outcome", "expected"), [
    (WriteOutcome("unknown", "I can't tell whether it went through."),
     [d.Handoff("unknown_outcome", "I can't tell whether it went through.")]),
    (WriteOutcome("done", "Booked."), [d.Say("Booked.")]),
])
def test_what_follows_a_write(outcome, expected) -> None:
    assert conversation().after_write(in_form(""), outcome, HEARD) == expected


def test_a_refused_write_looks_again_for_what_is_free() -> None:
    talk, state = conversation(), in_form("", day="2026-12-09", time="09:00", name="Kim")
    said, step = talk.after_write(state, WriteOutcome("refused", "That slot was just taken."), HEARD)
    assert said == d.Say("That slot was just taken.")
    assert step == d.Find("free_slots", {"day": "2026-12-09"})


def test_the_same_again_starts_the_last_task_with_its_values() -> None:
    talk = conversation()
    state = SessionState(last_task="book_visit", given={"name": "Kim", "time": "09:00"})
    decision = talk.decide(state, reading(OTHER, {"day": "Friday"}, same=True,
                                          text="The same again for Friday."), HEARD)
    assert decision == d.Find("free_slots", {"day": "2026-12-11"})
    assert state.form.values["name"] == "Kim"


def test_decision_names_for_the_record() -> None:
    assert d.name_of(d.ReadBack(A_VISIT, "...")) == "read_back"
    assert d.name_of(d.Run(A_VISIT)) == "run"
    assert d.text_of(d.Run(A_VISIT)) == ""
