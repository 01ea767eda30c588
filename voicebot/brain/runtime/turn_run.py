"""One turn's scratch state and record, shared by the session runtime and the gate."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from voicebot.brain.decide.decisions import Urgent
from voicebot.brain.decide.state import FormState, SessionState
from voicebot.brain.runtime.session_lease import Lease
from voicebot.brain.runtime.session_store import SessionHistory, Turn
from voicebot.v1 import brain_pb2


class StaleRead(Exception):
    """The session read ahead is older than what Redis holds now (``SessionRuntime._confirmed``)."""


@dataclass
class TurnRun:
    """Scratch state of one turn, and its record."""

    request: brain_pb2.RespondRequest
    history: SessionHistory
    started: float
    language: str = "en"  # the turn's language: the session's where the profile speaks it
    spoken: list[str] = field(default_factory=list)
    fallback: bool = False
    first_text_at: float | None = None
    record: dict[str, Any] = field(default_factory=dict)
    # Cleared while the topic guard's screen judges the words; set again once it passed them or
    # the guard's LLM call is on its way. The turn's model reading waits for it (``SessionRuntime._respond``).
    guard_asked: asyncio.Event = field(default_factory=lambda: _set(asyncio.Event()))
    # Cleared while the urgent check runs: the turn's model reading waits for it, so the check's
    # own model call does not queue behind the reading's on a few CPU cores.
    urgent_checked: asyncio.Event = field(default_factory=lambda: _set(asyncio.Event()))

    async def before_model(self) -> None:
        """What the turn's model reading waits for: the urgent check, and the guard's screen."""
        await self.urgent_checked.wait()
        await self.guard_asked.wait()
    # The session's lease (session_lease.py): taken with the read, or by ``_confirmed`` for a
    # read made ahead.
    lease: Lease | None = None
    # A write's outcome the caller has not heard yet: this reply says it first (``_compose``).
    preface: str = ""
    # The task that write finished: the caller's words may change it (a new read-back).
    finished: FormState | None = None
    # An urgent situation the profile names, recognised in the words (``urgent.py``): its
    # sentence is the reply, and the state is the one the turn started from.
    urgent: Urgent | None = None
    state_before: SessionState | None = None

    @property
    def state(self) -> SessionState:
        return self.history.state

    def reply(self) -> str:
        return "".join(self.spoken).strip()

    def last_turn(self) -> Turn | None:
        return self.history.turns[-1] if self.history.turns else None


def _set(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event
