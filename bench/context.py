"""Prompt assembly in a fixed order, so the LLM server's prefix cache hits.

Order: instructions, (tool definitions: sent as ``tools``, which the server
renders right after the instructions, sorted and serialised stably by the
registry), older turns as question and answer only, recent turns in full
(each with the state block it was sent with, its tool calls and results),
then this turn's state block, the caller's words and this turn's tool steps.
The state block sits *before* the caller's words and is stored with the turn,
so the next turn's prompt repeats this one byte for byte: at the endpoint only
the new state block and the caller's words are new to the server's cache (the
agent prefills the rest right after each reply).

The state block is left out when the model already sees the same state: the last
block among the turns shown in full, or, when none is shown, the empty state of a
fresh session. Each block left out is tokens the server does not have to prefill at
the endpoint, which on CPU cores is time the caller waits.

Older turns collapse to question/answer in steps of ``recent_turns`` rather
than one per turn, so the cache breaks once every few turns, not every turn.
"""

from __future__ import annotations

import json
from typing import Any

from voicebot.brain.runtime.session_store import Turn


def window_start(total: int, keep: int, step: int) -> int:
    """First index kept of ``total`` items, moving in whole steps; keeps between keep-step+1 and keep."""
    if total <= keep:
        return 0
    return ((total - keep + step - 1) // step) * step


def turn_messages(turn: Turn, full: bool) -> list[dict[str, Any]]:
    spoken = turn.assistant + (" ..." if turn.interrupted else "")
    messages: list[dict[str, Any]] = []
    if full and turn.context:
        messages.append({"role": "system", "content": turn.context})  # as it was sent then
    messages.append({"role": "user", "content": turn.user})
    if full:
        messages += turn.steps
    messages.append({"role": "assistant", "content": spoken})
    return messages


def state_text(state: dict[str, Any]) -> str:
    return "Session state: " + json.dumps(state, sort_keys=True, ensure_ascii=False)


def shown_turns(turns: list[Turn], recent_turns: int, max_turns: int) -> tuple[list[Turn], int]:
    """The turns a prompt shows, and the index of the first one shown in full. Refused turns are
    not shown: with two refusals in its history the packaged 1.5B model refused every question
    after them ("I'm sorry, but I can't assist with that." to "Do you have vegan desserts?"),
    which it answers in a session without them."""
    turns = [turn for turn in turns if not turn.refused]
    turns = turns[window_start(len(turns), max_turns, recent_turns):]
    return turns, window_start(len(turns), 2 * recent_turns - 1, recent_turns)


def history_messages(system: str, turns: list[Turn], recent_turns: int = 4,
                     max_turns: int = 24) -> list[dict[str, Any]]:
    """Instructions and the turns so far: the prefix every next prompt of the session starts with."""
    turns, full_from = shown_turns(turns, recent_turns, max_turns)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for index, turn in enumerate(turns):
        messages += turn_messages(turn, full=index >= full_from)
    return messages


def state_block(state: str, empty_state: str, turns: list[Turn], recent_turns: int = 4,
                max_turns: int = 24) -> str:
    """This turn's state block: ``state``, or "" when the prompt already shows the same one (the
    last block of the turns shown in full; ``empty_state`` when none of them has one)."""
    shown, full_from = shown_turns(turns, recent_turns, max_turns)
    seen = next((t.context for t in reversed(shown[full_from:]) if t.context), empty_state)
    return "" if state == seen else state


def build_messages(
    system: str,
    turns: list[Turn],
    text: str,
    steps: list[dict[str, Any]],
    context: str,
    recent_turns: int = 4,
    max_turns: int = 24,
    instruction: str = "",
    preface: str = "",
) -> list[dict[str, Any]]:
    """The prompt: history, this turn's state block (``context``: fixed for the turn, stored with
    it), a ``preface`` if any (an instruction known before the caller spoke, so it can be cached
    with the prefix), the caller's words, this turn's tool steps, and a last-call
    ``instruction`` if any."""
    messages = history_messages(system, turns, recent_turns, max_turns)
    if context:
        messages.append({"role": "system", "content": context})
    if preface:
        messages.append({"role": "system", "content": preface})
    messages.append({"role": "user", "content": text})
    messages += steps
    if instruction:
        messages.append({"role": "system", "content": instruction})
    return messages
