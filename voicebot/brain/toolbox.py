"""The tools a deployment offers: every MCP server its profile names, under one registry.

Each server is reached with the auth header from the profile; its tools are
filtered by the include/exclude lists and shaped by the per-tool overrides.
Two servers offering the same tool name is a configuration error (the model
could not tell them apart), reported at start.
"""

from __future__ import annotations

import asyncio
import logging
import time

from voicebot.brain.mcp_tools import McpConnectionError, McpTool, McpToolSource
from voicebot.brain.profile import McpServer, Profile, ProfileError
from voicebot.brain.references import References
from voicebot.brain.tools import ToolRegistry

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
            if time.monotonic() >= give_up_at:
                await source.aclose()
                raise ProfileError(f"mcp_servers.{server.name}: {exc}") from exc
            log.info("waiting for the MCP server", extra={"server": server.name, "error": str(exc)})
            await asyncio.sleep(0.5)
    unknown = sorted(set(server.tools) - {t.spec.name for t in tools})
    if unknown:
        log.warning("profile overrides tools the server does not offer",
                    extra={"server": server.name, "tools": unknown})
    log.info("MCP tools loaded", extra={"server": server.name, "tools": {
        t.spec.name: t.spec.kind.value for t in tools}})
    return source, tools


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
