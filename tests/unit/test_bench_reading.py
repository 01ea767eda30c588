"""make bench-reading's lines and scoring: enough lines per language, none a dialogue's own, and a
reading scored field by field on the values the brain keeps."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import yaml

from bench.reading import (
    CANDIDATES,
    SHIPPED,
    act_of,
    kept,
    load_lines,
    score,
    state_of,
    summary,
)
from voicebot.brain.business.profile import Sentences
from voicebot.brain.business.references import References
from voicebot.brain.business.tasks import FieldSpec, TaskSpec
from voicebot.brain.decide.form import Forms
from voicebot.brain.decide.state import FormState, SessionState
from voicebot.brain.lang import language_pack
from voicebot.brain.read.numbers import number_words
from voicebot.brain.read.turn_reading import TurnReader

ROOT = Path(__file__).resolve().parents[2]
MONDAY = dt.date(2026, 12, 7)
FIELDS = (FieldSpec("day", "date", "Which day?", True),
          FieldSpec("time", "time", "At what time?", True, between=("18:00", "22:00")),
          FieldSpec("people", "integer", "How many?", True,
                    numbers=number_words(SimpleNamespace(counts=["people"], said_as=[], more=[], fewer=[],
                                                         words_for={1: ["just me"]}))),
          FieldSpec("reason", "text", "Why?", False))
BOOK = TaskSpec(name="book", title="book a table", lookup=False, fields=FIELDS,
                arguments=("day", "time", "people"))


def forms() -> Forms:
    sentences = Sentences(**language_pack("en").sentences)
    return Forms({"book": BOOK}, sentences, References({}, ()), lambda: MONDAY)


def test_each_language_has_sixty_lines_or_more_and_every_line_expects_something():
    today, lines = load_lines()
    assert today.weekday() == 0
    for language in ("en", "ko"):
        assert sum(line.language == language for line in lines) >= 60
    assert all(line.expect or line.act for line in lines)
    assert {line.profile for line in lines if line.language == "en"} == {"restaurant", "clinic", "salon"}


def test_no_line_is_a_turn_of_the_shipped_dialogues():
    said = set()
    for path in ROOT.glob("examples/*/dialogs*.yaml"):
        for dialog in yaml.safe_load(path.read_text())["dialogs"]:
            said |= {str(turn).strip().lower() for turn in dialog["turns"]}
    _, lines = load_lines()
    assert [line.say for line in lines if line.say.strip().lower() in said] == []


def test_a_line_is_read_in_its_context_a_form_asking_or_a_read_back_waiting():
    _, lines = load_lines()
    asking = next(line for line in lines if line.state.get("asking") == "time")
    state = state_of(asking)
    assert state.form is not None and state.form.asking == "time" and state.pending is None
    waiting = next(line for line in lines if line.state.get("pending"))
    assert state_of(waiting).pending is not None
    fresh = next(line for line in lines if not line.state)
    assert state_of(fresh).form is None


def test_the_values_kept_are_the_brains_normalised_ones():
    state = SessionState(form=FormState(task="book", asking="day"))
    values = {"day": "tomorrow", "time": "half past seven", "people": "just me",
              "reason": "  a sore throat. "}
    assert kept(forms(), list(FIELDS), values, state) == {
        "day": "2026-12-08", "time": "19:30", "people": 1, "reason": "a sore throat"}
    assert kept(forms(), list(FIELDS), {"time": "whenever"}, state) == {}  # nothing a time


def test_a_reading_is_scored_on_every_field_expected_or_read():
    kinds = {"day": "date", "time": "time", "people": "integer", "reason": "text"}
    expected = {"intent": "book", "day": "2026-12-08", "people": 2, "reason": "rash on my arm"}
    read = {"intent": "book", "day": "2026-12-08", "people": 3, "time": "19:00",
            "reason": "I have a rash on my arm"}
    assert score(expected, read, kinds) == {
        "day": True, "intent": True, "people": False,  # a wrong value
        "reason": True,  # a text field holds the expected words
        "time": False}  # a value the caller never gave
    assert score({"reason": "rash on my arm"}, {"reason": "a rash"}, kinds) == {"reason": False}
    assert score({"day": "2026-12-08"}, {}, kinds) == {"day": False}  # a value not read
    assert score({}, {}, kinds) == {}  # nothing said, nothing read: nothing to count


def test_the_summary_counts_fields_lines_failures_and_inventions():
    rows = [{"fields": {"day": True, "time": False}, "failed": False, "not_said": ["name"], "ms": 100,
             "act_right": None},
            {"fields": {"intent": True}, "failed": False, "not_said": [], "ms": 300, "act_right": True},
            {"fields": {"day": False}, "failed": True, "not_said": [], "ms": 500, "act_right": False}]
    row = summary("shipped", "en", rows)
    assert (row["lines"], row["fields"], row["field_accuracy"], row["line_accuracy"]) == (3, 4, 0.5, 0.333)
    assert (row["failed"], row["invented"], row["acts"]) == (1, 1, "1/2")
    assert row["ms_p50"] == 300


def test_an_answer_to_a_read_back_is_an_act_only_while_one_waits():
    assert act_of(TurnReader.acts("Yes, go ahead.", "en"), pending=True) == "yes"
    assert act_of(TurnReader.acts("Do you have parking?", "en"), pending=False) == "question"
    assert act_of(TurnReader.acts("Can I talk to a real person please?", "en"), pending=False) == "person"


def test_every_bench_only_candidate_is_pinned_packages_and_a_sha256():
    for name, candidate in CANDIDATES.items():
        if name == SHIPPED:
            continue
        assert candidate.packages and all("==" in package for package in candidate.packages)
        assert len(candidate.sha256) == 64 and candidate.gguf.endswith(".gguf") and candidate.files
