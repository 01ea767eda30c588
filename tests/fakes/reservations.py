"""An in-memory reservation backend with a failure plan, as the four backend tools.

Same names, kinds and argument shapes as the MCP reservation server's tools, so
the brain's policy is tested without a network; every call is recorded.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from services.brain.tools import FunctionTool, Tool, ToolContext, ToolKind, ToolRefused, ToolSpec

SLOTS = {
    "slot-tue-1900": {"day": "2026-12-01", "weekday": "Tuesday", "time": "19:00", "seats": 2},
    "slot-tue-2030": {"day": "2026-12-01", "weekday": "Tuesday", "time": "20:30", "seats": 2},
    "slot-tue-1430": {"day": "2026-12-01", "weekday": "Tuesday", "time": "14:30", "seats": 2},
}


class FakeReservations:
    def __init__(self, timeout_s: float = 0.3) -> None:
        self.timeout_s = timeout_s
        self.plan: dict[str, list[str]] = defaultdict(list)  # tool -> ["timeout" | "slot_taken" | "ok"]
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.reservations: dict[str, dict[str, Any]] = {}
        self.by_key: dict[str, str] = {}

    async def _step(self, name: str, args: dict[str, Any]) -> str:
        """Apply the failure plan: "timeout" never answers in time, "slot_taken" refuses,
        "lost_reply" does the work but the answer never arrives in time."""
        self.calls.append((name, args))
        action = self.plan[name].pop(0) if self.plan[name] else "ok"
        if action == "timeout":
            await asyncio.sleep(self.timeout_s * 20)
        if action == "slot_taken":
            raise ToolRefused("refused: slot_taken")
        return action

    async def find_slots(self, ctx: ToolContext, day: str, people: int, time: str | None = None):
        await self._step("find_slots", {"day": day, "people": people, "time": time})
        wanted = sorted(SLOTS.items(), key=lambda item: item[1]["time"] != (time or "19:00"))
        return {"slots": [{"slot_id": sid, **slot} for sid, slot in wanted]}

    async def create_reservation(self, ctx: ToolContext, slot_id: str, name: str, people: int,
                                 phone: str = ""):
        key = ctx.idempotency_key or ""
        action = await self._step("create_reservation", {"slot_id": slot_id, "name": name, "people": people,
                                                         "idempotency_key": key})
        if not (key and key in self.by_key):
            reservation_id = f"res-{len(self.reservations) + 1:04d}"
            self.reservations[reservation_id] = {
                "reservation_id": reservation_id, "name": name, "people": people, "phone": "+1 555 0100",
                "status": "confirmed", **SLOTS[slot_id]}
            if key:
                self.by_key[key] = reservation_id
        if action == "lost_reply":
            await asyncio.sleep(self.timeout_s * 20)
        reservation_id = self.by_key.get(key) or reservation_id
        return {k: v for k, v in self.reservations[reservation_id].items() if k != "phone"}

    async def get_reservation(self, ctx: ToolContext, reservation_id: str = "", name: str = ""):
        await self._step("get_reservation", {"reservation_id": reservation_id, "name": name})
        found = [r for r in self.reservations.values()
                 if r["reservation_id"] == reservation_id or (name and r["name"].lower() == name.lower())]
        return {"reservations": [{k: v for k, v in r.items() if k != "phone"} for r in found]}

    async def cancel_reservation(self, ctx: ToolContext, reservation_id: str):
        await self._step("cancel_reservation", {"reservation_id": reservation_id})
        self.reservations[reservation_id]["status"] = "cancelled"
        return {"reservation_id": reservation_id, "status": "cancelled"}

    def writes(self) -> list[tuple[str, dict[str, Any]]]:
        return [c for c in self.calls if c[0] in ("create_reservation", "cancel_reservation")]

    def tools(self) -> dict[str, Tool]:
        obj = {"type": "object"}
        specs = [
            ToolSpec("find_slots", "", obj, ToolKind.READ_ONLY, self.timeout_s),
            ToolSpec("get_reservation", "", obj, ToolKind.READ_ONLY, self.timeout_s),
            ToolSpec("create_reservation", "", obj, ToolKind.IRREVERSIBLE, self.timeout_s,
                     accepts_idempotency_key=True),
            ToolSpec("cancel_reservation", "", obj, ToolKind.IRREVERSIBLE, self.timeout_s),
        ]
        return {s.name: FunctionTool(s, getattr(self, s.name)) for s in specs}
