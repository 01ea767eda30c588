"""What a tool listed, and the caller's pick among the options code offered."""

from __future__ import annotations

import functools
import re
from typing import Any

from voicebot.brain.decide.state import Option
from voicebot.brain.lang import pack_or_default
from voicebot.brain.read.values import match_choice, parse_time


@functools.cache
def _places(language: str) -> tuple[tuple[re.Pattern[str], int], ...]:
    """The language pack's ``option_places`` ("the second one"), each with the index it names."""
    pack = pack_or_default(language)
    return tuple((re.compile(pack.word(pack.phrases([place])), re.I), index)
                 for place, index in pack.option_places.items())


def items_of(value: Any, key: str) -> list[dict[str, Any]]:
    """The list of items in a tool's result: under ``key``, or the first list in it."""
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    if not isinstance(value, dict):
        return []
    if key:
        return items_of(value.get(key), "")
    first = next((v for v in value.values() if isinstance(v, list)), None)
    return items_of(first, "") if first is not None else []


def same_value(item_value: Any, wanted: Any) -> bool:
    if item_value is None or wanted is None:
        return False
    a, b = str(item_value).strip().lower(), str(wanted).strip().lower()
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", a) and re.fullmatch(r"\d{1,2}:\d{2}", b):
        return a.zfill(5)[:5] == b.zfill(5)
    return a == b


def pick_option(words: str, options: list[Option], language: str = "en") -> Option | None:
    """The option the caller chose: by its place ("the second one"), its words, or its time."""
    for place, index in _places(language):
        if place.search(words) and -len(options) <= index < len(options):
            return options[index]
    by_label = match_choice(words, [o.label for o in options])
    if by_label is not None:
        return next(o for o in options if o.label == by_label)
    clock = parse_time(words, language=language)
    if clock is not None:
        for option in options:
            if any(same_value(v, clock) or same_value(v, _other_half(clock)) for v in option.item.values()):
                return option
    return None


def _other_half(clock: str) -> str:
    hours, minutes = clock.split(":")
    return f"{(int(hours) + 12) % 24:02d}:{minutes}"
