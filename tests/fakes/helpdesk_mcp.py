"""A second business for the brain's scenario tests: an IT helpdesk MCP server, in a thread.

Different tool names and shapes from the restaurant: ``search_articles`` and
``my_tickets`` (read-only), ``open_ticket`` (a write with an idempotency key,
annotated) and ``close_ticket`` (no annotations at all: a write by default).
Every call is recorded; ``plan`` injects failures per tool ("timeout": the
answer comes too late, "refuse": a business refusal, "error:<text>": a tool error with
that text). It speaks real MCP over
streamable HTTP on a random port, so the brain's real MCP client is exercised.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict
from typing import Annotated, Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from voicebot.devstack import free_port

PROFILE = """
name: Max
purpose: helping employees with IT problems at the Acme helpdesk
sentences:
  blocked: Sorry, I can only help with IT problems here.
  confirm: "Let me check: {action}. Shall I go ahead?"
  tool_unavailable: Sorry, I can't reach the ticket system right now.
guard:
  allow: [laptops, printers, passwords, accounts, tickets]
mcp_servers:
  - name: helpdesk
    url: ${HELPDESK_URL}
    auth_token_env: HELPDESK_TOKEN
    exclude: [forbidden_tool]
    tools:
      open_ticket:
        read_back: open a {priority} priority ticket about {summary}
        done: Your ticket {ticket_id} is open; someone will contact you today.
        # Well under the plan's 3 s "timeout" and well over a write on a loaded 2-core machine:
        # a keyed write that took longer is sent again, and the tests count the calls.
        timeout_s: 1.5
      close_ticket:
        title: Close a ticket
        timeout_s: 1.5
      search_articles:
        timeout_s: 0.5
references:
  ticket_id: {prefix: T, label: "your ticket about {summary}"}
hidden_fields: [reporter_phone]
"""


def _ok(data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data))], structured_content=data)


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


class Helpdesk:
    def __init__(self, token: str = "") -> None:
        self.token = token
        self.port = 0
        self.reset()
        self._server: uvicorn.Server | None = None

    def reset(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.plan: dict[str, list[str]] = defaultdict(list)
        self.tickets: dict[str, dict[str, Any]] = {"tkt-0001": {
            "ticket_id": "tkt-0001", "summary": "a broken monitor", "status": "open",
            "reporter_phone": "+1 555 0199"}}
        self.by_key: dict[str, str] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def writes(self) -> list[tuple[str, dict[str, Any]]]:
        return [c for c in self.calls if c[0] in ("open_ticket", "close_ticket")]

    async def _step(self, name: str, args: dict[str, Any]) -> CallToolResult | None:
        self.calls.append((name, args))
        action = self.plan[name].pop(0) if self.plan[name] else "ok"
        if action == "timeout":
            await asyncio.sleep(3.0)
        if action == "refuse":
            return _error("refused: the queue is closed for the weekend")
        if action.startswith("error:"):  # the tool's own error text, as the server writes it
            return _error(action.removeprefix("error:"))
        return None

    def server(self) -> MCPServer:
        mcp = MCPServer("helpdesk")

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def search_articles(query: Annotated[str, Field(description="what to look for")],
                                  ) -> CallToolResult:
            """Search the knowledge base."""
            if failed := await self._step("search_articles", {"query": query}):
                return failed
            return _ok({"articles": [{"title": "Restart the print spooler", "minutes": 5}]})

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def my_tickets() -> CallToolResult:
            """The caller's tickets and their status."""
            if failed := await self._step("my_tickets", {}):
                return failed
            return _ok({"tickets": list(self.tickets.values())})

        @mcp.tool(title="Open a support ticket", annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True))
        async def open_ticket(summary: str, priority: Annotated[str, Field(pattern="^(low|normal|high)$")],
                              idempotency_key: str = "") -> CallToolResult:
            """Open a support ticket."""
            args = {"summary": summary, "priority": priority, "idempotency_key": idempotency_key}
            if failed := await self._step("open_ticket", args):
                return failed
            if idempotency_key in self.by_key:
                return _ok(self.tickets[self.by_key[idempotency_key]])
            ticket_id = f"tkt-{len(self.tickets) + 1:04d}"
            self.tickets[ticket_id] = {"ticket_id": ticket_id, "summary": summary, "priority": priority,
                                       "status": "open", "reporter_phone": "+1 555 0100"}
            if idempotency_key:
                self.by_key[idempotency_key] = ticket_id
            return _ok(self.tickets[ticket_id])

        @mcp.tool()
        async def close_ticket(ticket_id: str) -> CallToolResult:
            """Close a ticket that is solved."""
            if failed := await self._step("close_ticket", {"ticket_id": ticket_id}):
                return failed
            self.tickets[ticket_id]["status"] = "closed"
            return _ok({"ticket_id": ticket_id, "status": "closed"})

        @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def forbidden_tool() -> CallToolResult:
            """Excluded by the profile: never offered."""
            return _ok({})

        return mcp

    def app(self) -> Any:
        inner = self.server().streamable_http_app(host="127.0.0.1")
        token = self.token

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http" and token:
                headers = dict(scope.get("headers") or [])
                if headers.get(b"authorization") != f"Bearer {token}".encode():
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                    await send({"type": "http.response.body", "body": b"unauthorized"})
                    return
            await inner(scope, receive, send)

        return app

    def start(self, port: int = 0) -> Helpdesk:
        self.port = port or free_port()
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_config=None,
                                access_log=False, lifespan="on",
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("helpdesk MCP server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
