"""The salon's appointment line as an MCP server over streamable HTTP (``python -m examples.salon.server``).

Studio Lumen, the third business: open Tuesday to Saturday, 10:00-18:00, with
two stylists (Mia and Leo). Tools (with MCP annotations, which the brain maps
onto its tool kinds): ``free_times`` (read-only), ``book_visit`` (additive,
idempotent with an ``idempotency_key``), ``find_visits`` (read-only),
``cancel_visit`` (destructive, idempotent). Their names and shapes differ from
the other businesses' on purpose: the brain must take everything from the
listing. ``service`` and ``stylist`` carry an ``enum`` in their schemas, so a
generic client can read the allowed values; the server still accepts simple
synonyms ("cut", "color", "beard"), case-insensitively.

A business refusal is a tool error whose text starts with ``refused:``; bad
input is a tool error starting with ``invalid:``, or with ``customer_name:`` for a
name without a surname (the caller is asked for it again). Phone numbers are stored
but never returned. The MCP endpoint is ``/mcp``; ``/healthz`` answers 200.
With ``SALON_TOKEN`` set, every other request needs
``Authorization: Bearer <token>`` and gets 401 without it: the write tools
would otherwise book for anyone who can reach the port, past the brain's
confirmation.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse

from examples.salon.store import SERVICES, STYLISTS, InvalidRequest, NotAFullName, Store, TimeTaken
from voicebot.common import mcp_http
from voicebot.common.logs import setup_logging
from voicebot.common.mcp_http import BOOK, CANCEL, READ_ONLY, pinned_clock, tool_error, tool_ok

log = logging.getLogger("salon")


class SalonSettings(BaseSettings):
    """SALON_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="SALON_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8092  # 0 picks a free port; the READY line says which
    db: str = "~/.cache/voicebot/salon.sqlite3"  # or :memory:
    # Required as "Authorization: Bearer <token>" on every request but /healthz; empty = open.
    token: SecretStr = SecretStr("")
    today: dt.date | None = None  # pin the calendar (tests, demos); default: the real date
    log_level: str = "INFO"
    log_json: bool = True




async def _run(work: Callable[[], dict[str, Any]]) -> CallToolResult:
    """A store call in a thread (sqlite3 blocks), its exceptions as the tool errors the brain reads."""
    try:
        return tool_ok(await asyncio.to_thread(work))
    except InvalidRequest as exc:
        return tool_error(f"invalid: {exc}")
    except TimeTaken as exc:
        start = exc.start
        return tool_error(f"refused: time_taken: {start.time} with {STYLISTS[start.stylist]} on "
                      f"{start.day:%A} {start.day.isoformat()} is no longer free; offer other times")
    except NotAFullName:  # the field, by the convention: the brain asks for it again
        return tool_error("customer_name: the customer's first and last name are needed")


# The enums are schema only (json_schema_extra), not Literal types: a Literal would make the
# server reject "cut" or "mia" before the store could match them.
Day = Annotated[str, Field(description="YYYY-MM-DD, 'today', 'tomorrow' or a weekday name such as 'friday' "
                                       "(the nearest one, today included)")]
Service = Annotated[str, Field(description="the service: a haircut (30 minutes), a colour (90 minutes) "
                                           "or a beard trim (15 minutes)",
                               json_schema_extra={"enum": list(SERVICES)})]
Stylist = Annotated[str, Field(description="'Mia' or 'Leo'; empty for any stylist",
                               json_schema_extra={"enum": ["", *STYLISTS.values()]})]
FromTime = Annotated[str, Field(description="HH:MM, 24-hour clock, e.g. 14:30: times from then first, "
                                            "nearest first; empty for the earliest")]
Name = Annotated[str, Field(description="the customer's name")]


def build_server(store: Store) -> MCPServer:
    server = MCPServer("salon", instructions="Visits at Studio Lumen, a hair salon with two stylists, Mia "
                       "and Leo: Tuesday to Saturday, 10:00-18:00. A haircut takes 30 minutes, a colour "
                       "90 minutes and a beard trim 15 minutes.")
    _add_tools(server, store)

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return server


def _add_tools(server: MCPServer, store: Store) -> None:
    @server.tool(annotations=READ_ONLY)
    async def free_times(day: Day, service: Service, stylist: Stylist = "",
                         from_time: FromTime = "") -> CallToolResult:
        """Free start times for a service on a day: up to 4, the nearest to 'from_time' first."""
        return await _run(lambda: store.free_times(day, service, stylist, from_time))

    @server.tool(annotations=BOOK)
    async def book_visit(
        time_id: Annotated[str, Field(description="a time_id from free_times (it names the service)")],
        customer_name: Name,
        idempotency_key: Annotated[str, Field(description="the same key books at most once")] = "",
        phone: Annotated[str, Field(description="a phone number to reach the customer")] = "",
    ) -> CallToolResult:
        """Book a visit at a free time. Refused with 'refused: time_taken' when it is no longer free."""
        return await _run(lambda: store.book(time_id, customer_name, idempotency_key, phone))

    @server.tool(annotations=READ_ONLY)
    async def find_visits(customer_name: Name) -> CallToolResult:
        """A customer's upcoming visits (cancelled ones included, with their status)."""
        return await _run(lambda: store.find(customer_name))

    @server.tool(annotations=CANCEL)
    async def cancel_visit(
        visit_id: Annotated[str, Field(description="the visit to cancel, e.g. V-1A2B3C4D")],
    ) -> CallToolResult:
        """Cancel a visit (cancelling it again changes nothing)."""
        return await _run(lambda: store.cancel(visit_id))


async def serve(settings: SalonSettings) -> None:
    store = Store(settings.db, pinned_clock(settings.today))
    app = build_server(store).streamable_http_app(host=settings.host)
    try:
        await mcp_http.serve("salon", app, settings.host, settings.port, settings.token.get_secret_value(),
                             db=settings.db)
    finally:
        store.close()


def main() -> None:
    settings = SalonSettings()
    setup_logging("salon", settings.log_level, settings.log_json)
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
