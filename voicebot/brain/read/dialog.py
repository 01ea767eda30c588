"""Dialog rules code decides, not the model (docs/design.md, "The brain's rules").

- A request for a person hands off at once, from any state; the handoff carries a
  summary of what was collected, so the colleague never asks again.
- Short dialogue acts (yes, no, a number, a name) inside an ongoing task are not
  screened by the topic guard.
"""

from __future__ import annotations

import re
from typing import Any

from voicebot.brain.read.confirm import Answer, answer_to_read_back
from voicebot.brain.read.values import digits

_HANDOFF = re.compile(
    r"\b(?:human|real person|a person|someone real|an agent|live agent|representative|operator|"
    r"manager|staff member)\b|(?:talk|speak) to (?:someone|somebody)|"
    r"상담원|직원|사람(?:이랑|하고|과|와|한테)|사람 바꿔|연결해", re.I)
_CLARIFY = re.compile(
    r"\b(?:sorry,? i didn't (?:catch|understand|get)|i didn't (?:catch|understand|get) that|"
    r"could you (?:repeat|say that again|rephrase)|i'm not sure what you mean|pardon)\b", re.I)


def asks_for_human(text: str) -> bool:
    return bool(_HANDOFF.search(text))


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


_QUESTION_OR_REQUEST = re.compile(
    r"\?|^(?:what|why|how|who|where|when|which|can|could|would|will|do|does|is|are|tell|write|explain|"
    r"give|show|help|let's|please)\b|\b(?:tell me|write|explain|give me|show me|help me|solve|translate|"
    r"draft|what|why|how|who)\b"
    # Short requests to be someone or something else ("Pretend you're my girlfriend."): four
    # words, but no answer to the bot's question.
    r"|\b(?:pretend|imagine|role-?play|act as|sing|summari[sz]e|"
    r"(?:ignore|forget) (?:your|all|the|previous|every))\b", re.I)


def is_dialogue_act(text: str) -> bool:
    """A short answer inside a task: yes, no, a correction, a number, a name, a date or time.
    Such words are never screened as off-topic; a question or a request still is."""
    words = text.split()
    if not words or len(words) > 12 or _QUESTION_OR_REQUEST.search(text.strip()):
        return False
    if answer_to_read_back(text) is not Answer.OTHER or len(words) <= 5:
        return True
    return bool(re.search(r"\d", digits(text)))  # a value: "we are three people, not two"
