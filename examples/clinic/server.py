"""The clinic's appointment line as an MCP server over streamable HTTP (``python -m examples.clinic.server``).

Tools (with MCP annotations, which the brain maps onto its tool kinds):
``list_openings`` (read-only), ``book_appointment`` (additive, idempotent with
an ``idempotency_key``), ``find_appointments`` (read-only),
``cancel_appointment`` (destructive, idempotent). A business refusal is a tool
error whose text starts with ``refused:``; bad input is a tool error starting
with ``invalid:``, or with ``invalid_patient_name:`` for a name without a surname (the
caller is asked for it again). Phone numbers, dates of birth and reasons for the visit are
stored but never returned.

The MCP endpoint is ``/mcp``; ``/healthz`` answers 200. With ``CLINIC_TOKEN``
set, every other request needs ``Authorization: Bearer <token>`` and gets 401
without it: the write tools would otherwise book for anyone who can reach
the port, past the brain's confirmation.
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

from examples.clinic.store import InvalidRequest, NotAFullName, OpeningTaken, Store
from voicebot.common import mcp_http
from voicebot.common.logs import setup_logging
from voicebot.common.mcp_http import BOOK, CANCEL, READ_ONLY, pinned_clock, tool_error, tool_ok

log = logging.getLogger("clinic")


class ClinicSettings(BaseSettings):
    """CLINIC_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="CLINIC_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8091  # 0 picks a free port; the READY line says which
    db: str = "~/.cache/voicebot/clinic.sqlite3"  # or :memory:
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
    except OpeningTaken as exc:
        return tool_error(f"refused: opening_taken: opening {exc} has just been booked; offer other openings")
    except NotAFullName:  # the field, by the convention: the brain asks for it again
        return tool_error("invalid_patient_name: the patient's first and last name are needed")


Day = Annotated[str, Field(description="YYYY-MM-DD, 'today', 'tomorrow' or a weekday name such as 'tuesday' "
                                       "(the nearest one, today included)")]
Clinician = Annotated[str, Field(description="'Dr. Patel' or 'Dr. Kim'; empty for any clinician")]
After = Annotated[str | None, Field(description="HH:MM, 24-hour clock, e.g. 14:30: openings from then "
                                                "first; omit for the earliest")]
Name = Annotated[str, Field(description="the patient's full name")]


def build_server(store: Store) -> MCPServer:
    server = MCPServer("clinic", instructions="Appointments at one medical clinic with Dr. Patel and "
                       "Dr. Kim: Monday to Friday, 09:00-12:00 and 14:00-17:00, 20 minutes each.")
    _add_tools(server, store)

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return server


def _add_tools(server: MCPServer, store: Store) -> None:
    @server.tool(annotations=READ_ONLY)
    async def list_openings(date: Day, clinician: Clinician = "", after: After = None) -> CallToolResult:
        """Free 20-minute appointment openings on a day: up to 4, the nearest to 'after' first."""
        return await _run(lambda: store.list_openings(date, clinician, after))

    @server.tool(annotations=BOOK)
    async def book_appointment(
        opening_id: Annotated[str, Field(description="an opening_id from list_openings")],
        patient_name: Name,
        reason: Annotated[str, Field(description="the reason for the visit, in the caller's few words")],
        date_of_birth: Annotated[str, Field(description="YYYY-MM-DD, when the caller gives it")] = "",
        phone: Annotated[str, Field(description="a phone number to reach the patient")] = "",
        idempotency_key: Annotated[str, Field(description="the same key books at most once")] = "",
    ) -> CallToolResult:
        """Book an opening for a patient. Refused with 'refused: opening_taken' when it is taken."""
        return await _run(lambda: store.book(opening_id, patient_name, reason, date_of_birth, phone,
                                             idempotency_key))

    @server.tool(annotations=READ_ONLY)
    async def find_appointments(patient_name: Name) -> CallToolResult:
        """A patient's upcoming appointments (cancelled ones included, with their status)."""
        return await _run(lambda: store.find(patient_name))

    @server.tool(annotations=CANCEL)
    async def cancel_appointment(
        appointment_id: Annotated[str, Field(description="the appointment to cancel")],
    ) -> CallToolResult:
        """Cancel an appointment (cancelling it again changes nothing)."""
        return await _run(lambda: store.cancel(appointment_id))


async def serve(settings: ClinicSettings) -> None:
    store = Store(settings.db, pinned_clock(settings.today))
    app = build_server(store).streamable_http_app(host=settings.host)
    try:
        await mcp_http.serve("clinic", app, settings.host, settings.port, settings.token.get_secret_value(),
                             db=settings.db)
    finally:
        store.close()


def main() -> None:
    settings = ClinicSettings()
    setup_logging("clinic", settings.log_level, settings.log_json)
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
