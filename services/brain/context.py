"""Prompt assembly in a fixed order, so the LLM server's prefix cache hits.

Order: instructions, (tool definitions: sent as ``tools``, which the server
renders right after the instructions, sorted and serialised stably by the
registry), older turns as question and answer only, recent turns in full
with their tool calls and results, the current question and this turn's tool
steps, and the session-state block last. Everything before the state block
only grows between consecutive calls of a session, so each call's prefix is
the previous call's prompt.

Older turns collapse to question/answer in steps of ``recent_turns`` rather
than one per turn, so the cache breaks once every few turns, not every turn.
"""

from __future__ import annotations

import json
from typing import Any

from services.brain.session_store import Turn


def window_start(total: int, keep: int, step: int) -> int:
    """First index kept of ``total`` items, moving in whole steps; keeps between keep-step+1 and keep."""
    if total <= keep:
        return 0
    return ((total - keep + step - 1) // step) * step


def turn_messages(turn: Turn, full: bool) -> list[dict[str, Any]]:
    spoken = turn.assistant + (" ..." if turn.interrupted else "")
    messages: list[dict[str, Any]] = [{"role": "user", "content": turn.user}]
    if full:
        messages += turn.steps
    messages.append({"role": "assistant", "content": spoken})
    return messages


def state_block(state: dict[str, Any]) -> dict[str, Any]:
    return {"role": "system",
            "content": "Session state: " + json.dumps(state, sort_keys=True, ensure_ascii=False)}


def build_messages(
    system: str,
    turns: list[Turn],
    text: str,
    steps: list[dict[str, Any]],
    state: dict[str, Any],
    recent_turns: int = 4,
    max_turns: int = 24,
) -> list[dict[str, Any]]:
    turns = turns[window_start(len(turns), max_turns, recent_turns):]
    full_from = window_start(len(turns), 2 * recent_turns - 1, recent_turns)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for index, turn in enumerate(turns):
        messages += turn_messages(turn, full=index >= full_from)
    messages.append({"role": "user", "content": text})
    messages += steps
    messages.append(state_block(state))
    return messages
