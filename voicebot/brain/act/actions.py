"""Writes under confirmation: a call to a write tool becomes one pending action; a yes runs it.

``propose`` never runs anything. It takes a validated call (from the model or
a domain hook), resolves its references to real ids, and stores exactly what
will run together with the read-back code speaks: the profile's template for
that tool, or a sentence built from the tool's title and its arguments in
spoken form. ``run`` executes a pending action once, with an idempotency key
chosen by code. It is stored as running before it runs (a later yes finds
nothing to run, and an outcome that is never stored reads as unknown, never as
pending), and its outcome is stored at once, with the sentence that tells the
caller (an interrupted turn stores nothing else, but the fact that a write
happened must not be lost, nor go untold).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from voicebot.brain.act.toolcalls import ToolCall, new_call_id
from voicebot.brain.act.tools import Dispatcher, Tool, ToolContext, ToolResult
from voicebot.brain.business.profile import Sentences
from voicebot.brain.business.references import IDEMPOTENCY_KEY, References
from voicebot.brain.decide.state import Outcome, PendingAction, SessionState
from voicebot.brain.decide.tool_errors import classify, error_text, said_in
from voicebot.brain.runtime.session_lease import Lease, LeaseLost
from voicebot.brain.runtime.session_store import SessionHistory, SessionStore
from voicebot.brain.speak.readback import default_action, render, sentence

log = logging.getLogger(__name__)
# Pauses before storing a write's outcome again (Redis away for a moment): the outcome of a
# write that ran must reach the store, or the next turn can only call it unknown.
OUTCOME_RETRIES_S = (0.1, 0.3, 1.0)
AWAITING = ("Not done yet: the system reads this back to the caller and runs it only after they "
            "say yes. Do not ask for confirmation yourself.")


@dataclass(frozen=True)
class WriteOutcome:
    status: str  # done | refused | field | unavailable | unknown
    say: str = ""  # code's sentence for the caller
    field: str = ""  # status field: the value the business did not accept
    note: str = ""  # for the model, when it answers next (refused: look for alternatives)
    result: ToolResult | None = None


class Actions:
    def __init__(self, dispatcher: Dispatcher, references: References, sentences: Sentences,
                 store: SessionStore, language: str = "en",
                 errors: dict[str, dict[str, Any]] | None = None, server_words: bool = True) -> None:
        self.dispatcher = dispatcher
        self.language = language  # whose words values are said in
        # Per tool, the profile's meanings of its errors in this language (default: the tool's own).
        self.errors = errors
        # The tool servers' own sentences may be said: the call is in their (the business's) language.
        self.server_words = server_words
        self.references = references
        self.sentences = sentences
        self.store = store

    def propose(self, state: SessionState, tool: Tool, call: ToolCall, args: dict[str, Any],
                turn_id: str) -> ToolResult:
        """One pending action from a validated write call (it replaces any older one)."""
        args = {k: v for k, v in args.items() if k != IDEMPOTENCY_KEY}
        resolved = self.references.resolve(args, state)  # UnknownReference goes back to the model
        spoken = self.references.labels(args, state)
        action = PendingAction(tool=tool.spec.name, args=resolved, action=self.read_back(tool, spoken),
                               read_back_turn=turn_id)
        state.propose(action)
        return ToolResult(call, "proposed", {"ok": True, "status": "awaiting confirmation",
                                             "read_back": action.action, "note": AWAITING},
                          tool.spec.kind)

    def read_back(self, tool: Tool, spoken_args: dict[str, Any]) -> str:
        if tool.spec.read_back:
            return render(tool.spec.read_back, spoken_args, self.language)
        return default_action(tool.spec.spoken_title(), spoken_args, frozenset(self.references.kinds),
                              self.language)

    def confirm_sentence(self, action: PendingAction) -> str:
        return sentence(self.sentences.confirm.format(action=action.action))

    async def run(self, state: SessionState, action: PendingAction, user_id: str, session_id: str,
                  turn_id: str, tool: Tool | None, done: str = "", lease: Lease | None = None
                  ) -> WriteOutcome:
        """Run the action once (``state`` has it as running: ``take_pending``); the state after
        it is persisted before this returns. ``lease``: the session's, held by the turn."""
        try:
            await self._store(state, user_id, session_id, lease)
        except RedisError as exc:  # not marked as running: it must not run (it could run twice)
            log.error("could not mark a write as running; it does not run", extra={"error": repr(exc)})
            state.failed(f"not done ({action.action}): the session could not be stored")
            return WriteOutcome("unavailable", self.sentences.tool_unavailable)
        call = ToolCall(new_call_id(), action.tool, json.dumps(action.args))
        finished = state.form.model_copy(deep=True) if state.form is not None else None
        if tool is None:  # the tool server no longer offers it: provably not run
            outcome = WriteOutcome("unavailable", self.sentences.tool_unavailable)
            state.failed(f"not done ({action.action}): the tool is not available")
        else:
            ctx = ToolContext(user_id, session_id, turn_id, {},
                              idempotency_key=f"{session_id}:{action.id}")
            result = await self.dispatcher.run(tool, call, dict(action.args), ctx)
            outcome = self._outcome(state, action, tool, result, done)
        state.untold = Outcome(action_id=action.id, say=outcome.say or self.sentences.not_done,
                               turn_id=turn_id, form=finished if outcome.status == "done" else None)
        await self._store_outcome(state, action, user_id, session_id, lease)
        return outcome

    async def _store(self, state: SessionState, user_id: str, session_id: str,
                     lease: Lease | None) -> SessionHistory:
        snapshot = state.model_copy(deep=True)

        def keep(history: SessionHistory) -> None:
            history.state = snapshot

        return await self.store.update(user_id, session_id, keep, lease=lease)

    async def _store_outcome(self, state: SessionState, action: PendingAction, user_id: str,
                             session_id: str, lease: Lease | None) -> None:
        """On the state the turn read (its lease), or, when a later turn took the session
        meanwhile, on what that turn made of it (``SessionState.settled``)."""
        finished = state.model_copy(deep=True)
        for pause in (*OUTCOME_RETRIES_S, None):
            try:
                try:
                    await self._store(state, user_id, session_id, lease)
                except LeaseLost:
                    await self.store.update(user_id, session_id,
                                            lambda history: history.state.settled(action.id, finished))
                return
            except RedisError as exc:
                if pause is None:
                    log.error("could not store a write's outcome", extra={"error": repr(exc)})
                    return
                await asyncio.sleep(pause)

    def _outcome(self, state: SessionState, action: PendingAction, tool: Tool,
                 result: ToolResult, done: str = "") -> WriteOutcome:
        if result.outcome == "succeeded":
            value = self.references.present(result.content.get("result") or {}, state)
            # What was read back (the task's fields as heard), then the result's own fields.
            values = {**state.task, **(value if isinstance(value, dict) else {}),
                      **self._spoken_args(action, state), "action": action.action}
            template = done or tool.spec.done
            said = render(template, values, self.language) if template \
                else self.sentences.done.format(action=action.action)
            state.completed(f"done: {action.action}")
            return WriteOutcome("done", sentence(said), result=result)
        if result.outcome == "unavailable":  # the server was unreachable: provably not done
            state.failed(f"not done ({action.action}): the tool server is unavailable")
            return WriteOutcome("unavailable", self.sentences.tool_unavailable, result=result)
        rules = tool.spec.errors if self.errors is None else self.errors.get(action.tool)
        problem = classify(result, action.args, rules)
        if problem.kind in ("refusal", "field"):  # the business said no, by its convention: nothing done
            reason = error_text(result) or result.outcome
            state.failed(f"refused, nothing done: {action.action} ({reason})")
            told = said_in(problem, self.server_words)
            if problem.kind == "field":
                return WriteOutcome("field", self.sentences.not_done, note=told, field=problem.field,
                                    result=result)
            say = " ".join(filter(None, [self.sentences.not_done, told]))
            return WriteOutcome("refused", say, result=result)
        # A timeout without a safe retry, or a lost connection: the outcome is unknown. Never guess.
        state.failed(f"unknown outcome ({result.outcome}): {action.action}")
        return WriteOutcome("unknown", self.sentences.unknown_outcome, result=result)

    def _spoken_args(self, action: PendingAction, state: SessionState) -> dict[str, Any]:
        """Arguments as the caller heard them: a real id back to its reference's label."""
        spoken: dict[str, Any] = {}
        for key, value in action.args.items():
            label = next((e.label for e in state.refs.values() if e.kind == key and e.id == str(value)), None)
            spoken[key] = label if label is not None else value
        return spoken
