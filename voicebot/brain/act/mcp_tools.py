"""An MCP server's tools as brain tools (streamable HTTP).

The spec of each tool comes from the server's listing: name, title,
description, input schema, and the kind from its annotations. Only
``readOnlyHint: true`` makes a tool read-only; anything else, no annotations
included, is a write that needs the caller's confirmation, the safe default
(docs/design.md). The profile may override kind, timeout, retries and
the read-back per tool, and include or exclude tools. An ``idempotency_key``
parameter is hidden from the model and filled by code from
``ToolContext.idempotency_key``. ``admin_*`` tools are never offered.

Results: structured content (a dict) comes back as the tool's value; a tool
error starting with ``refused:`` raises ``ToolRefused`` (a business "no", not
retried); any other tool error raises ``ValueError`` (the model may correct
itself); a lost connection raises ``McpConnectionError`` (a ``ConnectionError``).

One ``McpToolSource`` keeps one client connection open. The connection lives
in a task of its own: the MCP client's anyio task group then never cancels a
caller's task when the transport fails, and closing works from any task. A
dead connection is replaced on the next call. A request is resent (once, on a
new connection) only when it provably never ran: the connection was refused,
or a handshake-era server no longer knows the session (it restarted). Any
other transport failure is an unknown outcome and is raised, never retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST

from voicebot.brain.act.tools import Tool, ToolContext, ToolKind, ToolRefused, ToolSpec, ToolUnreachable

log = logging.getLogger("brain.mcp")

IDEMPOTENCY_KEY = "idempotency_key"
HIDDEN_PREFIX = "admin_"  # tools for operators and tests, never for the model
T = TypeVar("T")


class McpConnectionError(ConnectionError):
    """The MCP server could not be reached, or the connection dropped during a call (outcome unknown)."""


class McpUnreachable(McpConnectionError, ToolUnreachable):
    """The MCP server refused the connection: the request provably never ran."""


def tool_kind(annotations: mcp_types.ToolAnnotations | None) -> ToolKind:
    """Only an explicit read-only hint runs without confirmation; everything else is a write."""
    if annotations is not None and annotations.read_only_hint is True:
        return ToolKind.READ_ONLY
    return ToolKind.WRITE


def _title(tool: mcp_types.Tool) -> str:
    annotated = tool.annotations.title if tool.annotations is not None else None
    return tool.title or annotated or ""


def apply_override(spec: ToolSpec, override: Any | None, server: str = "") -> ToolSpec:
    """The profile's per-tool settings over the listing (profile.ToolOverride)."""
    changes: dict[str, Any] = {"server": server}
    if override is not None:
        if override.kind:
            changes["kind"] = ToolKind(override.kind)
        if override.timeout_s:
            changes["timeout_s"] = override.timeout_s
        if override.retries is not None:
            changes["retry_delays_s"] = tuple(0.5 * 2 ** i for i in range(override.retries))
        for name in ("title", "read_back", "done", "only_known", "errors"):
            if getattr(override, name, None):
                changes[name] = getattr(override, name)
    return dataclasses.replace(spec, **changes)


def tool_spec(tool: mcp_types.Tool) -> ToolSpec:
    """A brain ToolSpec from an MCP tool listing (timeouts: the ToolSpec defaults)."""
    parameters = copy.deepcopy(tool.input_schema) or {"type": "object", "properties": {}}
    properties = parameters.get("properties") or {}
    takes_key = IDEMPOTENCY_KEY in properties
    if takes_key:
        # Code chooses the key, not the model: it must be the same on a retry of the same action.
        properties.pop(IDEMPOTENCY_KEY)
        if IDEMPOTENCY_KEY in parameters.get("required", []):
            parameters["required"] = [p for p in parameters["required"] if p != IDEMPOTENCY_KEY]
    return ToolSpec(name=tool.name, description=tool.description or _title(tool) or tool.name,
                    parameters=parameters, kind=tool_kind(tool.annotations),
                    accepts_idempotency_key=takes_key, title=_title(tool))


def tool_value(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The tool's structured content, or the refusal / error it reported, raised."""
    text = "\n".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))
    if result.is_error:
        if text.startswith("refused:"):
            raise ToolRefused(text)
        raise ValueError(text or "the tool failed without a message")
    if isinstance(result.structured_content, dict):
        return result.structured_content
    with contextlib.suppress(ValueError):
        value = json.loads(text)
        if isinstance(value, dict):
            return value
    return {"text": text}


class McpTool(Tool):
    def __init__(self, spec: ToolSpec, source: McpToolSource) -> None:
        self.spec = spec
        self.source = source

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        arguments = {k: v for k, v in args.items() if k != IDEMPOTENCY_KEY}  # never the model's own
        if self.spec.accepts_idempotency_key and ctx.idempotency_key:
            arguments[IDEMPOTENCY_KEY] = ctx.idempotency_key
        return tool_value(await self.source.call(self.spec.name, arguments))


@dataclass(eq=False)
class _Connection:
    """One client session, held open by its own task until ``stop`` is set or the transport fails."""

    started: asyncio.Future[Client]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    client: Client | None = None
    lost: BaseException | None = None  # why the transport failed

    @property
    def alive(self) -> bool:
        return self.client is not None and self.task is not None and not self.task.done()


class McpToolSource:
    """One MCP server (``http://host:port/mcp``): its tools, and the connection they share.

    ``async with McpToolSource(url) as source: tools = await source.load_tools()``.
    """

    def __init__(self, url: str, *, connect_timeout_s: float = 5.0, mode: str = "auto",
                 headers: dict[str, str] | None = None, name: str = "") -> None:
        self.url = url
        self.name = name or url
        self.headers = dict(headers or {})  # e.g. Authorization, sent with every request
        self.connect_timeout_s = connect_timeout_s
        # mcp.Client's: "auto" (protocol revision 2026-07-28, sessionless; else the handshake) or "legacy"
        self.mode = mode
        self._lock = asyncio.Lock()
        self._conn: _Connection | None = None

    async def __aenter__(self) -> McpToolSource:
        await self._connected()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def load_tools(self, include: list[str] | None = None, exclude: list[str] | tuple[str, ...] = (),
                         overrides: dict[str, Any] | None = None) -> list[McpTool]:
        """The server's tools, sorted by name: without the ``admin_*`` ones and the excluded,
        only the included ones when a list is given, with the profile's overrides applied."""
        listing = await self._request(lambda client: client.list_tools())
        overrides = overrides or {}
        offered = [t for t in listing.tools if not t.name.startswith(HIDDEN_PREFIX)
                   and t.name not in exclude and (include is None or t.name in include)]
        missing = sorted(set(include or ()) - {t.name for t in offered})
        if missing:
            log.warning("MCP server lacks tools the profile includes", extra={
                "server": self.name, "missing": missing})
        tools = [McpTool(apply_override(tool_spec(t), overrides.get(t.name), self.name), self)
                 for t in offered]
        return sorted(tools, key=lambda t: t.spec.name)

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        return await self._request(lambda client: client.call_tool(name, arguments))

    async def _request(self, send: Callable[[Client], Awaitable[T]]) -> T:
        """Send once; resend on a fresh connection only when the first provably never ran
        (the server restarted): safe even for an irreversible tool."""
        conn = await self._connected()
        try:
            return await send(_client(conn))
        except MCPError as exc:
            if not await self._resendable(conn, exc):
                raise await self._failure(conn, exc) from (conn.lost or exc)
        log.info("reconnecting to the MCP server", extra={"url": self.url})
        conn = await self._connected(drop=conn)
        try:
            return await send(_client(conn))
        except MCPError as exc:
            raise await self._failure(conn, exc) from (conn.lost or exc)

    async def aclose(self) -> None:
        """Close the connection (a later call would open a new one)."""
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                await _stop(conn)

    async def _connected(self, drop: _Connection | None = None) -> _Connection:
        """The open connection, or a new one (also when ``drop`` is still the current one)."""
        async with self._lock:
            if self._conn is not None and self._conn.alive and self._conn is not drop:
                return self._conn
            if self._conn is not None:
                await _stop(self._conn)
                self._conn = None
            conn = _Connection(started=asyncio.get_running_loop().create_future())
            conn.task = asyncio.create_task(self._own(conn), name=f"mcp {self.url}")
            try:
                conn.client = await asyncio.wait_for(conn.started, self.connect_timeout_s)
            except Exception as exc:  # any failure to open a session: the server is not usable
                await _stop(conn)
                raise McpUnreachable(f"MCP server {self.url} unreachable: {_describe(exc)}") from exc
            except BaseException:
                conn.task.cancel()  # we are being cancelled ourselves: no await here
                raise
            self._conn = conn
            return conn

    async def _own(self, conn: _Connection) -> None:
        """Hold the client open until told to stop, recording why the transport failed if it does."""
        try:
            timeout = httpx2.Timeout(30.0, read=300.0)  # the MCP transports' own defaults
            async with httpx2.AsyncClient(headers=self.headers, timeout=timeout) as http, \
                    Client(streamable_http_client(self.url, http_client=http), cache=None,
                           mode=self.mode) as client:
                if conn.started.done():
                    return  # the caller gave up waiting
                conn.started.set_result(client)
                await conn.stop.wait()
        except Exception as exc:  # noqa: BLE001 - recorded for the callers, who raise it
            conn.lost = exc
            if not conn.started.done():
                conn.started.set_exception(exc)
            elif not conn.stop.is_set():
                log.warning("MCP connection lost", extra={"url": self.url, "error": _describe(exc)})

    async def _resendable(self, conn: _Connection, exc: MCPError) -> bool:
        if _stale_session(exc):
            return True  # the server does not know our session: it ran nothing
        if exc.code != CONNECTION_CLOSED:
            return False
        await _settle(conn)
        return _never_sent(conn.lost)

    async def _failure(self, conn: _Connection, exc: MCPError) -> Exception:
        """A lost connection becomes McpConnectionError; any other MCP (protocol) error a ValueError."""
        if _stale_session(exc):
            return McpConnectionError(f"MCP session at {self.url} rejected after reconnecting: {exc.message}")
        if exc.code != CONNECTION_CLOSED:
            return ValueError(f"MCP error {exc.code}: {exc.message}")
        await _settle(conn)
        if _never_sent(conn.lost):
            return McpUnreachable(f"MCP server {self.url} unreachable: {_describe(conn.lost)}")
        return McpConnectionError(f"MCP connection to {self.url} lost: {_describe(conn.lost or exc)}")


def _client(conn: _Connection) -> Client:
    assert conn.client is not None  # set before a connection is handed out
    return conn.client


async def _settle(conn: _Connection) -> None:
    """Give the owner task a moment to unwind, so it has recorded why the transport failed."""
    if conn.task is not None:
        await asyncio.wait({conn.task}, timeout=1.0)


async def _stop(conn: _Connection) -> None:
    """Close a session politely; one still opening (its server hangs) is cancelled at once."""
    conn.stop.set()
    if conn.task is None:
        return
    if conn.client is None:
        conn.task.cancel()
    await asyncio.wait({conn.task}, timeout=5.0)
    if not conn.task.done():
        conn.task.cancel()


async def load_mcp_tools(url: str, *, connect_timeout_s: float = 5.0) -> list[McpTool]:
    """Connect to ``url`` and return its tools. They share one new McpToolSource
    (``tools[0].source``); close it with ``await tools[0].source.aclose()`` at shutdown."""
    source = McpToolSource(url, connect_timeout_s=connect_timeout_s)
    try:
        return await source.load_tools()
    except BaseException:
        await source.aclose()
        raise


def _leaves(exc: BaseException | None) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [] if exc is None else [exc]


def _stale_session(exc: MCPError) -> bool:
    """A handshake-era (legacy) server that restarted answers our old session id so."""
    return exc.code == INVALID_REQUEST and exc.message in ("Session not found", "Session terminated")


def _never_sent(exc: BaseException | None) -> bool:
    """Only a refused connection proves the request never reached the server."""
    leaves = _leaves(exc)
    return bool(leaves) and all(isinstance(leaf, httpx2.ConnectError) for leaf in leaves)


def _describe(exc: BaseException | None) -> str:
    leaves = _leaves(exc) or [exc]
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)
