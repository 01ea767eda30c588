"""What code decides before the model speaks: a decision, which the agent carries out.

Every turn starts here. A request for a person hands off. With a pending
action, the caller's words are classified (rules, then a structured-output
model call only if the rules cannot tell):

- yes: run exactly the pending action, once, but only if its read-back was the
  bot's immediately preceding turn and was heard in full; otherwise it is read
  back again (the caller confirms what they just heard, nothing older);
- a bare no: the pending action is dropped and code asks what to change;
- a correction: the pending action is dropped; the model (or a domain hook)
  proposes anew, and a new read-back follows;
- anything else goes to the model; the action stays pending, and a later yes
  gets the read-back again first.

The policy changes the state only through ``SessionState`` methods and never
calls the agent: it returns ``Reply``, ``RunPending`` or ``Continue``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.brain.dialog import Decision, asks_for_human, classify_confirmation
from services.brain.profile import Sentences
from services.brain.session_store import Turn
from services.brain.state import PendingAction, SessionState
from voicebot.common.speech_text import speakable

Classifier = Callable[[str, str], Awaitable[Decision]]  # (read-back, caller's words) -> decision


@dataclass(frozen=True)
class Reply:
    """Code answers the turn itself; the model is not called."""

    text: str
    handoff: str = ""  # a handoff reason, when the call goes to a person


@dataclass(frozen=True)
class RunPending:
    action: PendingAction


@dataclass(frozen=True)
class Continue:
    """The model answers; ``note`` is for this turn's model calls only."""

    note: str = ""
    correcting: PendingAction | None = None  # the action the caller is changing


PolicyDecision = Reply | RunPending | Continue


def confirm_sentence(sentences: Sentences, action: PendingAction, again: bool = False) -> str:
    template = sentences.confirm_again if again else sentences.confirm
    return template.format(action=action.action)


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", speakable(text).lower()).split())


def heard_in_full(action: PendingAction, last_turn: Turn | None) -> bool:
    """The read-back was the bot's last turn, and the caller heard all of the action in it
    (a "yes" over the closing question is fine; one over the details is not)."""
    if last_turn is None or last_turn.turn_id != action.read_back_turn:
        return False
    return not last_turn.interrupted or _words(action.action) in _words(last_turn.assistant)


async def decide(state: SessionState, text: str, turn_id: str, last_turn: Turn | None,
                 sentences: Sentences, classify: Classifier) -> PolicyDecision:
    if asks_for_human(text):
        return Reply(sentences.handoff, handoff="caller_request")
    pending = state.pending
    if pending is None:
        return Continue()
    decision = classify_confirmation(text) or await classify(pending.action, text)
    if decision is Decision.YES:
        if heard_in_full(pending, last_turn):
            return RunPending(pending)
        state.read_back(turn_id)  # this turn reads it back; the next yes may run it
        return Reply(confirm_sentence(sentences, pending, again=True))
    if decision is Decision.NO:
        state.drop_pending()
        state.understood(True)
        return Reply(sentences.ask_what_to_change)
    if decision is Decision.CORRECTION:
        return correction(state)
    return Continue(note=(f"Waiting for the caller to confirm: {pending.action}. Nothing is done "
                          "until they say yes to the system's read-back."))


def correction(state: SessionState) -> Continue:
    """The caller changes the pending action: it is dropped, and the model proposes anew."""
    pending = state.drop_pending()
    assert pending is not None
    state.understood(True)
    return Continue(note=(
        f"The caller is changing what they were asked to confirm ({pending.action}); nothing was "
        f"done. Call {pending.tool} again with the changed values."), correcting=pending)


def next_model_turn(state: SessionState) -> tuple[SessionState, str]:
    """The state and note the next turn's model call will most likely carry, so the prefill
    after a reply can cache its state block too (a copy: ``state`` is not changed).

    With an action awaiting confirmation, the turns that reach the model are mostly changes to
    it (a yes or a bare no is answered by code, without the model); otherwise the next turn
    starts from the state as it is."""
    state = state.model_copy(deep=True)
    state.start_turn()
    if state.pending is None:
        return state, ""
    return state, correction(state).note
