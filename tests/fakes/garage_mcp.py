"""A garage the brain was never written for: services by number plate, in a thread.

``book_service`` (a write) takes a plate with a schema ``pattern`` (a code, read and
spoken character by character), a service, a day and the customer's name; an unknown
plate is a field error in the convention's shape (``invalid_plate: ...``).
``book_wash`` is a second task with the same plate and name, for "the same car".
Everything runs on the helpdesk fake's MCP plumbing (recorded calls, ``plan`` failures).
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from tests.fakes.helpdesk_mcp import Helpdesk, _error, _ok

PLATE = "^[A-Z]{2}[0-9]{4}$"
Plate = Annotated[str, Field(pattern=PLATE, description="the car's number plate")]
Service = Annotated[str, Field(pattern="^(oil change|full service)$")]
PROFILE = """
name: Rita
purpose: booking services at Rapid Garage
sentences:
  confirm: "To confirm: {action}. Shall I go ahead?"
mcp_servers:
  - name: garage
    url: ${GARAGE_URL}
    tools:
      book_service:
        errors:
          unknown car: {field: plate, say: "Sorry, I can't find that plate. Could you spell it?"}
tasks:
  book_service:
    title: book a service
    examples: ["I'd like to book a service for my car.", "Can I get an oil change?"]
    fields:
      plate: {ask: "What is the car's number plate?"}
      service: {ask: "Which service: an oil change or a full service?"}
      day: {ask: "Which day?"}
      customer_name: {ask: "What name shall I put it under?", type: name}
    read_back: a {service} for {plate} on {day}, for {customer_name}
    done: Your {service} for {plate} is booked.
  book_wash:
    title: book a car wash
    examples: ["I'd like a car wash too.", "Can you wash my car?"]
    carry: [customer_name]
    fields:
      plate: {ask: "What is the car's number plate?"}
      day: {ask: "Which day?"}
    read_back: a car wash for {plate} on {day}, for {customer_name}
    done: The wash for {plate} is booked.
"""


class Garage(Helpdesk):
    def reset(self) -> None:
        super().reset()
        self.known_plates = {"MN7310", "AB1234"}

    def writes(self) -> list[tuple[str, dict[str, Any]]]:
        return [c for c in self.calls if c[0].startswith("book_")]

    def server(self) -> MCPServer:
        mcp = MCPServer("garage")

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=False))
        async def book_service(plate: Plate, service: Service, day: str,
                               customer_name: str) -> CallToolResult:
            """Book a service."""
            args = {"plate": plate, "service": service, "day": day, "customer_name": customer_name}
            if failed := await self._step("book_service", args):
                return failed
            if plate not in self.known_plates:
                return _error("invalid_plate: unknown plate, ask the caller to spell it")
            return _ok({"booking_id": f"svc-{len(self.calls)}", **args})

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=False))
        async def book_wash(plate: Plate, day: str, customer_name: str) -> CallToolResult:
            """Book a car wash."""
            args = {"plate": plate, "day": day, "customer_name": customer_name}
            if failed := await self._step("book_wash", args):
                return failed
            return _ok({"booking_id": f"wash-{len(self.calls)}", **args})

        return mcp
