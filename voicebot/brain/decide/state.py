"""The session's dialog state: one typed model, changed only through its methods.

What code decides lives here: the one pending action (what the caller is asked
to confirm, exactly as it will run), the fields collected for the task at
hand, server-issued references (``S1``) and the counters of the dialog rules.
It is stored with the history in Redis and shown to the model only through
``model_view`` (no internal ids, no arguments of a pending write).
"""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Mode(StrEnum):
    LISTEN = "listen"
    CONFIRM = "confirm"
    DONE = "done"
    HANDOFF = "handoff"


class PendingAction(BaseModel):
    """A write the model (or a hook) asked for. It runs only as it is here, after a yes."""

    id: str = Field(default_factory=lambda: "p_" + uuid.uuid4().hex[:10])
    tool: str
    args: dict[str, Any]  # resolved: real ids, exactly what the tool receives
    action: str  # the spoken read-back of the action ("book a table for 2 on ...")
    read_back_turn: str = ""  # the turn whose reply read it back


class Reference(BaseModel):
    kind: str  # the id field it stands for, e.g. "slot_id"
    id: str
    label: str


class Option(BaseModel):
    """An item a finder listed, offered to the caller as an alternative."""

    argument: str  # the tool argument it would fill
    label: str  # as it was offered ("7:30 pm")
    item: dict[str, Any]  # the tool's item, ids included (never shown to the model)


class FormState(BaseModel):
    """The task at hand: what the caller gave so far, and what code asked last."""

    task: str  # the task's (write or lookup tool's) name
    values: dict[str, Any] = Field(default_factory=dict)  # field -> normalised value
    asking: str = ""  # the field code asked for last
    misses: int = 0  # turns in a row that did not give the field asked for
    options: list[Option] = Field(default_factory=list)  # alternatives offered last
    picked: dict[str, dict[str, Any]] = Field(default_factory=dict)  # argument -> chosen item


class Outcome(BaseModel):
    """What became of a write, kept until the caller has heard it: the reply that says it may be
    cut off, or cancelled while the write still ran (``SessionRuntime._compose``)."""

    action_id: str
    say: str  # code's sentence for the caller
    turn_id: str  # the turn whose reply says it
    # The task the write finished (done only): words spoken over the write are read against it,
    # so a change to it becomes a new read-back.
    form: FormState | None = None


class SessionState(BaseModel):
    mode: Mode = Mode.LISTEN
    pending: PendingAction | None = None
    # A confirmed write under way, stored before it runs: a yes can no longer run it, and a
    # turn that finds it with nobody running it (its replica died) says its outcome is unknown.
    running: PendingAction | None = None
    untold: Outcome | None = None
    task: dict[str, Any] = Field(default_factory=dict)  # what the caller told us for the task at hand
    refs: dict[str, Reference] = Field(default_factory=dict)
    misunderstood: int = 0
    last_outcome: str = ""
    form: FormState | None = None
    # What the caller gave for tasks of this call that ended (field -> value): a later task takes
    # them when the caller says so ("the same car") or the profile carries the field.
    given: dict[str, Any] = Field(default_factory=dict)
    last_task: str = ""  # the task those values were last given for

    # ---- transitions -------------------------------------------------------
    def start_turn(self) -> None:
        """A handoff or a finished action does not hold the next turn hostage."""
        if self.mode in (Mode.HANDOFF, Mode.DONE):
            self.mode = Mode.LISTEN

    def propose(self, action: PendingAction) -> None:
        """The new pending action replaces any older one: only the last read-back can run."""
        self.pending = action
        self.mode = Mode.CONFIRM

    def read_back(self, turn_id: str) -> None:
        if self.pending is not None:
            self.pending.read_back_turn = turn_id
            self.mode = Mode.CONFIRM

    def drop_pending(self) -> PendingAction | None:
        dropped, self.pending = self.pending, None
        if self.mode is Mode.CONFIRM:
            self.mode = Mode.LISTEN
        return dropped

    def take_pending(self) -> PendingAction:
        """Out of the state before it runs: whatever happens next, it cannot run twice."""
        action = self.pending
        assert action is not None
        self.pending, self.running = None, action
        return action

    def completed(self, outcome: str) -> None:
        """After a write: nothing pending, nothing collected left to propose again."""
        self.keep_given()
        self.pending, self.running, self.task, self.form = None, None, {}, None
        self.mode, self.misunderstood, self.last_outcome = Mode.DONE, 0, outcome

    def keep_given(self) -> None:
        """The task's values, kept for later tasks of the call."""
        if self.form is not None:
            self.given.update({k: v for k, v in self.form.values.items() if v not in (None, "")})
            self.last_task = self.form.task

    def failed(self, outcome: str) -> None:
        self.pending, self.running, self.last_outcome = None, None, outcome
        self.mode = Mode.LISTEN

    def outcome_unknown(self, outcome: str) -> None:
        """A write that may or may not have run: nothing of it is proposed again."""
        self.pending, self.running, self.task, self.form = None, None, {}, None
        self.mode, self.last_outcome = Mode.LISTEN, outcome

    def settled(self, action_id: str, finished: SessionState) -> None:
        """A write's outcome on a state a later turn changed while it ran (its lease was lost):
        the write's marker goes and its outcome is told; what the later turn decided stays."""
        if self.running is not None and self.running.id == action_id:
            self.running = None
        if self.pending is not None and self.pending.id == action_id:
            self.pending = None
        self.last_outcome, self.untold = finished.last_outcome, finished.untold

    def handed_off(self) -> None:
        self.pending, self.form, self.mode, self.misunderstood = None, None, Mode.HANDOFF, 0

    def understood(self, understood: bool) -> int:
        self.misunderstood = 0 if understood else self.misunderstood + 1
        return self.misunderstood

    # ---- references ------------------------------------------------------
    def issue_ref(self, kind: str, internal_id: str, label: str, prefix: str) -> str:
        for ref, entry in self.refs.items():
            if entry.kind == kind and entry.id == internal_id:
                entry.label = label or entry.label
                self.refs[ref] = self.refs.pop(ref)  # seen again: among the latest (model_view)
                return ref
        number = 1 + sum(1 for ref in self.refs if ref.rstrip("0123456789") == prefix)
        ref = f"{prefix}{number}"
        self.refs[ref] = Reference(kind=kind, id=internal_id, label=label)
        return ref

    def resolve_ref(self, ref: Any, kind: str) -> Reference | None:
        entry = self.refs.get(str(ref).strip().upper())
        return entry if entry is not None and entry.kind == kind else None

    def knows(self, kind: str, internal_id: str) -> bool:
        return any(e.kind == kind and e.id == internal_id for e in self.refs.values())

    # ---- what the model sees -------------------------------------------
    def model_view(self, note: str = "", call: dict[str, str] | None = None,
                   references: int | None = None) -> dict[str, Any]:
        """What the model is shown of the state; ``references``: at most that many, the latest."""
        view: dict[str, Any] = {"dialog_state": self.mode.value}
        if call:
            view["call"] = dict(sorted(call.items()))  # the call's metadata: data, not the caller's words
        if self.task:
            view["collected"] = self.task
        if self.form is not None:
            view["task"] = {"name": self.form.task, "collected": self.form.values}
        if self.pending is not None:
            view["awaiting_confirmation"] = self.pending.action
        if self.last_outcome:
            view["last_outcome"] = self.last_outcome
        if self.refs:
            shown = list(self.refs.items())[-references:] if references else self.refs.items()
            view["references"] = {ref: entry.label for ref, entry in shown}
        if note:
            view["note"] = note
        return view
