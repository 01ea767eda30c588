"""Optional domain hooks: a profile's Python entry point that can carry common paths by rule.

A small local model often answers a complete request in prose instead of
calling the right tool. A hook may read the caller's words by rule (a
restaurant's day, time, party size and name), run read-only tools, and
propose a write call. The proposal goes through exactly the same path as a
model's call: schema check, reference resolution, one pending action, a
read-back made by code, and a write only after the caller's yes. A hook can
never run a write itself, and the core never needs one.

When the caller changes what was read back in words the rules cannot read ("could we
do eight instead"), a hook that declares ``change_fields`` has the model fill in only
its fields (structured output, checked against the schema by code), and proposes
from them in ``from_fields``: the model reads the words, code picks the tool, its
arguments and the slot. A small model writes a change as such fields far more often
right than as a new tool call (which tends to reuse an old reference).

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


@dataclass(frozen=True)
class ChangeFields:
    """What the model is asked for a change the rules could not read: the hook's fields as a JSON
    schema (sent as the response format) and the instruction sent after the caller's words."""

    schema: dict[str, Any]
    instruction: str
    max_tokens: int = 60


class DomainHooks:
    """Override what you need; the defaults do nothing."""

    change_fields: ChangeFields | None = None

    async def before_model(self, ctx: HookContext) -> HookResult | None:
        return None

    async def from_fields(self, ctx: HookContext, fields: dict[str, Any]) -> HookResult | None:
        """``fields``: the model's reading of a change (``ctx.correcting``), already checked
        against ``change_fields.schema``. Propose from them as ``before_model`` would."""
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
