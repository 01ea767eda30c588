"""Optional domain hooks: a profile's Python entry point that can carry common paths by rule.

A small local model often answers a complete request in prose instead of
calling the right tool. A hook may read the caller's words by rule (a
restaurant's day, time, party size and name), run read-only tools, and
propose a write call. The proposal goes through exactly the same path as a
model's call: schema check, reference resolution, one pending action, a
read-back made by code, and a write only after the caller's yes. A hook can
never run a write itself, and the core never needs one.

``profile.hooks = "package.module:factory"``; ``factory(profile)`` returns a
``DomainHooks``.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from services.brain.state import PendingAction

ReadTool = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class HookContext:
    text: str
    language: str
    task: dict[str, Any]  # the hook's collected fields; emptied by code after a write
    tools: frozenset[str]  # names of the tools this deployment offers
    read: ReadTool  # run a read-only tool: {"ok": ..., "result": ...} as the model would see it
    correcting: PendingAction | None = None  # the caller is changing this (dropped) action


@dataclass
class HookResult:
    """A write call to propose (name and arguments as the model would make it), or a note."""

    propose: tuple[str, dict[str, Any]] | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class DomainHooks:
    """Override what you need; the defaults do nothing."""

    async def before_model(self, ctx: HookContext) -> HookResult | None:
        return None


def load_hooks(entry_point: str | None, profile: Any) -> DomainHooks:
    if not entry_point:
        return DomainHooks()
    module_name, _, attribute = entry_point.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"hooks: cannot load {entry_point!r}: {exc}") from exc
    hooks = factory(profile)
    if not isinstance(hooks, DomainHooks):
        raise ValueError(f"hooks: {entry_point!r} did not return a DomainHooks")
    return hooks
