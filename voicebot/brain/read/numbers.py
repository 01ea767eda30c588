"""What a number field's number means in the caller's words, from the business's profile.

Nothing here knows a business: "for four people", "a party of six", "just me" and "my partner
is joining us" are the restaurant's words for its party size, written in its profile
(``tasks.<t>.fields.<f>``: ``counts``, ``said_as``, ``words_for``, ``more``, ``fewer``). A
field without them takes a number only as the answer to its own question.
"""

from __future__ import annotations

import functools
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
    language: str = "en"  # whose number words become digits ("두 명" -> "2 명")
    unit: str = ""  # the first of what the number counts ("people", "명"), to say it again


def _alternation(phrases: list[str], gap: str = r"\s+", language: str = "en") -> str:
    """The phrases as the caller's words are compared: number words as digits ("한 명 더" ->
    "1 명 더"), longest first."""
    ordered = sorted({_words(p, language).strip() for p in phrases if p.strip()}, key=len, reverse=True)
    return "|".join(gap.join(re.escape(word) for word in phrase.split()) for phrase in ordered)


def number_words(settings: Any, language: str = "en") -> NumberWords | None:
    """The field's number words (``FieldSettings``), compiled with the language pack's words for
    one more or fewer ("two more people", "another guest", "one less"); None when it has none.
    In a language whose words take particles without a space ("2명이요"), a word may end inside
    the caller's word and the space before it may be left out."""
    pack = pack_or_default(language)
    gap, end = (r"\s+", r"\b") if pack.word_boundaries else (r"\s*", "")

    def compared(words: list[str]) -> str:
        return _alternation(words, gap, language)

    counts, said_as = compared(settings.counts), settings.said_as
    more_words, fewer_words = compared(pack.counting.more), compared(pack.counting.fewer)
    another = compared(pack.counting.another)
    if not (counts or said_as or settings.words_for or settings.more or settings.fewer):
        return None
    phrases = [re.escape(p.strip().lower()).replace(re.escape("{n}"), r"(\d{1,4})") for p in said_as]
    phrases = [re.sub(r"(?:\\ )+", gap.replace("\\", "\\\\"), p) for p in phrases]
    more = [rf"\b(?:(\d{{1,2}}|an?|one){gap})?(?:{more_words}){gap}(?:{counts}){end}"] \
        if counts and more_words else []
    if counts and another:
        more.append(rf"\b(?:{another}){gap}(?:{counts}){end}")
    fewer = [rf"\b(\d{{1,2}}|one){gap}(?:{fewer_words}){end}",
             rf"\b(\d{{1,2}}|one){gap}(?:{counts}){gap}(?:{fewer_words}){end}"] \
        if counts and fewer_words else []
    if counts and more_words:  # "두 명 더": the number, what it counts, then the word for more
        more.append(rf"\b(\d{{1,2}}){gap}(?:{counts}){gap}(?:{more_words}){end}")
    if settings.more:
        more.append(rf"\b(?:{compared(settings.more)}){end}")
    if settings.fewer:
        fewer.append(rf"\b(?:{compared(settings.fewer)}){end}")
    return NumberWords(
        counted=re.compile(rf"\b(\d{{1,4}}){gap}(?:{counts}){end}") if counts else None,
        said_as=re.compile(r"\b(?:" + "|".join(phrases) + rf"){end}") if phrases else None,
        words_for=tuple((re.compile(rf"\b(?:{compared(words)}){end}"), int(n))
                        for n, words in settings.words_for.items() if compared(words)),
        more=re.compile("|".join(more)) if more else None,
        fewer=re.compile("|".join(fewer)) if fewer else None,
        language=language,
        unit=next((c.strip() for c in settings.counts if c.strip()), ""),
    )


def _words(text: str, language: str) -> str:
    return digits(text.lower().replace("’", "'"), language)


@functools.lru_cache(maxsize=16)
def _an_hour_before(language: str) -> re.Pattern[str] | None:
    """Words that end with a clock hour ("7시 "): a count right after them is its minutes
    ("7시 30분"), never the field's number, where the minutes' word also counts people (분)."""
    values = pack_or_default(language).values
    hour = values.times.hour if values is not None else ""
    if "{h}" not in hour:
        return None
    before, after = hour.split("{h}", 1)
    return re.compile(rf"{re.escape(before)}\d{{1,2}}\s*{re.escape(after)}\s*$")


def _counts(pattern: re.Pattern[str], words: str, language: str) -> list[re.Match[str]]:
    """The pattern's matches in the words that are not the minutes of a clock time."""
    hour = _an_hour_before(language)
    return [m for m in pattern.finditer(words) if hour is None or not hour.search(words[:m.start()])]


def said_number(text: str, numbers: NumberWords | None) -> int | None:
    """The number the words give the field without being asked: "a table for 4", "4 of us",
    "just me". None: nothing in the words is this field's number."""
    if numbers is None:
        return None
    words = _words(text, numbers.language)
    for pattern, value in numbers.words_for:
        if pattern.search(words):
            return value
    for pattern in (numbers.counted, numbers.said_as):
        if pattern is not None and (found := _counts(pattern, words, numbers.language)):
            return int(next(g for g in found[0].groups() if g))
    return None


def without_numbers(text: str, numbers: list[NumberWords]) -> str:
    """The words with every field's counted numbers taken out ("for 4 people at 7" -> "for at 7"),
    so a time is not read from a party size."""
    words = text
    for item in numbers:
        words = _words(words, item.language)
        for pattern in (item.counted, item.said_as):
            if pattern is not None:
                for found in reversed(_counts(pattern, words, item.language)):
                    words = words[:found.start()] + " " + words[found.end():]
    return words


def number_change(text: str, numbers: NumberWords | None, current: int) -> int | None:
    """The field's value changed relative to itself: "one more person" (+1), "two fewer" (-2)."""
    if numbers is None:
        return None
    words = _words(text, numbers.language)
    if numbers.more is not None and (more := numbers.more.search(words)):
        count = next((g for g in more.groups() if g), None)
        return current + (int(count) if count and count.isdigit() else 1)
    if numbers.fewer is not None and (fewer := numbers.fewer.search(words)):
        count = next((g for g in fewer.groups() if g), None)
        return max(1, current - (int(count) if count and count.isdigit() else 1))
    return None
