"""Sentences code speaks about an action, built from its arguments (never the model's words).

A template names fields: ``{people}``, ``{slot_id}``. Values are put in
spoken form: an ISO date reads "Friday, December 4th", ``19:30`` reads
"7:30 pm", a reference reads as its label. ``{field:date}`` / ``{field:time}``
force the form. Without a template, the read-back is the tool's title and its
arguments ("open a ticket with summary printer broken and priority high").
A language pack's ``speak`` says values its own way ("12월 4일 금요일", "오후 7시 30분");
English's forms are the default.
"""

from __future__ import annotations

import datetime
import re
import string
from collections.abc import Mapping
from typing import Any

from voicebot.brain.lang import Speak, pack_or_default

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HHMM = re.compile(r"^\d{1,2}:\d{2}$")


def ordinal_suffix(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _speak(language: str) -> Speak:
    return pack_or_default(language).speak


def spoken_date(text: str, weekday: bool = True, language: str = "en") -> str:
    try:
        day = datetime.date.fromisoformat(text)
    except ValueError:
        return text
    speak = _speak(language)
    if speak.date:
        template = speak.date if weekday else (speak.date_without_weekday or speak.date)
        named = speak.weekdays[day.weekday()] if len(speak.weekdays) == 7 else ""
        return template.format(year=day.year, month=day.month, day=day.day, weekday=named).strip()
    prefix = f"{day.strftime('%A')}, " if weekday else ""
    return f"{prefix}{day.strftime('%B')} {day.day}{ordinal_suffix(day.day)}"


def spoken_time(text: str, language: str = "en") -> str:
    try:
        clock = datetime.time.fromisoformat(text if len(text) == 5 else f"0{text}")
    except ValueError:
        return text
    hour = clock.hour % 12 or 12
    speak = _speak(language)
    if speak.time:
        template = speak.time_with_minutes if clock.minute and speak.time_with_minutes else speak.time
        period = speak.pm if clock.hour >= 12 else speak.am
        return template.format(period=period, hour=hour, minute=clock.minute).strip()
    minutes = f":{clock.minute:02d}" if clock.minute else ""
    return f"{hour}{minutes} {'pm' if clock.hour >= 12 else 'am'}"


def spoken_value(value: Any, language: str = "en") -> str:
    speak = _speak(language)
    if isinstance(value, bool):
        return (speak.yes or "yes") if value else (speak.no or "no")
    if isinstance(value, list):
        return join_words([spoken_value(v, language) for v in value], language)
    text = str(value)
    if _ISO_DATE.match(text):
        return spoken_date(text, language=language)
    if _HHMM.match(text):
        return spoken_time(text, language)
    return text


def join_words(items: list[str], language: str = "en", either: bool = False) -> str:
    """"a, b and c" (``either``: "a, b or c") in the language's words."""
    items = [i for i in items if i]
    if len(items) <= 1:
        return "".join(items)
    speak = _speak(language)
    last = (speak.list_or or " or ") if either else (speak.list_and or " and ")
    return ", ".join(items[:-1]) + last + items[-1]


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return ""


class SpokenFormatter(string.Formatter):
    def __init__(self, language: str = "en") -> None:
        self.language = language

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "date":
            return spoken_date(str(value), weekday=False, language=self.language)
        if format_spec == "weekday_date":
            return spoken_date(str(value), language=self.language)
        if format_spec == "time":
            return spoken_time(str(value), self.language)
        if format_spec:
            return super().format_field(value, format_spec)
        return spoken_value(value, self.language)


def render(template: str, values: Mapping[str, Any], language: str = "en") -> str:
    """Fill a template; a missing field reads as nothing rather than failing the turn."""
    text = SpokenFormatter(language).vformat(template, (), _Blank(values))
    return re.sub(r"\s+([,.])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()


def field_names(template: str) -> set[str]:
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


def default_action(title: str, args: Mapping[str, Any], entities: frozenset[str] = frozenset()) -> str:
    """A read-back from the tool's title and its arguments in spoken form: "close a ticket for
    your ticket about a broken monitor", "open a ticket with summary printer jam and priority high"."""
    phrase = title.strip().rstrip(".")
    phrase = phrase[:1].lower() + phrase[1:]
    named = [f"for {spoken_value(v)}" for k, v in args.items() if k in entities and v not in (None, "")]
    parts = [f"{name.replace('_', ' ')} {spoken_value(value)}" for name, value in args.items()
             if name not in entities and value not in (None, "", [])]
    return " ".join(filter(None, [phrase, *named, f"with {join_words(parts)}" if parts else ""]))


def sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] if text else text
