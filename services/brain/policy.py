"""What code decides around the model's loop: confirmation of pending writes, handoffs.

``before_loop`` runs first on every turn. A request for a person hands off at
once. With a pending action, the person's words are classified (rules, then a
structured-output model call only if the rules cannot tell): yes runs the
write, by code, exactly once; "no" asks what to change; a correction goes to
the model with the pending action still in view; anything else asks again,
and two misunderstandings in a row hand off. ``after_loop`` handles a
model-requested transfer and misunderstood turns.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from services.brain.dialog import (
    CONFIRMATION_SCHEMA,
    Decision,
    DialogState,
    asks_for_human,
    classify_confirmation,
    confirmation_prompt,
    handoff_summary,
    is_clarification,
)
from services.brain.llm import LLMRequestError, LLMUnavailable
from services.brain.metrics import HANDOFFS
from services.brain.references import References
from services.brain.slots import complete, extract_slots, is_booking_request
from services.brain.toolcalls import ToolCall, new_call_id
from services.brain.tools import ToolContext, ToolResult
from voicebot.v1 import brain_pb2

if TYPE_CHECKING:
    from services.brain.agent import Agent, TurnRun

log = logging.getLogger(__name__)

HANDOFF_TEXT = "I'll connect you with a colleague now; they'll have all the details."
UNKNOWN_OUTCOME_TEXT = "I could not confirm the booking; a colleague will check and get back to you."
ASK_WHAT_TO_CHANGE = "Okay. What would you like to change?"
SLOT_TAKEN_NOTE = ("The slot was just taken by someone else; nothing was booked. Tell the caller, "
                   "look for alternatives with find_slots and propose one.")


def model_view(state: dict[str, Any]) -> dict[str, Any]:
    """The session state as the model sees it: no internal ids, no arguments of pending writes."""
    view: dict[str, Any] = {"dialog_state": state.get("dialog_state", DialogState.LISTEN.value)}
    for key in ("collected", "last_outcome", "note"):
        if state.get(key):
            view[key] = state[key]
    if state.get("pending"):
        view["pending_confirmation"] = state["pending"]["summary"]
    refs = References(dict(state)).labels() if state.get("refs") else {}
    if refs:
        view["references"] = refs
    return view


class DialogPolicy:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    # ---- before the model ------------------------------------------------
    async def before_loop(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> bool:
        """True when code handled the whole turn and the model loop must not run."""
        state, text = turn.history.state, turn.request.text
        if asks_for_human(text):
            await self.handoff(turn, events, "caller_request")
            return True
        slots = extract_slots(text)
        if slots:
            state.setdefault("collected", {}).update(slots)
        pending = state.get("pending")
        if not pending:
            return await self._propose_from_slots(turn, passed, events)
        decision = classify_confirmation(text) or await self._ask_model(pending["summary"], text)
        turn.record["confirmation"] = decision.value
        if decision is Decision.YES:
            await passed.wait()  # no write before the topic guard has passed the turn
            return await self._execute(turn, events, pending)
        if decision is Decision.NO:
            state["misunderstood"] = 0
            await self.agent.say(turn, events, ASK_WHAT_TO_CHANGE)
            return True
        if decision is Decision.CORRECTION:
            state["misunderstood"] = 0
            state["note"] = ("The caller wants to change the pending proposal: apply the change and "
                             "propose again (nothing is booked yet).")
            return False
        return await self._not_understood(turn, events, f"Sorry, shall I go ahead with {pending['summary']}? "
                                          "Please say yes or no.")

    async def _propose_from_slots(self, turn: TurnRun, passed: asyncio.Event,
                                  events: asyncio.Queue) -> bool:
        """Every slot of a booking is known: take the path the model should take
        (find_slots, then propose_reservation) and read the proposal back. Nothing is booked."""
        state, agent = turn.history.state, self.agent
        collected = state.get("collected") or {}
        asked = [turn.request.text, *(t.user for t in turn.history.turns[-4:])]
        if not (agent.settings.slot_filling and complete(collected)
                and any(is_booking_request(t) for t in asked)
                and agent.tools.get("find_slots") and agent.tools.get("propose_reservation")):
            return False
        await passed.wait()  # tools wait for the topic guard
        wanted = {"day": collected["day"], "time": collected["time"], "people": collected["people"]}
        [found] = await self._code_call(turn, events, "find_slots", wanted)
        slots = (found.content.get("result") or {}).get("slots") or []
        match = next((s for s in slots if s.get("time") == collected["time"]), None)
        if found.outcome != "succeeded" or match is None:
            free = ", ".join(f"{s['slot']} at {s['time']}" for s in slots[:3]) or "none"
            state["note"] = (f"No table at {collected['time']} on {collected['day']}. Free: {free}. "
                             "Offer these to the caller.")
            return False
        [proposed] = await self._code_call(turn, events, "propose_reservation", {
            "slot": match["slot"], "name": collected["name"], "people": collected["people"]})
        if proposed.outcome != "succeeded":
            return False
        await agent.say(turn, events, f"I have {proposed.content['result']['proposed']}. Shall I book it?")
        return True

    async def _code_call(self, turn: TurnRun, events: asyncio.Queue, name: str,
                         arguments: dict[str, Any]) -> list[ToolResult]:
        """A tool call made by code, recorded in the turn like the model's own calls."""
        call = ToolCall(new_call_id(), name, json.dumps(arguments))
        results = await self.agent.run_tools(turn, "", [call], events)
        turn.steps += [result.message() for result in results]
        return results

    async def _ask_model(self, summary: str, reply: str) -> Decision:
        """Structured-output call, only when the rules could not tell."""
        parts: list[str] = []
        try:
            async for chunk in self.agent.chat(confirmation_prompt(summary, reply), max_tokens=20,
                                               response_format={"type": "json_schema", "json_schema": {
                                                   "name": "confirmation", "schema": CONFIRMATION_SCHEMA}}):
                parts.append(chunk.text)
            return Decision(json.loads("".join(parts))["decision"])
        except (LLMUnavailable, LLMRequestError, ValueError, KeyError, TypeError) as exc:
            log.info("confirmation unclear", extra={"error": repr(exc)})
            return Decision.UNCLEAR

    async def _execute(self, turn: TurnRun, events: asyncio.Queue, pending: dict[str, Any]) -> bool:
        state = turn.history.state
        # Taken out of the state before it runs: whatever happens next, it cannot run twice.
        del state["pending"]
        # The write finishes and is recorded even if the person interrupts now (barge-in).
        result = await asyncio.shield(self._write(turn, pending))
        outcome = result.outcome
        if outcome == "succeeded":
            return await self._done(turn, events, pending, result)
        if outcome == "refused":
            state.update(dialog_state=DialogState.LISTEN.value, note=SLOT_TAKEN_NOTE,
                         last_outcome=f"refused: {pending['summary']}")
            return False  # the model looks for alternatives and proposes again
        # Timeout without a safe retry, or an error: the outcome is unknown. Never guess.
        state["last_outcome"] = f"unknown outcome ({outcome}): {pending['summary']}"
        state["pending_unknown"] = pending["summary"]
        await self.handoff(turn, events, "unknown_outcome", UNKNOWN_OUTCOME_TEXT)
        return True

    async def _write(self, turn: TurnRun, pending: dict[str, Any]) -> ToolResult:
        request = turn.request
        tool = self.agent.tools.get(pending["tool"])
        call = ToolCall(new_call_id(), pending["tool"], json.dumps(pending["args"]))
        if tool is None:
            return ToolResult(call, "failed", {"ok": False, "error": "tool not available"})
        ctx = ToolContext(request.user_id, request.session_id, request.turn_id, turn.history.state,
                          idempotency_key=f"{request.session_id}:{pending['id']}")
        result = await self.agent.dispatcher.run(tool, call, dict(pending["args"]), ctx)
        turn.record["tools"].append({"name": call.name, "confirmed": True, "outcome": result.outcome,
                                     "attempts": result.attempts})
        # Persisted now, not at the end of the turn: an interrupted turn stores nothing else,
        # but the fact that a write happened must not be lost.
        snapshot = dict(turn.history.state)
        snapshot["last_outcome"] = f"{result.outcome}: {pending['summary']}"
        await self.agent.store.update(request.user_id, request.session_id,
                                      lambda h: (h.state.clear(), h.state.update(snapshot)))
        return result

    async def _done(self, turn: TurnRun, events: asyncio.Queue, pending: dict[str, Any],
                    result: ToolResult) -> bool:
        state = turn.history.state
        value = result.content.get("result") or {}
        state.update(dialog_state=DialogState.DONE.value, misunderstood=0)
        if pending["tool"] == "create_reservation" and value.get("reservation_id"):
            ref = References(state).issue("reservation", value["reservation_id"], pending["summary"])
            state["last_outcome"] = f"booked {pending['summary']} as {ref}"
            await self.agent.say(turn, events, f"Done: {pending['summary']} is booked. "
                                               f"Your reference is {ref}.")
        else:
            state["last_outcome"] = f"done: {pending['summary']}"
            await self.agent.say(turn, events, f"Done: {pending['summary']}.")
        return True

    # ---- after the model ---------------------------------------------------
    async def after_loop(self, turn: TurnRun, events: asyncio.Queue) -> None:
        state = turn.history.state
        requested = state.pop("handoff_requested", None)
        if requested:
            await self.handoff(turn, events, "caller_request")
            return
        if is_clarification(turn.reply()):
            await self._not_understood(turn, events, None)
        else:
            state["misunderstood"] = 0

    async def _not_understood(self, turn: TurnRun, events: asyncio.Queue, ask_again: str | None) -> bool:
        state = turn.history.state
        state["misunderstood"] = state.get("misunderstood", 0) + 1
        if state["misunderstood"] >= 2:
            await self.handoff(turn, events, "not_understood")
        elif ask_again:
            await self.agent.say(turn, events, ask_again)
        return True

    async def handoff(self, turn: TurnRun, events: asyncio.Queue, reason: str,
                      text: str = HANDOFF_TEXT) -> None:
        state = turn.history.state
        users = [t.user for t in turn.history.turns] + [turn.request.text]
        summary = handoff_summary(state, users, reason)
        state.pop("pending", None)  # never executed after a handoff
        state.update(dialog_state=DialogState.HANDOFF.value, misunderstood=0)
        HANDOFFS.labels(reason).inc()
        turn.record["handoff"] = {"reason": reason, "summary": summary}
        await self.agent.say(turn, events, text)
        await events.put(brain_pb2.RespondEvent(turn_id=turn.request.turn_id, handoff=brain_pb2.Handoff(
            reason=reason, summary=summary)))
