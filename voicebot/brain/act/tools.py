"""Tools the model may call, each with a declared kind, and the dispatcher that enforces it.

The model picks tools and fills arguments; code decides what runs. Every
tool declares its kind: read-only (run at once, retried on timeout) or write
(offered to the model under its own name and schema, but a call never runs:
it becomes the one pending action that code reads back and runs after the
caller's yes). Bad calls (unknown tool, arguments that are not JSON or do not
match the schema) go back to the model as error results.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import jsonschema

from voicebot.brain.act.toolcalls import ToolCall, parse_arguments
from voicebot.brain.metrics import TOOL_CALLS, TOOL_SECONDS
from voicebot.common.telemetry import tracer

TRACER = tracer("voicebot.brain")


class ToolKind(StrEnum):
    READ_ONLY = "read_only"
    WRITE = "write"  # needs the caller's confirmation of a read-back made by code
    IRREVERSIBLE = "write"  # an alias: every write is treated as irreversible


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    kind: ToolKind = ToolKind.WRITE  # the safe default for anything undeclared
    timeout_s: float = 3.0
    # Backoff before each retry of a read-only tool that timed out: on a call, a long wait is silence.
    retry_delays_s: tuple[float, ...] = (0.5, 1.0)
    accepts_idempotency_key: bool = False
    title: str = ""  # how the action is named in a read-back built without a template
    read_back: str = ""  # template of the action's read-back (readback.py)
    done: str = ""  # template of the sentence after the write succeeded
    only_known: str = ""  # a reference field: list items the session does not know are dropped
    errors: dict[str, Any] = field(default_factory=dict, hash=False)  # the profile's ErrorRules
    server: str = ""  # the MCP server it comes from

    def definition(self, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": self.parameters if parameters is None else parameters}}

    def spoken_title(self) -> str:
        return self.title or self.description.split(". ")[0] or self.name.replace("_", " ")


@dataclass
class ToolContext:
    """Values the model never chooses: they come from the request (the gateway's auth)."""

    user_id: str
    session_id: str
    turn_id: str
    state: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None


class ToolRefused(Exception):
    """The tool says no for a business reason (slot taken): not retried."""


UNREACHABLE_RETRY_S = 0.2


class ToolUnreachable(ConnectionError):
    """The tool's server could not be reached at all: the call provably never ran."""


class Tool(ABC):
    spec: ToolSpec

    @abstractmethod
    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any: ...


class FunctionTool(Tool):
    """A Python function as a tool. A blocking function runs in a thread, so its
    timeout fires even while it blocks."""

    def __init__(self, spec: ToolSpec, fn: Callable[..., Any]) -> None:
        self.spec = spec
        self._fn = fn

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        if inspect.iscoroutinefunction(self._fn):
            return await self._fn(ctx, **args)
        return await asyncio.to_thread(self._fn, ctx, **args)


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None,
                 schema_for_model: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._definitions: list[dict[str, Any]] | None = None
        self._schema_for_model = schema_for_model or (lambda schema: schema)
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        jsonschema.Draft202012Validator.check_schema(tool.spec.parameters)
        self._tools[tool.spec.name] = tool
        self._definitions = None  # rebuilt on next use

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __len__(self) -> int:
        return len(self._tools)

    def definitions(self) -> list[dict[str, Any]]:
        """What the model is offered: every tool, sorted by name, keys in a fixed order (the
        prompt prefix must not move). A write is offered too: calling it only proposes it."""
        if self._definitions is None:  # built once, sent with every LLM call
            self._definitions = [
                json.loads(json.dumps(spec.definition(self._schema_for_model(spec.parameters)),
                                      sort_keys=True))
                for spec in self.specs()]
        return self._definitions

    def specs(self) -> list[ToolSpec]:
        return [self._tools[n].spec for n in sorted(self._tools)]


@dataclass
class ToolResult:
    call: ToolCall
    outcome: str  # succeeded | failed | timeout | unavailable | refused | invalid | proposed
    content: dict[str, Any]
    kind: ToolKind | None = None
    attempts: int = 0

    def message(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.call.id,
                "content": json.dumps(self.content, sort_keys=True, ensure_ascii=False)}


# A read-only tool as code calls it (a finder, a lookup, a knowledge tool): never a write.
ReadTool = Callable[[str, dict[str, Any]], Awaitable[ToolResult]]


Sleep = Callable[[float], Awaitable[None]]


class Dispatcher:
    def __init__(self, registry: ToolRegistry, sleep: Sleep = asyncio.sleep) -> None:
        self.registry = registry
        self._sleep = sleep

    def check(self, call: ToolCall) -> ToolResult | tuple[Tool, dict[str, Any]]:
        """Validate a call: an error result for the model, or the tool and its parsed arguments."""
        tool = self.registry.get(call.name)
        if tool is None:
            known = ", ".join(sorted(s.name for s in self.registry.specs())) or "none"
            return self._error(call, "invalid", f"unknown tool {call.name!r}; available: {known}")
        args, problem = parse_arguments(call.arguments)
        if problem is None:
            errors = sorted(jsonschema.Draft202012Validator(tool.spec.parameters).iter_errors(args),
                            key=lambda e: list(e.path))
            if errors:
                where = "/".join(str(p) for p in errors[0].path) or "arguments"
                problem = f"{where}: {errors[0].message}"
        if problem is not None:
            return self._error(call, "invalid", problem, tool.spec.kind)
        return tool, args

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Run a read-only call; a write is never run here (the agent turns it into a proposal)."""
        checked = self.check(call)
        if isinstance(checked, ToolResult):
            return checked
        tool, args = checked
        if tool.spec.kind is ToolKind.WRITE:
            return self._error(call, "refused", "this action needs the caller's confirmation",
                               tool.spec.kind)
        return await self.run(tool, call, args, ctx)

    async def run(self, tool: Tool, call: ToolCall, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run with a real timeout; read-only tools are retried with backoff after a timeout."""
        with TRACER.start_as_current_span(f"tool.{tool.spec.name}", attributes={
                "voicebot.tool.kind": tool.spec.kind.value, "voicebot.turn_id": ctx.turn_id}) as span:
            result = await self._run(tool, call, args, ctx)
            span.set_attributes({"voicebot.tool.outcome": result.outcome,
                                 "voicebot.tool.attempts": result.attempts})
            return result

    async def _run(self, tool: Tool, call: ToolCall, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        spec = tool.spec
        # Retried after a timeout: read-only tools, and writes that carry an idempotency key
        # (the same key makes a second attempt safe). Any other write is never retried blind.
        retry = spec.kind is ToolKind.READ_ONLY or (spec.accepts_idempotency_key and ctx.idempotency_key)
        delays = list(spec.retry_delays_s) if retry else []
        attempts = 0
        started = time.perf_counter()
        try:
            while True:
                attempts += 1
                try:
                    value = await asyncio.wait_for(tool.run(args, ctx), spec.timeout_s)
                    return self._done(call, spec, "succeeded", {"ok": True, "result": value}, attempts)
                except ToolUnreachable as exc:
                    # Provably never ran (connection refused): one quick retry covers a restart
                    # blip; a server that stays down is said at once ("I can't check right now").
                    if attempts > 1:
                        return self._done(call, spec, "unavailable", {
                            "ok": False, "error": f"{spec.name} is unavailable right now: {exc}"}, attempts)
                    await self._sleep(UNREACHABLE_RETRY_S)
                except (TimeoutError, ConnectionError) as exc:
                    # A dropped connection is as uncertain as a timeout: the call may have run.
                    if not delays:
                        reason = (f"timed out after {spec.timeout_s:g} s" if isinstance(exc, TimeoutError)
                                  else "could not be reached")
                        return self._done(call, spec, "timeout", {
                            "ok": False, "error": f"{spec.name} {reason}"}, attempts)
                    await self._sleep(delays.pop(0))
                except ToolRefused as exc:
                    return self._done(call, spec, "refused", {"ok": False, "refused": str(exc)}, attempts)
                except (ValueError, LookupError, PermissionError) as exc:
                    # The tool rejected the input: the model can correct itself.
                    return self._done(call, spec, "failed", {"ok": False, "error": str(exc)}, attempts)
        finally:
            TOOL_SECONDS.labels(spec.name).observe(time.perf_counter() - started)

    @staticmethod
    def _done(call: ToolCall, spec: ToolSpec, outcome: str, content: dict[str, Any],
              attempts: int) -> ToolResult:
        TOOL_CALLS.labels(spec.name, outcome).inc()
        return ToolResult(call, outcome, content, spec.kind, attempts)

    @staticmethod
    def _error(call: ToolCall, outcome: str, message: str, kind: ToolKind | None = None) -> ToolResult:
        TOOL_CALLS.labels(call.name if kind else "unknown", outcome).inc()
        return ToolResult(call, outcome, {"ok": False, "error": message}, kind)
