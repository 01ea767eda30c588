"""Dates, times and numbers read by a language pack's words (``values`` in ``lang/<code>.yaml``).

For a language no library reads (Korean: "내일 저녁 7시", "다음 주 금요일", "두 명", "12월
25일"), the pack names the words and the shapes ("{h}시", "{m}월 {d}일") and this module
reads them; nothing here is a word of any language. Number words become digits first
(``numerals.py``). Every function returns None when the words hold no value of its kind.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from voicebot.brain.lang import Values, language_pack
from voicebot.brain.read.clock import clock, next_day_of_month, shifted, this_year_or_next
from voicebot.brain.read.numerals import numerals_to_digits

_NEVER = re.compile(r"(?!x)x")


def _phrases(words: Sequence[str]) -> re.Pattern[str]:
    """Any of the phrases, longest first; a space in one may be left out ("다음주")."""
    ordered = sorted({w.strip().lower() for w in words if w.strip()}, key=len, reverse=True)
    return re.compile("|".join(r"\s*".join(re.escape(p) for p in w.split()) for w in ordered)) \
        if ordered else _NEVER


def _shape(template: str) -> re.Pattern[str]:
    """"{m}월 {d}일" as a pattern: each {name} a number, spaces optional around the words."""
    if not template:
        return _NEVER
    parts = re.split(r"(\{\w+\})", template.strip())
    pattern = r"\s*".join(rf"(?P<{p[1:-1]}>\d{{1,4}})" if p.startswith("{") else
                          r"\s*".join(re.escape(w) for w in p.split()) for p in parts if p.strip())
    return re.compile(pattern)


@dataclass(frozen=True)
class _Shapes:
    read: Values
    days: tuple[tuple[re.Pattern[str], int], ...]
    weekday: re.Pattern[str]
    next_week: re.Pattern[str]
    this_week: re.Pattern[str]
    weekend: re.Pattern[str]
    day_of_month: re.Pattern[str]
    month_day: re.Pattern[str]
    clock_time: re.Pattern[str]
    noon: re.Pattern[str]
    midnight: re.Pattern[str]
    not_times: tuple[re.Pattern[str], ...]
    later: re.Pattern[str]
    earlier: re.Pattern[str]
    hours: re.Pattern[str]
    minutes: re.Pattern[str]
    day_after: re.Pattern[str]
    day_before: re.Pattern[str]
    bare: re.Pattern[str]


@functools.cache
def _shapes(language: str) -> _Shapes | None:
    read = language_pack(language).values
    if read is None:
        return None
    dates, times, changes = read.dates, read.times, read.changes
    halves = "|".join(p.pattern for p in (_phrases(times.am), _phrases(times.pm)) if p is not _NEVER)
    hour = _shape(times.hour).pattern.replace("(?P<h>", "(?P<hour>")
    minutes = _shape(times.minutes).pattern.replace("(?P<m>", "(?P<minute>")
    half_hour = _phrases(times.half).pattern
    clock_time = rf"(?:(?P<half>{halves})\s*)?{hour}(?:\s*(?:{minutes}|(?P<thirty>{half_hour})))?" \
        if times.hour else r"(?!x)x"
    particles = _phrases(read.particles).pattern
    return _Shapes(
        read=read,
        days=tuple(sorted(((_phrases([w]), n) for w, n in dates.days.items()),
                          key=lambda day: -len(day[0].pattern))),
        weekday=re.compile("|".join(f"({re.escape(w)})" for w in dates.weekdays))
        if dates.weekdays else _NEVER,
        next_week=_phrases(dates.next_week), this_week=_phrases(dates.this_week),
        weekend=_phrases(dates.weekend),
        day_of_month=_shape(dates.day_of_month), month_day=_shape(dates.month_day),
        clock_time=re.compile(clock_time), noon=_phrases(times.noon), midnight=_phrases(times.midnight),
        not_times=tuple(_shape(t) for t in times.not_times),
        later=_phrases(changes.later), earlier=_phrases(changes.earlier),
        hours=_shape(changes.hours), minutes=_shape(changes.minutes),
        day_after=_phrases(changes.day_after), day_before=_phrases(changes.day_before),
        bare=re.compile(rf"\W*(\d{{1,2}})\s*(?:{particles})?\W*" if read.particles else r"\W*(\d{1,2})\W*"))


def reads_values(language: str) -> bool:
    """Whether the language's pack reads its own values (else the libraries do)."""
    return _shapes(language) is not None


def digits(text: str, language: str) -> str:
    return numerals_to_digits(text.lower(), language)


def parse_date(text: str, today: dt.date, language: str) -> dt.date | None:
    """A day the caller means, today or later: "내일", "다음 주 금요일", "25일", "12월 25일"."""
    shapes = _shapes(language)
    if shapes is None:
        return None
    words = digits(text, language)
    if iso := re.search(r"\b(\d{4})-(\d{2})-(\d{2})\b", words):
        try:
            return dt.date(int(iso[1]), int(iso[2]), int(iso[3]))
        except ValueError:
            return None
    if said := shapes.month_day.search(words):
        return this_year_or_next(int(said["m"]), int(said["d"]), today)
    if weekday := shapes.weekday.search(words):
        return _weekday(weekday.lastindex - 1, words[:weekday.start()], today, shapes)
    if shapes.weekend.search(words):
        return today + dt.timedelta(days=(5 - today.weekday()) % 7)
    for phrase, ahead in shapes.days:
        if phrase.search(words):
            return today + dt.timedelta(days=ahead)
    if said := shapes.day_of_month.search(words):
        return next_day_of_month(int(said["d"]), today)
    return None


def _weekday(index: int, before: str, today: dt.date, shapes: _Shapes) -> dt.date:
    monday = today - dt.timedelta(days=today.weekday())
    if shapes.next_week.search(before):
        return monday + dt.timedelta(days=7 + index)
    if shapes.this_week.search(before) and monday + dt.timedelta(days=index) >= today:
        return monday + dt.timedelta(days=index)
    return today + dt.timedelta(days=(index - today.weekday()) % 7)


def parse_time(text: str, between: Sequence[str] | None, language: str, bare: bool = True) -> str | None:
    """A clock time as "HH:MM": "저녁 7시", "오후 3시 30분", "7시 반", "19:30", "정오"; an hour
    without a morning or evening word is read inside ``between`` (the business's hours)."""
    shapes = _shapes(language)
    if shapes is None:
        return None
    words = digits(text, language)
    for duration in shapes.not_times:
        words = duration.sub(" ", words)
    if shapes.noon.search(words):
        return "12:00"
    if shapes.midnight.search(words):
        return "00:00"
    if said := re.search(r"\b(\d{1,2}):([0-5]\d)\b", words):
        return clock(int(said[1]), int(said[2]), _half(words[:said.start()], shapes), between)
    if said := shapes.clock_time.search(words):
        minute = 30 if said["thirty"] else int(said["minute"] or 0)
        return clock(int(said["hour"]), minute, _half(said["half"] or "", shapes), between)
    if bare and (alone := shapes.bare.fullmatch(words)):  # the whole answer is the hour
        return clock(int(alone[1]), 0, "", between)
    return None


def _half(words: str, shapes: _Shapes) -> str:
    """"am", "pm" or "" for the word said just before an hour ("오후 3시", "저녁 7:30")."""
    last = words.split()[-1] if words.split() else ""
    times = shapes.read.times
    return "am" if last in times.am else "pm" if last in times.pm else ""


def parse_integer(text: str, language: str) -> int | None:
    """The one number in the words ("2명이요", "넷이요")."""
    found = re.findall(r"(?<![\d:])\d{1,7}(?![\d:])", digits(text, language))
    return int(found[0]) if len(found) == 1 else None


def relative_change(kind: str, text: str, current: object, language: str) -> str | None:
    """A value relative to the one read back: "조금 늦게" (+30 min), "1시간 일찍", "다음 날"."""
    shapes = _shapes(language)
    if shapes is None:
        return None
    words = digits(text, language)
    if kind == "time" and isinstance(current, str) and re.fullmatch(r"\d{2}:\d{2}", current):
        sign = 1 if shapes.later.search(words) else -1 if shapes.earlier.search(words) else 0
        if sign:
            hours, minutes = shapes.hours.search(words), shapes.minutes.search(words)
            size = (int(hours["n"]) * 60 if hours else 0) + (int(minutes["n"]) if minutes else 0)
            return shifted(current, sign * (size or 30))
    if kind == "date" and isinstance(current, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", current):
        step = 1 if shapes.day_after.search(words) else -1 if shapes.day_before.search(words) else 0
        if step:
            return (dt.date.fromisoformat(current) + dt.timedelta(days=step)).isoformat()
    return None


def parse_name(text: str, not_names: frozenset[str], language: str) -> str | None:
    """A person's name from an answer to "under what name?": the pack's leads ("제 이름은") and
    ends ("입니다", "으로 해주세요") taken off; at most four words, no digits, none of the
    business's words or the pack's words that are never a name."""
    names = language_pack(language).names
    name = text.strip().strip(" .,!?")
    if (lead := _phrases(names.leads).match(name.lower())) is not None:
        name = name[lead.end():].strip(" ,")
    ends = _phrases(names.ends).pattern
    if ends != _NEVER.pattern:
        name = re.sub(rf"(?:{ends})$", "", name).strip(" .,!")
    words = name.split()
    never = [w.lower() for w in [*names.not_names, *not_names]]
    counted = re.search(r"[\d?]", digits(name, language))  # "두 명이요" is a party, not a name
    if not 1 <= len(words) <= 4 or counted or any(w in name.lower() for w in never):
        return None
    if parse_date(name, dt.date.today(), language) is not None:  # "토요일로 해 주세요" is a day
        return None
    return name


def name_said(text: str, language: str) -> str | None:
    """The word said as a name inside a request: after one of the pack's leads ("제 이름은
    김민수") or before one of its follows ("김민수 이름으로")."""
    names = language_pack(language).names
    if (follows := _phrases(names.follows)) is not _NEVER and (said := re.search(
            rf"([^\W\d_]+)\s*(?:{follows.pattern})", text)):
        return said[1]
    if (leads := _phrases(names.leads)) is not _NEVER and (said := re.search(
            rf"(?:{leads.pattern})\s*([^\W\d_]+)", text)):
        return said[1]
    return None
