"""What every business's MCP server shares: bearer-token access, a pinned calendar, serving.

A business brings its own MCP server (``examples/restaurant``, ``examples/clinic``);
these pieces keep each one a page of its own tools. ``serve`` runs the server's
streamable-HTTP app under uvicorn, behind ``BearerAuth`` when a token is set, and
prints one ``READY <name> http=PORT`` line (the launcher waits for it; port 0 picks a
free port).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import json
import logging
from collections.abc import Callable
from typing import Any

import uvicorn
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("mcp.http")

# The annotations the brain maps onto its tool kinds: a read-only tool runs freely; any other is a
# write that runs only after the caller's yes to code's read-back.
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
BOOK = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)
CANCEL = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                         open_world_hint=False)


def tool_ok(data: dict[str, Any]) -> CallToolResult:
    """A tool's result, as text and as structured content."""
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data))], structured_content=data)


def tool_error(text: str) -> CallToolResult:
    """A tool error the brain reads: ``refused: ...`` (a business no) or ``invalid: ...`` (bad input)."""
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


class BearerAuth:
    """ASGI middleware: 401 for any HTTP request without the bearer token, except /healthz."""

    OPEN_PATHS = frozenset({"/healthz"})

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.OPEN_PATHS or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        response = JSONResponse({"error": "unauthorized", "message": "a valid bearer token is required"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        return hmac.compare_digest(given, self._expected)  # constant time: no guessing by timing


def pinned_clock(today: dt.date | None) -> Callable[[], dt.datetime]:
    """The real clock, or a calendar pinned to ``today`` at midnight (tests, demos), so every
    time of that day is still bookable."""
    if today is None:
        return dt.datetime.now
    return lambda: dt.datetime.combine(today, dt.time.min)


async def serve(name: str, app: ASGIApp, host: str, port: int, token: str = "",
                graceful_s: float = 3.0, **log_extra: object) -> None:
    """Serve until stopped. ``graceful_s`` bounds a SIGTERM's wait for calls in flight (an
    injected slow tool must not hold a shutdown)."""
    if token:
        app = BearerAuth(app, token)
    log.info("access", extra={"bearer_token": bool(token), **log_extra})
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                            lifespan="on", timeout_graceful_shutdown=graceful_s)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn exposes a flag only
        await asyncio.sleep(0.05)
    if server.started:
        bound = server.servers[0].sockets[0].getsockname()[1]
        log.info("serving", extra={"port": bound, **log_extra})
        print(f"READY {name} http={bound}", flush=True)
    await task
