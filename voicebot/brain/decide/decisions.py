"""The closed set of decisions code makes in a turn.

``Conversation.decide`` (and the form's ``Forms.next_step``) return exactly one of these for a
reading; the runtime carries each out in one place (``runtime/dialogue.py``, ``carry_out``), the
way Rasa CALM's commands are applied by one processor. Only ``Run`` runs an action, and only
``decide`` makes a ``Run``: after a plain yes to the read-back the caller heard in full.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from voicebot.brain.decide.state import PendingAction


@dataclass(frozen=True)
class Say:
    """Code's words and nothing more: a greeting, a goodbye, what the bot can do, an outcome."""

    text: str


@dataclass(frozen=True)
class Ask:
    """The question for a field of the task at hand (``field`` empty: an open question, such as
    "what would you like to change?" or "anything else?")."""

    field: str
    text: str


@dataclass(frozen=True)
class Offer:
    """What the business's read-only tool listed instead of the caller's wish; one may be picked."""

    field: str
    options: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class ReadBack:
    """The one action code built from the form, read back: only a plain yes to it runs it."""

    action: PendingAction
    text: str


@dataclass(frozen=True)
class Run:
    """A plain yes to the read-back the caller heard in full: exactly that action, once."""

    action: PendingAction


@dataclass(frozen=True)
class Find:
    """A read-only tool the form needs before its next step (a finder or a lookup). The act stage
    calls it and the form's next step goes on with its result (``Forms.next_step``)."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return lookup_key(self.tool, self.args)


@dataclass(frozen=True)
class Found:
    """What a lookup task found, said."""

    text: str


@dataclass(frozen=True)
class Answer:
    """A question answered from the business's knowledge only (its unknown sentence when the
    knowledge does not answer it), then ``then``: the question code was asking, again."""

    question: str
    then: str = ""


@dataclass(frozen=True)
class Handoff:
    """The call goes to a person, with a summary of what was collected."""

    reason: str
    text: str = ""


@dataclass(frozen=True)
class Fallback:
    """The words needed the model and it could not read them: the fallback sentence."""

    text: str


@dataclass(frozen=True)
class Urgent:
    """An urgent situation the business names: its sentence first, and a handoff if it says so."""

    situation: str
    text: str
    handoff: bool = False


Decision = Say | Ask | Offer | ReadBack | Run | Find | Found | Answer | Handoff | Fallback | Urgent


def lookup_key(tool: str, args: dict[str, Any]) -> str:
    """One read-only call's identity within a turn: the same tool with the same arguments."""
    return f"{tool} {json.dumps(args, sort_keys=True, default=str)}"


def name_of(decision: Decision) -> str:
    """The decision's kind for the turn's record and metrics: ``read_back``, ``ask``, ..."""
    name = type(decision).__name__
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


def text_of(decision: Decision) -> str:
    """The words a decision says by itself (empty for ``Run``, ``Find`` and ``Answer``)."""
    return getattr(decision, "text", "")
