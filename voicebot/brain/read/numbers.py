"""What a number field's number means in the caller's words, from the business's profile.

Nothing here knows a business: "for four people", "a party of six", "just me" and "my partner
is joining us" are the restaurant's words for its party size, written in its profile
(``tasks.<t>.fields.<f>``: ``counts``, ``said_as``, ``words_for``, ``more``, ``fewer``). A
field without them takes a number only as the answer to its own question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from voicebot.brain.lang import pack_or_default
from voicebot.brain.read.values import digits


@dataclass(frozen=True)
class NumberWords:
    counted: re.Pattern[str] | None  # "4 people": the number before what it counts
    said_as: re.Pattern[str] | None  # "table for 4": the number inside a phrase
    words_for: tuple[tuple[re.Pattern[str], int], ...]  # "just me": 1
    more: re.Pattern[str] | None  # "2 more people", "is joining us"
    fewer: re.Pattern[str] | None  # "1 less", "can't come"


def _alternation(phrases: list[str]) -> str:
    ordered = sorted({p.strip().lower() for p in phrases if p.strip()}, key=len, reverse=True)
    return "|".join(r"\s+".join(re.escape(word) for word in phrase.split()) for phrase in ordered)


def number_words(settings: Any, language: str = "en") -> NumberWords | None:
    """The field's number words (``FieldSettings``), compiled with the language pack's words for
    one more or fewer ("two more people", "another guest", "one less"); None when it has none."""
    counts, said_as = _alternation(settings.counts), settings.said_as
    counting = pack_or_default(language).counting
    more_words, fewer_words = _alternation(counting.more), _alternation(counting.fewer)
    another = _alternation(counting.another)
    if not (counts or said_as or settings.words_for or settings.more or settings.fewer):
        return None
    phrases = [re.escape(p.strip().lower()).replace(re.escape("{n}"), r"(\d{1,4})") for p in said_as]
    phrases = [re.sub(r"(?:\\ )+", r"\\s+", p) for p in phrases]
    more = [rf"\b(?:(\d{{1,2}}|an?|one)\s+)?(?:{more_words})\s+(?:{counts})\b"] \
        if counts and more_words else []
    if counts and another:
        more.append(rf"\b(?:{another})\s+(?:{counts})\b")
    fewer = [rf"\b(\d{{1,2}}|one)\s+(?:{fewer_words})\b",
             rf"\b(\d{{1,2}}|one)\s+(?:{counts})\s+(?:{fewer_words})\b"] if counts and fewer_words else []
    if settings.more:
        more.append(rf"\b(?:{_alternation(settings.more)})\b")
    if settings.fewer:
        fewer.append(rf"\b(?:{_alternation(settings.fewer)})\b")
    return NumberWords(
        counted=re.compile(rf"\b(\d{{1,4}})\s+(?:{counts})\b") if counts else None,
        said_as=re.compile(r"\b(?:" + "|".join(phrases) + r")\b") if phrases else None,
        words_for=tuple((re.compile(rf"\b(?:{_alternation(words)})\b"), int(n))
                        for n, words in settings.words_for.items() if _alternation(words)),
        more=re.compile("|".join(more)) if more else None,
        fewer=re.compile("|".join(fewer)) if fewer else None,
    )


def _words(text: str) -> str:
    return digits(text.lower().replace("’", "'"))


def said_number(text: str, numbers: NumberWords | None) -> int | None:
    """The number the words give the field without being asked: "a table for 4", "4 of us",
    "just me". None: nothing in the words is this field's number."""
    if numbers is None:
        return None
    words = _words(text)
    for pattern, value in numbers.words_for:
        if pattern.search(words):
            return value
    for pattern in (numbers.counted, numbers.said_as):
        if pattern is not None and (found := pattern.search(words)):
            return int(next(g for g in found.groups() if g))
    return None


def without_numbers(text: str, numbers: list[NumberWords]) -> str:
    """The words with every field's counted numbers taken out ("for 4 people at 7" -> "for at 7"),
    so a time is not read from a party size."""
    words = _words(text)
    for item in numbers:
        for pattern in (item.counted, item.said_as):
            if pattern is not None:
                words = pattern.sub(" ", words)
    return words


def number_change(text: str, numbers: NumberWords | None, current: int) -> int | None:
    """The field's value changed relative to itself: "one more person" (+1), "two fewer" (-2)."""
    if numbers is None:
        return None
    words = _words(text)
    if numbers.more is not None and (more := numbers.more.search(words)):
        count = next((g for g in more.groups() if g), None)
        return current + (int(count) if count and count.isdigit() else 1)
    if numbers.fewer is not None and (fewer := numbers.fewer.search(words)):
        count = next((g for g in fewer.groups() if g), None)
        return max(1, current - (int(count) if count and count.isdigit() else 1))
    return None
