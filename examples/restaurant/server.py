"""The reservation service as an MCP server over streamable HTTP (``python -m examples.restaurant.server``).

Tools (with MCP annotations, which the brain maps onto its tool kinds):
``find_slots`` (read-only), ``create_reservation`` (additive, idempotent with
an ``idempotency_key``), ``get_reservation`` (read-only), ``cancel_reservation``
(destructive, idempotent). A business refusal is a tool error whose text starts
with ``refused:`` (a party larger than the largest table: ``refused: <a sentence the
caller hears>``); bad input is a tool error starting with ``invalid:``. Phone
numbers are stored but never returned.

``admin_set_failures`` (served only with ``RESERVATIONS_ADMIN=true``: tests
and demos) replaces the failure plan at run time; clients must never show
``admin_*`` tools to a model. The MCP endpoint is ``/mcp``; ``/healthz``
answers 200. With ``RESERVATIONS_TOKEN`` set, every other request needs
``Authorization: Bearer <token>`` and gets 401 without it (the write tools
would otherwise book for anyone who can reach the port, past the brain's
confirmation).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import date
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse

from examples.restaurant.failures import FailurePlan, parse_plan
from examples.restaurant.store import InvalidRequest, PartyTooLarge, SlotTaken, Store
from voicebot.common import mcp_http
from voicebot.common.logs import setup_logging
from voicebot.common.mcp_http import BOOK, CANCEL, READ_ONLY, pinned_clock, tool_error, tool_ok

log = logging.getLogger("reservations")


class ReservationsSettings(BaseSettings):
    """RESERVATIONS_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="RESERVATIONS_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8090  # 0 picks a free port; the READY line says which
    db: str = "~/.cache/voicebot/reservations.sqlite3"  # or :memory:
    failures: str = ""  # a failure plan (JSON), see examples/restaurant/failures.py
    admin: bool = False  # serve admin_set_failures (tests, demos only)
    # Required as "Authorization: Bearer <token>" on every request but /healthz; empty = open.
    token: SecretStr = SecretStr("")
    today: date | None = None  # pin the calendar (tests, demos); default: the real date
    log_level: str = "INFO"
    log_json: bool = True


ADMIN = ToolAnnotations(title="admin: set the failure plan (never for a model)", read_only_hint=False,
                        destructive_hint=True, idempotent_hint=True, open_world_hint=False)


class Reservations:
    """The tools' bodies: failure injection first, then the store in a thread."""

    def __init__(self, store: Store, plan: FailurePlan) -> None:
        self.store = store
        self.plan = plan

    async def call(self, tool: str, work: Callable[[], dict[str, Any]]) -> CallToolResult:
        injected = await self._inject(tool)
        if injected is not None:
            return injected
        try:
            return tool_ok(await asyncio.to_thread(work))
        except InvalidRequest as exc:
            return tool_error(f"invalid: {exc}")
        except SlotTaken as exc:
            return tool_error(f"refused: slot_taken: no table left in slot {exc}; offer other times")
        except PartyTooLarge as exc:  # a sentence for the caller (docs/add-a-business.md, the convention)
            return tool_error(f"refused: {exc}")

    async def _inject(self, tool: str) -> CallToolResult | None:
        failure = self.plan.next(tool)
        if failure is None or failure.kind == "ok":
            return None
        log.info("injected failure", extra={"tool": tool, "kind": failure.kind})
        if failure.kind in ("timeout", "slow"):
            await asyncio.sleep(failure.delay_s)
        if failure.kind == "timeout":
            return tool_error("error: timed out (simulated)")
        if failure.kind == "slot_taken":
            return tool_error("refused: slot_taken (simulated)")
        if failure.kind == "error":
            return tool_error(f"error: {failure.message}")
        return None  # slow: now do the work


Day = Annotated[str, Field(description="YYYY-MM-DD, 'today', 'tomorrow' or a weekday name such as 'tuesday' "
                                       "(the nearest one, today included)")]
Time = Annotated[str | None, Field(description="HH:MM, 24-hour clock, e.g. 19:30; omit for any time")]
People = Annotated[int, Field(description="how many people, including the caller")]


def build_server(service: Reservations, admin: bool = True) -> MCPServer:
    server = MCPServer("reservations", instructions="Table reservations for one restaurant, open "
                       "18:00 to 22:00 every day; bookings every half hour from 18:00 to 21:30.")
    _add_booking_tools(server, service)
    if admin:
        _add_admin_tools(server, service)

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return server


def _add_booking_tools(server: MCPServer, service: Reservations) -> None:
    @server.tool(annotations=READ_ONLY)
    async def find_slots(day: Day, people: People, time: Time = None) -> CallToolResult:
        """Free tables for a party on a day: up to 4 slots, the nearest to the wished time first."""
        return await service.call("find_slots", lambda: service.store.find_slots(day, people, time))

    @server.tool(annotations=BOOK)
    async def create_reservation(
        slot_id: Annotated[str, Field(description="a slot_id from find_slots")],
        name: Annotated[str, Field(description="the name the table is booked under")],
        people: People,
        phone: Annotated[str, Field(description="a phone number to reach the caller")] = "",
        idempotency_key: Annotated[str, Field(description="the same key books at most once")] = "",
    ) -> CallToolResult:
        """Book one table in a slot. Refused with 'refused: slot_taken' when the slot is full."""
        return await service.call("create_reservation", lambda: service.store.create(
            slot_id, name, people, phone, idempotency_key))

    @server.tool(annotations=READ_ONLY)
    async def get_reservation(
        reservation_id: Annotated[str, Field(description="the id create_reservation returned")] = "",
        name: Annotated[str, Field(description="the name the booking is under")] = "",
    ) -> CallToolResult:
        """Look up reservations by id or by name."""
        return await service.call("get_reservation", lambda: service.store.get(reservation_id, name))

    @server.tool(annotations=CANCEL)
    async def cancel_reservation(
        reservation_id: Annotated[str, Field(description="the reservation to cancel")],
    ) -> CallToolResult:
        """Cancel a reservation (cancelling it again changes nothing)."""
        return await service.call("cancel_reservation", lambda: service.store.cancel(reservation_id))


def _add_admin_tools(server: MCPServer, service: Reservations) -> None:
    @server.tool(annotations=ADMIN)
    async def admin_set_failures(
        plan_json: Annotated[str, Field(description='{"tool": [{"kind": "timeout", "delay_s": 1}, ...]}')],
    ) -> CallToolResult:
        """Replace the failure plan (tests and demos only). '{}' clears it."""
        try:
            service.plan.replace(parse_plan(plan_json))
        except ValueError as exc:
            return tool_error(f"invalid: {exc}")
        return tool_ok({"pending": service.plan.pending()})


async def serve(settings: ReservationsSettings) -> None:
    store = Store(settings.db, pinned_clock(settings.today))
    service = Reservations(store, FailurePlan(parse_plan(settings.failures)))
    app = build_server(service, settings.admin).streamable_http_app(host=settings.host)
    try:
        await mcp_http.serve("reservations", app, settings.host, settings.port,
                             settings.token.get_secret_value(), admin_tools=settings.admin, db=settings.db)
    finally:
        store.close()


def main() -> None:
    settings = ReservationsSettings()
    setup_logging("reservations", settings.log_level, settings.log_json)
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
