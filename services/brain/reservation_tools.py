"""The reservation demo's tools, as the model sees them, over a backend's tools.

The backend (an MCP server in production, fakes in tests) offers
``find_slots``, ``get_reservation`` (read-only) and ``create_reservation``,
``cancel_reservation`` (irreversible). The model never gets the irreversible
ones: it gets ``propose_reservation`` / ``propose_cancellation``, which only
record a pending action in the session; code runs the write after the person
confirms. Slots and reservations reach the model as session references
(S1, R1), never as internal ids, and phone numbers never reach it at all.
"""

from __future__ import annotations

import contextlib
import datetime
import uuid
from typing import Any

from services.brain.references import References
from services.brain.tools import FunctionTool, Tool, ToolContext, ToolKind, ToolRegistry, ToolSpec

BACKEND_TOOLS = ("find_slots", "get_reservation", "create_reservation", "cancel_reservation")
_HIDDEN_FIELDS = {"phone", "slot_id", "reservation_id", "idempotency_key"}


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in _HIDDEN_FIELDS}


def _slot_label(slot: dict[str, Any]) -> str:
    """How a slot is read to the caller: "Friday, December 4th at 7 pm", not ISO dates."""
    day, time = str(slot.get("day", "")), str(slot.get("time", ""))
    with contextlib.suppress(ValueError):
        date = datetime.date.fromisoformat(day)
        day = f"{date.strftime('%B')} {date.day}{_ordinal_suffix(date.day)}"
    with contextlib.suppress(ValueError):
        clock = datetime.time.fromisoformat(time)
        hour = clock.hour % 12 or 12
        time = f"{hour}{f':{clock.minute:02d}' if clock.minute else ''} {'pm' if clock.hour >= 12 else 'am'}"
    weekday = slot.get("weekday", "")
    return f"{weekday + ', ' if weekday else ''}{day} at {time}".strip()


def _ordinal_suffix(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


class ReservationTools:
    def __init__(self, backend: dict[str, Tool]) -> None:
        missing = [name for name in BACKEND_TOOLS if name not in backend]
        if missing:
            raise ValueError(f"reservation backend lacks tools: {missing}")
        self.backend = backend

    async def find_slots(self, ctx: ToolContext, day: str, people: int, time: str | None = None):
        args = {"day": day, "people": people} | ({"time": time} if time else {})
        found = await self.backend["find_slots"].run(args, ctx)
        refs = References(ctx.state)
        slots = [{"slot": refs.issue("slot", s["slot_id"], _slot_label(s)), **_public(s)}
                 for s in found.get("slots", [])]
        return {"slots": slots} if slots else {"slots": [], "note": "nothing free; suggest another time"}

    async def find_reservation(self, ctx: ToolContext, name: str = "", reservation: str = ""):
        reservation_id = References(ctx.state).resolve(reservation, "reservation") if reservation else ""
        if reservation and reservation_id is None:
            raise LookupError(f"unknown reference {reservation!r} in this conversation")
        found = await self.backend["get_reservation"].run(
            {"reservation_id": reservation_id or "", "name": name}, ctx)
        refs = References(ctx.state)
        # Only bookings this conversation already knows (made or referenced in it): a name
        # alone must not reveal other people's reservations.
        mine = [r for r in found.get("reservations", []) if refs.known("reservation", r["reservation_id"])]
        return {"reservations": [
            {"reservation": refs.issue("reservation", r["reservation_id"], _slot_label(r)), **_public(r)}
            for r in mine]}

    async def propose_reservation(self, ctx: ToolContext, slot: str, name: str, people: int):
        slot_id = References(ctx.state).resolve(slot, "slot")
        if slot_id is None:
            raise LookupError(f"unknown slot reference {slot!r}; call find_slots first")
        label = References(ctx.state).labels()[slot.strip().upper()]
        summary = f"a table for {people} on {label}, under the name {name}"
        self._propose(ctx, "create_reservation", {"slot_id": slot_id, "name": name, "people": people},
                      summary, {"slot": label, "name": name, "people": people})
        return {"proposed": summary, "next": "Read this back to the caller and ask them to confirm."}

    async def propose_cancellation(self, ctx: ToolContext, reservation: str):
        reservation_id = References(ctx.state).resolve(reservation, "reservation")
        if reservation_id is None:
            raise LookupError(f"unknown reservation reference {reservation!r}; call find_reservation first")
        label = References(ctx.state).labels()[reservation.strip().upper()]
        summary = f"cancel reservation {reservation.strip().upper()} on {label}"
        self._propose(ctx, "cancel_reservation", {"reservation_id": reservation_id}, summary, {})
        return {"proposed": summary, "next": "Read this back to the caller and ask them to confirm."}

    async def transfer_to_human(self, ctx: ToolContext, reason: str = "caller request"):
        ctx.state["handoff_requested"] = reason or "caller request"
        return {"transferring": True}

    @staticmethod
    def _propose(ctx: ToolContext, tool: str, args: dict[str, Any], summary: str,
                 collected: dict[str, Any]) -> None:
        ctx.state["pending"] = {"id": "p_" + uuid.uuid4().hex[:10], "tool": tool, "args": args,
                                "summary": summary}
        ctx.state.setdefault("collected", {}).update(collected)
        ctx.state["dialog_state"] = "confirm"


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def reservation_registry(backend: dict[str, Tool]) -> ToolRegistry:
    tools = ReservationTools(backend)
    text, count = {"type": "string"}, {"type": "integer", "minimum": 1, "maximum": 20}
    model_tools = [
        (ToolSpec("find_slots", "Find free tables. day: a weekday name or YYYY-MM-DD; time: HH:MM.",
                  _obj({"day": text, "people": count, "time": text}, ["day", "people"]),
                  ToolKind.READ_ONLY, timeout_s=3.0), tools.find_slots),
        (ToolSpec("find_reservation", "Look up the caller's reservation by name or reference (R1).",
                  _obj({"name": text, "reservation": text}, []), ToolKind.READ_ONLY), tools.find_reservation),
        (ToolSpec("propose_reservation", "Propose booking a slot found by find_slots (S1, S2, ...). "
                  "Nothing is booked until the caller confirms.",
                  _obj({"slot": text, "name": text, "people": count}, ["slot", "name", "people"]),
                  ToolKind.PROPOSAL), tools.propose_reservation),
        (ToolSpec("propose_cancellation", "Propose cancelling a reservation (R1, ...). "
                  "Nothing is cancelled until the caller confirms.",
                  _obj({"reservation": text}, ["reservation"]), ToolKind.PROPOSAL),
         tools.propose_cancellation),
        (ToolSpec("transfer_to_human", "Hand the call to a human colleague.",
                  _obj({"reason": text}, []), ToolKind.PROPOSAL), tools.transfer_to_human),
    ]
    registry = ToolRegistry([FunctionTool(spec, fn) for spec, fn in model_tools])
    # The writes themselves: registered so code can run them after a confirmation,
    # never offered to the model (ToolRegistry.definitions leaves irreversible tools out).
    for name in ("create_reservation", "cancel_reservation"):
        registry.register(backend[name])
    return registry
