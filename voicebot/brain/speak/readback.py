"""Sentences code speaks about an action, built from its arguments (never the model's words).

A template names fields: ``{people}``, ``{slot_id}``. Values are put in
spoken form: an ISO date reads "Friday, December 4th", ``19:30`` reads
"7:30 pm", a reference reads as its label. ``{field:date}`` / ``{field:time}``
force the form. Without a template, the read-back is the tool's title and its
arguments ("open a ticket with summary printer broken and priority high").
Every form is the language pack's ``speak`` ("Friday, December 4th", "12월 4일 금요일"; "7:30 pm",
"오후 7시 30분"); a pack without one says the value as English's pack does.
"""

from __future__ import annotations

import datetime
import re
import string
from collections.abc import Mapping
from typing import Any

from voicebot.brain.lang import Speak, english, pack_or_default

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HHMM = re.compile(r"^\d{1,2}:\d{2}$")


def _speak(language: str) -> Speak:
    return pack_or_default(language).speak


def _form(language: str, *names: str) -> tuple[Speak, list[str]]:
    """The pack's forms of these names, or English's where the pack has none of them."""
    speak = _speak(language)
    if not all(getattr(speak, name) for name in names):
        speak = english().speak
    return speak, [getattr(speak, name) for name in names]


def ordinal(n: int, speak: Speak) -> str:
    """The ending of an ordinal by the pack's ``ordinals``: 1st, 11th, 22nd."""
    ordinals = speak.ordinals
    return ordinals.get(str(n % 100), ordinals.get(str(n % 10), ordinals.get("other", "")))


def spoken_date(text: str, weekday: bool = True, language: str = "en") -> str:
    try:
        day = datetime.date.fromisoformat(text)
    except ValueError:
        return text
    speak, (with_weekday,) = _form(language, "date")
    template = with_weekday if weekday else (speak.date_without_weekday or with_weekday)
    named = speak.weekdays[day.weekday()] if len(speak.weekdays) == 7 else ""
    month = speak.months[day.month - 1] if len(speak.months) == 12 else str(day.month)
    return template.format(year=day.year, month=day.month, month_name=month, day=day.day,
                           weekday=named, ordinal=ordinal(day.day, speak)).strip()


def spoken_time(text: str, language: str = "en") -> str:
    try:
        clock = datetime.time.fromisoformat(text if len(text) == 5 else f"0{text}")
    except ValueError:
        return text
    speak, (plain,) = _form(language, "time")
    template = speak.time_with_minutes if clock.minute and speak.time_with_minutes else plain
    period = speak.pm if clock.hour >= 12 else speak.am
    return template.format(period=period, hour=clock.hour % 12 or 12, minute=clock.minute).strip()


def spoken_value(value: Any, language: str = "en") -> str:
    if isinstance(value, bool):
        _, (yes, no) = _form(language, "yes", "no")
        return yes if value else no
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
    _, (last,) = _form(language, "list_or" if either else "list_and")
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


def default_action(title: str, args: Mapping[str, Any], entities: frozenset[str] = frozenset(),
                   language: str = "en") -> str:
    """A read-back from the tool's title and its arguments in spoken form: "close a ticket for
    your ticket about a broken monitor", "open a ticket with summary printer jam and priority high"."""
    _, (named_as, with_values, each) = _form(language, "action_for", "action_with", "action_value")
    phrase = title.strip().rstrip(".")
    phrase = phrase[:1].lower() + phrase[1:]
    named = [named_as.format(value=spoken_value(v, language)) for k, v in args.items()
             if k in entities and v not in (None, "")]
    parts = [each.format(name=name.replace("_", " "), value=spoken_value(value, language))
             for name, value in args.items() if name not in entities and value not in (None, "", [])]
    values = with_values.format(values=join_words(parts, language)) if parts else ""
    return " ".join(filter(None, [phrase, *named, values]))


def sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] if text else text
