"""Dialog rules code decides, not the model (docs/design.md, "The brain's rules").

- A request for a person hands off at once, from any state; the handoff carries a
  summary of what was collected, so the colleague never asks again.
- Short dialogue acts (yes, no, a number, a name) inside an ongoing task are not
  screened by the topic guard.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from voicebot.brain.lang import pack_or_default
from voicebot.brain.read.confirm import Answer, answer_to_read_back
from voicebot.brain.read.values import digits


@functools.cache
def _person(language: str) -> re.Pattern[str]:
    pack = pack_or_default(language)
    return re.compile(pack.word(pack.phrases(pack.acts.person)), re.I)


@functools.cache
def _question_or_request(language: str) -> re.Pattern[str]:
    """A question or a request to the bot, never a short answer inside a task; the short
    requests to be someone else ("Pretend you're my girlfriend.") are among the pack's
    ``requests`` too."""
    pack = pack_or_default(language)
    asked = pack.questions
    starts = pack.phrases(asked.request_starts)
    return re.compile(rf"\?|^{pack.word(starts)}|{pack.word(pack.phrases(asked.requests))}", re.I)


def asks_for_human(text: str, language: str = "en") -> bool:
    return bool(_person(language).search(text))


def handoff_summary(state: Any, reason: str) -> str:
    """What was already collected, so the colleague never has to ask again. Built from fields
    code collected, never from the caller's raw words (a spoken phone number stays out)."""
    parts = [f"Reason: {reason.replace('_', ' ')}."]
    collected = dict(state.task)
    if getattr(state, "form", None) is not None:
        parts.append(f"Task: {state.form.task.replace('_', ' ')}.")
        collected.update(state.form.values)
    if collected:
        parts.append("Collected: " + ", ".join(f"{k} {v}" for k, v in sorted(collected.items())
                                               if not str(k).startswith("_")) + ".")
    if state.pending is not None:
        parts.append(f"Pending, not executed: {state.pending.action}.")
    if state.last_outcome:
        parts.append(f"Last action: {state.last_outcome}.")
    return " ".join(parts)


def is_dialogue_act(text: str, language: str = "en") -> bool:
    """A short answer inside a task: yes, no, a correction, a number, a name, a date or time.
    Such words are never screened as off-topic; a question or a request still is."""
    words = text.split()
    if not words or len(words) > 12 or _question_or_request(language).search(text.strip()):
        return False
    if answer_to_read_back(text, language) is not Answer.OTHER or len(words) <= 5:
        return True
    if _names_someone(language).search(text):  # "Put it under Alex Yzgyvq, please."
        return True
    return bool(re.search(r"\d", digits(text, language)))  # a value: "we are three people, not two"


@functools.cache
def _names_someone(language: str) -> re.Pattern[str]:
    """A name said as one: the pack's name leads, then a capitalised word."""
    pack = pack_or_default(language)
    return re.compile(pack.word(pack.phrases(pack.names.leads)) + r"\s+[A-Z]\w+")
