"""The tools a deployment offers: every MCP server its profile names, under one registry.

Each server is reached with the auth header from the profile; its tools are
filtered by the include/exclude lists and shaped by the per-tool overrides.
Two servers offering the same tool name is a configuration error (the model
could not tell them apart), reported at start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import httpx

from voicebot.brain.act.mcp_tools import McpConnectionError, McpTool, McpToolSource
from voicebot.brain.act.tools import ToolRegistry
from voicebot.brain.business.profile import McpServer, Profile, ProfileError
from voicebot.brain.business.references import References

log = logging.getLogger("brain.tools")


async def connect_server(server: McpServer, wait_s: float) -> tuple[McpToolSource, list[McpTool]]:
    """Connect and list the tools, retrying while the server comes up (bounded by ``wait_s``)."""
    source = McpToolSource(server.url, headers=server.auth_headers(), name=server.name,
                           connect_timeout_s=server.connect_timeout_s)
    give_up_at = time.monotonic() + wait_s
    while True:
        try:
            tools = await source.load_tools(server.include, server.exclude, dict(server.tools))
            break
        except McpConnectionError as exc:
            refused = await token_refusal(server)  # a wrong token does not get better by waiting
            if refused or time.monotonic() >= give_up_at:
                await source.aclose()
                raise ProfileError(f"mcp_servers.{server.name}: {refused or exc}") from exc
            log.info("waiting for the MCP server", extra={"server": server.name, "error": str(exc)})
            await asyncio.sleep(0.5)
    unknown = sorted(set(server.tools) - {t.spec.name for t in tools})
    if unknown:
        log.warning("profile overrides tools the server does not offer",
                    extra={"server": server.name, "tools": unknown})
    log.info("MCP tools loaded", extra={"server": server.name, "tools": {
        t.spec.name: t.spec.kind.value for t in tools}})
    return source, tools


async def token_refusal(server: McpServer) -> str:
    """Why the server refuses us when it is the token (HTTP 401 or 403 to an MCP ``initialize``),
    naming the variable to fix; empty otherwise. The MCP client reports such a refusal only as
    "Server returned an error response"."""
    status = await initialize_status(server)
    if status not in (401, 403):
        return ""
    variable = server.auth_token_env
    said = (f"{variable} is unset" if variable and not os.environ.get(variable) else
            f"{variable} is not the server's token" if variable else "the profile names no auth_token_env")
    return f"{server.url} refused the token (HTTP {status}): {said}"


async def initialize_status(server: McpServer) -> int | None:
    """The HTTP status the server answers an MCP ``initialize`` with (None: no answer)."""
    request = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "voicebot", "version": "1"}}}
    headers = {**server.auth_headers(), "Accept": "application/json, text/event-stream"}
    try:
        async with httpx.AsyncClient(timeout=server.connect_timeout_s) as client:
            return (await client.post(server.url, json=request, headers=headers)).status_code
    except httpx.HTTPError:
        return None


async def build_registry(profile: Profile, wait_s: float = 30.0) -> tuple[ToolRegistry, list[McpToolSource]]:
    references = References(profile.references, profile.hidden_fields)
    registry = ToolRegistry(schema_for_model=references.model_schema)
    sources: list[McpToolSource] = []
    try:
        for server in profile.mcp_servers:
            source, tools = await connect_server(server, wait_s)
            sources.append(source)
            for tool in tools:
                existing = registry.get(tool.spec.name)
                if existing is not None:
                    raise ProfileError(f"mcp_servers.{server.name}: tool {tool.spec.name!r} is also "
                                       f"offered by {existing.spec.server!r}; exclude it from one")
                registry.register(tool)
    except BaseException:
        for source in sources:
            await source.aclose()
        raise
    return registry, sources
