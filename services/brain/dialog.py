"""Dialog rules that code decides, not the model (DESIGN 5, seed 002).

- A pending irreversible action runs only after the person's next turn confirms it.
  Yes/no is recognised by rules first (English and Korean); only when the rules
  cannot tell is a structured-output model call asked.
- "No, half past two" is a correction, not a refusal; a bare "no" asks what to change.
- A request for a person hands off at once, from any state; so do two
  misunderstood turns in a row. The handoff carries a summary of what was collected.
- Short dialogue acts (yes, no, a number, a name) inside an ongoing task are not
  screened by the topic guard.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any


class Decision(StrEnum):
    YES = "yes"
    NO = "no"
    CORRECTION = "correction"
    UNCLEAR = "unclear"


_YES = re.compile(
    r"^(?:yes|yeah|yep|yup|sure|correct|right|that's right|that is right|ok|okay|please do|go ahead|"
    r"do it|book it|sounds good|perfect|great|absolutely|definitely|네|예|응|맞아요|맞습니다|좋아요|"
    r"그래요|그렇게 해 ?주세요|해 ?주세요)"
    r"(?:[\s,.!]+(?:please|thanks|thank you|go ahead|book it|do it|that's right|please do|"
    r"네|예약해 ?주세요))*"
    r"[\s.!]*$", re.I)
_NO = re.compile(r"^(?:no|nope|nah|not really|don't|do not|wait|아니요|아니오|아뇨|아니)\b[\s,.!]*", re.I)
_CHANGE = re.compile(
    r"\b(?:actually|instead|rather|change|make it|switch|move it|later|earlier|another|different|"
    r"push|forward|joining)\b|\d|"
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|tomorrow|tonight|"
    r"morning|afternoon|evening|noon|half past|quarter|o'clock|one|two|three|four|five|six|seven|"
    r"eight|nine|ten|eleven|twelve|we are|we.re|people)\b|"
    r"말고|대신|바꿔|로 해|요일|시|명", re.I)
# How a change to what was read back opens ("Could you make it later", "What about Saturday"):
# with a change word after it, it is a correction; without one ("Could you repeat that?") the
# rules cannot tell.
_CHANGE_OPENER = re.compile(
    r"^(?:(?:sorry|oh|um|uh|well|hmm),?\s+)?(?:actually|instead|make it|change|could we|can we|"
    r"could you|can you|would you|what about|how about|i'd like|i would like|we'd like|we would like|"
    r"let's|we are|we're|it's|it is|i meant)\b", re.I)
_HANDOFF = re.compile(
    r"\b(?:human|real person|a person|someone real|an agent|live agent|representative|operator|"
    r"manager|staff member)\b|(?:talk|speak) to (?:someone|somebody)|"
    r"상담원|직원|사람(?:이랑|하고|과|와|한테)|사람 바꿔|연결해", re.I)
_CLARIFY = re.compile(
    r"\b(?:sorry,? i didn't (?:catch|understand|get)|i didn't (?:catch|understand|get) that|"
    r"could you (?:repeat|say that again|rephrase)|i'm not sure what you mean|pardon)\b", re.I)


def asks_for_human(text: str) -> bool:
    return bool(_HANDOFF.search(text))


def is_clarification(reply: str) -> bool:
    """The bot's own reply says it did not understand."""
    return bool(_CLARIFY.search(reply))


def classify_confirmation(text: str) -> Decision | None:
    """Rules for the reply to "shall I book it?"; None when the rules cannot tell."""
    text = text.strip()
    if _YES.match(text):
        return Decision.YES
    no = _NO.match(text)
    if no:
        rest = text[no.end():].strip()
        return Decision.CORRECTION if rest and _CHANGE.search(rest) else Decision.NO
    if _CHANGE.search(text) and _CHANGE_OPENER.match(text):
        return Decision.CORRECTION
    return None


CONFIRMATION_SCHEMA = {
    "type": "object",
    "properties": {"decision": {"type": "string", "enum": [d.value for d in Decision]}},
    "required": ["decision"],
    "additionalProperties": False,
}


def confirmation_prompt(summary: str, reply: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": (
            "The assistant asked the caller to confirm an action. Classify the caller's reply. "
            "yes: they agree. no: they refuse without saying what to change. correction: they want "
            "something changed (another time, day, name or number). unclear: anything else. "
            'Answer with JSON: {"decision": "yes" | "no" | "correction" | "unclear"}.')},
        {"role": "user", "content": f"Proposed action: {summary}\nCaller's reply: {reply}"},
    ]


def handoff_summary(state: Any, reason: str) -> str:
    """What was already collected, so the colleague never has to ask again. Built from fields
    code collected, never from the caller's raw words (a spoken phone number stays out)."""
    parts = [f"Reason: {reason.replace('_', ' ')}."]
    if state.task:
        parts.append("Collected: " + ", ".join(f"{k} {v}" for k, v in sorted(state.task.items())
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
    return classify_confirmation(text) is not None or len(words) <= 5
