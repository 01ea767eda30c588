"""A value taken back in the same breath: "not Wednesday but Thursday", "at seven, no wait, at
eight", "세 명 말고 네 명", "금요일이 아니라 토요일".

The words that take a value back are the language pack's (``corrections``): some follow the
value they take back ("말고", "no wait"), some come before it ("not"). The value taken back is
dropped, and the value said instead is read as the same field, even when it is said bare
("not two people, three"); another value of the same clause that is not said again stands
("Friday at 8, no wait, at 9" is still Friday); where none is said instead ("not Friday"), the
field has no value and code asks again. Words that take back no value ("I'm not sure") are read
as they were said, and free words are never taken back ("my laptop will not start").
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from voicebot.brain.lang import pack_or_default

# (words, the field code asked for) -> the values the rules read in them
ReadValues = Callable[[str, str], dict[str, Any]]
_CLAUSE_END = re.compile(r"[,;.!?—–]")
_BARE_AT_MOST = 4  # words: a value said bare after a correction ("three", "at eight") is short


@dataclass(frozen=True)
class _Markers:
    after_value: re.Pattern[str] | None  # "세 명 말고": follows what it takes back
    before_value: re.Pattern[str] | None  # "not two": comes before it
    instead: re.Pattern[str] | None  # "not Wednesday but Thursday": ends what "not" took back


@dataclass(frozen=True)
class _Correction:
    taken_back: str  # the words whose value the caller took back
    left: str  # every other word of the turn
    said_instead: str  # the words after the correction: where a bare new value is


@functools.cache
def _markers(language: str) -> _Markers:
    pack = pack_or_default(language)
    words = pack.corrections

    def compiled(phrases: list[str]) -> re.Pattern[str] | None:
        return re.compile(pack.word(pack.phrases(phrases)), re.I) if phrases else None

    return _Markers(compiled(words.after_value), compiled(words.before_value), compiled(words.instead))


def corrected_values(text: str, language: str, asking: str, read: ReadValues,
                     correctable: frozenset[str]) -> dict[str, Any]:
    """The values the words give, without any value the caller took back: the one said instead,
    if any, in its place. The words are read as they are where they take back no value.
    ``correctable``: the fields whose values can be taken back: dates, times, numbers and choices,
    never free words ("my laptop will not start" takes nothing back)."""

    def typed(words: str) -> dict[str, Any]:
        return {name: value for name, value in read(words, asking).items() if name in correctable}

    for correction in _corrections(text, language, typed):
        taken_back = typed(correction.taken_back)
        if not taken_back:
            continue
        values = read(correction.left, asking)
        focus = next(iter(taken_back)) if len(taken_back) == 1 else ""
        if focus and focus not in values and len(correction.said_instead.split()) <= _BARE_AT_MOST:
            values.update({k: v for k, v in read(correction.said_instead, focus).items() if k == focus})
        if any(name in values for name in taken_back):  # "Friday at 8, no wait, at 9": still Friday
            return {**taken_back, **values}
        return values  # "Not Friday.": nothing said instead, so no day, and code asks again
    return read(text, asking)


def _corrections(text: str, language: str, typed: Callable[[str], dict[str, Any]]) -> list[_Correction]:
    """The places in the words where a value may have been taken back, the pack's words that
    follow a value first."""
    markers = _markers(language)
    found = [_after_value(text, markers.after_value, typed), _before_value(text, markers)]
    return [correction for correction in found if correction is not None]


def _after_value(text: str, marker: re.Pattern[str] | None,
                 typed: Callable[[str], dict[str, Any]]) -> _Correction | None:
    """"세 명이요, 아 아니다 네 명이요": the last such word takes back the last clause before it
    that holds a value."""
    said = list(marker.finditer(text)) if marker is not None else []
    if not said or (taken := _clause_before(text[:said[-1].start()], typed)) is None:
        return None
    start, end = taken
    after = text[said[-1].end():]
    return _Correction(text[start:end], _joined(text[:start], after), _joined(after))


def _before_value(text: str, markers: _Markers) -> _Correction | None:
    """"Not Wednesday but Thursday": the first such word takes back what follows it, up to the
    clause's end or the pack's ``instead`` word."""
    first = markers.before_value.search(text) if markers.before_value is not None else None
    if first is None:
        return None
    rest = text[first.end():]
    ends = [m.start() for m in (_CLAUSE_END.search(rest),
                                markers.instead.search(rest) if markers.instead is not None else None) if m]
    end = min(ends, default=len(rest))
    return _Correction(rest[:end], _joined(text[:first.start()], rest[end:]), _joined(rest[end:]))


def _joined(*parts: str) -> str:
    """Words around a correction as one sentence: no comma left hanging before or after them."""
    return " ".join(tidy for part in parts if (tidy := part.strip(" ,;.!?—–")))


def _clause_before(head: str, typed: Callable[[str], dict[str, Any]]) -> tuple[int, int] | None:
    """Where in the words before a correction the value it takes back is: the last clause
    (between commas or stops) that holds a value ("세 명이요, 아 아니다": "세 명이요")."""
    bounds = [0] + [m.end() for m in _CLAUSE_END.finditer(head)] + [len(head)]
    for start, end in reversed(list(itertools.pairwise(bounds))):
        if head[start:end].strip() and typed(head[start:end]):
            return start, end
    return None
