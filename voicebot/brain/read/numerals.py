"""Number words as digits by a language pack's numerals, for languages no library reads.

Korean counts with two sets of words: native ones add (열+두 = 12, 스물+세 = 23) and count
people and hours; Sino-Korean digits multiply the scale after them (이+십+오 = 25) and count
minutes, days and months. Most of them are also other words ("네" is yes, "이" is this, "일"
is work), so a run of number words is a number only before one of the pack's counters ("네
명" -> "4명", "세 시" -> "3시") or, for the few words that are never anything else, alone
("넷이요" -> "4이요"). Words the pack names as no number ("이번": this time) stay as they are.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from voicebot.brain.lang import language_pack


@dataclass(frozen=True)
class _Compiled:
    values: dict[str, int]
    words: frozenset[str]  # the adding words among ``values``
    scales: dict[str, int]
    counted: re.Pattern[str]  # a run of number words before a counter
    alone: re.Pattern[str]  # a word that is a number by itself, before a particle or nothing
    not_numbers: re.Pattern[str] | None


def _alternation(words: list[str] | set[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True) if w)


@functools.cache
def _compiled(language: str) -> _Compiled | None:
    read = language_pack(language).values
    if read is None:
        return None
    numerals, particles = read.numerals, read.particles
    values = {**numerals.digits, **numerals.words}
    if not values or not numerals.counters:
        return None
    token = f"(?:{_alternation(set(values) | set(numerals.scales))})"
    start = r"(?<![^\W\d_])"  # a run starts a word: "하세요" holds no 세
    # ... and its counter ends the word, particles aside: "2명이요", never the name "이명수".
    tail = rf"(?:{_alternation(particles)})*(?:[^\w]|$)" if particles else r"(?:[^\w]|$)"
    counted = re.compile(rf"{start}({token}+)(?=\s?(?:{_alternation(numerals.counters)}){tail})")
    alone = re.compile(rf"{start}((?:{_alternation(numerals.alone)})+)(?={tail})") \
        if numerals.alone else re.compile(r"(?!x)x")
    spaced = [r"\s?".join(re.escape(part) for part in w.split()) for w in numerals.not_numbers]
    not_numbers = re.compile("|".join(spaced)) if spaced else None
    return _Compiled(values, frozenset(numerals.words), dict(numerals.scales), counted, alone, not_numbers)


def value_of(run: str, values: dict[str, int], scales: dict[str, int],
             words: frozenset[str] = frozenset()) -> int | None:
    """The number a run of number words says: 열두 12, 스물세 23, 이십오 25, 삼만 30000. A run
    is all adding ``words`` or all digits and scales, never both."""
    tokens = re.findall(_alternation(set(values) | set(scales)), run)
    if "".join(tokens) != run:
        return None
    if len({word in words for word in tokens}) > 1:  # native and Sino-Korean mixed: a name, "오세일"
        return None
    total, current = 0, 0
    for word in tokens:
        if word in scales:
            scale = scales[word]
            if scale >= 10000:
                total, current = (total + (current or 1)) * scale, 0
            else:
                total, current = total + (current or 1) * scale, 0
        else:
            current += values[word]
    return total + current


def numerals_to_digits(text: str, language: str) -> str:
    """``text`` with its counted and lone number words as digits ("네 명" -> "4 명"), by the
    language's pack; unchanged for a pack without numerals."""
    compiled = _compiled(language)
    if compiled is None:
        return text
    kept = [m.span() for m in compiled.not_numbers.finditer(text)] if compiled.not_numbers else []

    def digits(match: re.Match[str]) -> str:
        if any(start <= match.start() < end for start, end in kept):
            return match[0]
        number = value_of(match[1], compiled.values, compiled.scales, compiled.words)
        return match[0] if number is None else str(number)

    return compiled.alone.sub(digits, compiled.counted.sub(digits, text))
