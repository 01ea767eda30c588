"""Caller's words to typed values, by well-kept libraries rather than the model.

A 1.5B model copies the words a caller said for a field well enough; turning
"the day after tomorrow", "half past seven" or "four of us" into 2030-01-09,
19:30 and 4 is work for a parser that is never creative. Numbers written as
words go through ``text_to_num`` (text2num), dates through ``parsedatetime``
with the few phrases it gets wrong handled first. Every function returns None
when the words do not hold a value of its kind: code then asks again.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from typing import Any

import parsedatetime
import snowballstemmer
from text_to_num import alpha2digit

from voicebot.brain.read import pack_values
from voicebot.brain.read.clock import clock, next_day_of_month, shifted

_CALENDAR = parsedatetime.Calendar(version=parsedatetime.VERSION_CONTEXT_STYLE)
# Other forms of a choice's words ("coloured", "trims"): the Snowball stemmer, not a suffix list.
_STEMMER = snowballstemmer.stemmer("english")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december")
# A day of the month said as one: "the 12th", "on 3rd", or the ordinal alone as the whole answer
# ("Twelfth."); an ordinal inside other words is not a day ("one thing first: ...").
_ORDINAL_DAY = re.compile(r"\b(?:the|on)\s+(\d{1,2})(?:st|nd|rd|th)\b(?!\s+of\s+\w+)"
                          r"|^\W*(\d{1,2})(?:st|nd|rd|th)\W*$")
_ORDINAL_ALONE = re.compile(r"\b\d{1,2}(?:st|nd|rd|th)\b(?!\s+of\s+\w+)")  # judged by _ORDINAL_DAY
_WEEKDAY = re.compile(r"\b(" + "|".join(_WEEKDAYS) + r")s?\b")
_NEXT_WEEKDAY = re.compile(r"\bnext\s+(" + "|".join(_WEEKDAYS) + r")\b")
_DATE_WORDS = re.compile(r"\b(?:today|tonight|tomorrow|day after tomorrow|weekend|" + "|".join(_WEEKDAYS) +
                         "|" + "|".join(_MONTHS) + r"|next week|\d{4}-\d{2}-\d{2}|\d{1,2}(?:st|nd|rd|th))\b")
_ORDINAL_WORDS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
    "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
    "twentieth": 20, "thirtieth": 30}


def digits(text: str, language: str = "en") -> str:
    """Numbers written as words as digits ("a table for four" -> "a table for 4"); single small
    numbers too, which text2num leaves as words by default. A language whose pack reads its own
    numbers by its numerals ("두 명" -> "2 명")."""
    if pack_values.reads_values(language):
        return pack_values.digits(text, language)
    text = re.sub(r"\btwenty[- ](first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)\b",
                  lambda m: f"{20 + _ORDINAL_WORDS[m[1]]}th", text, flags=re.I)
    text = re.sub(r"\bthirty[- ]first\b", "31st", text, flags=re.I)
    text = re.sub(r"\b(" + "|".join(_ORDINAL_WORDS) + r")\b",
                  lambda m: f"{_ORDINAL_WORDS[m[1].lower()]}th", text, flags=re.I)
    return alpha2digit(text, "en", threshold=0)


# ---- dates ------------------------------------------------------------------
def parse_date(text: str, today: dt.date, language: str = "en") -> dt.date | None:
    """A day the caller means, today or later: "tomorrow", "Friday", "next Friday", "the 12th",
    "December 12th", "2030-01-09". A weekday is the nearest one, today included."""
    if pack_values.reads_values(language):
        return pack_values.parse_date(text, today, language)
    words = digits(text.lower().replace("’", "'"))
    if not _DATE_WORDS.search(_ORDINAL_ALONE.sub(" ", words)) and not _ORDINAL_DAY.search(words):
        return None
    if iso := re.search(r"\b(\d{4})-(\d{2})-(\d{2})\b", words):
        try:
            return dt.date(int(iso[1]), int(iso[2]), int(iso[3]))
        except ValueError:
            return None
    if re.search(r"\b(?:the|this|next) weekend\b", words):  # its Saturday
        return today + dt.timedelta(days=(5 - today.weekday()) % 7)
    if re.search(r"\bday after tomorrow\b", words):
        return today + dt.timedelta(days=2)
    if re.search(r"\b(?:today|tonight)\b", words):
        return today
    if re.search(r"\btomorrow\b", words):
        return today + dt.timedelta(days=1)
    if nxt := _NEXT_WEEKDAY.search(words):
        ahead = (_WEEKDAYS.index(nxt[1]) - today.weekday()) % 7 or 7
        return today + dt.timedelta(days=ahead)
    month = next((m for m in _MONTHS if re.search(rf"\b{m[:3]}\w*\b", words)), None)
    if month is None and (day := _ORDINAL_DAY.search(words)):
        return next_day_of_month(int(day[1] or day[2]), today)
    if month is None and (weekday := _WEEKDAY.search(words)):
        return today + dt.timedelta(days=(_WEEKDAYS.index(weekday[1]) - today.weekday()) % 7)
    parsed, flag = _CALENDAR.parseDT(words, dt.datetime.combine(today, dt.time(12)))
    if not flag:
        return None
    day = parsed.date()
    if day < today:  # "December 2nd" said in late December means next year's
        try:
            day = day.replace(year=day.year + 1)
        except ValueError:
            return None
    return day


# ---- times --------------------------------------------------------------------
_TIME = re.compile(
    r"\b(\d{1,2})(?:(?::|\s|\.)([0-5]\d))?\s*(a\.?\s?m\.?|p\.?\s?m\.?|o'?clock|in the morning|"
    r"in the afternoon|in the evening|at night|tonight)?(?=\W|$)")
_HALF_PAST = re.compile(r"\bhalf\s+past\s+(\d{1,2})\b")
_QUARTER = re.compile(r"\bquarter\s+(past|to)\s+(\d{1,2})\b")
_NOON = re.compile(r"\b(noon|midday|midnight)\b")
# Durations are no clock times; a number field's counted words ("4 people") are taken out before
# a time is read (``numbers.without_numbers``).
_NOT_TIMES = re.compile(r"\b(\d{1,2})\s+(?:minutes|hours|days|weeks)\b")


def parse_time(text: str, between: Sequence[str] | None = None, language: str = "en",
               bare: bool = True) -> str | None:
    """A clock time as "HH:MM": "seven pm", "7:30", "half past seven", "seven thirty", "noon".
    An hour without am or pm is read inside ``between`` (the business's hours, "HH:MM" pair)
    when one of the two readings falls there; otherwise 1-6 is afternoon and 7-11 morning.
    ``bare``: a number alone is an hour (the answer to "at what time?", not to "how many?")."""
    if pack_values.reads_values(language):
        return pack_values.parse_time(text, between, language, bare)
    words = _NOT_TIMES.sub(" ", digits(text.lower().replace("’", "'")))
    if noon := _NOON.search(words):
        return "00:00" if noon[1] == "midnight" else "12:00"
    if half := _HALF_PAST.search(words):
        return _clock(int(half[1]), 30, _suffix_after(words, half.end()), between)
    if quarter := _QUARTER.search(words):
        hour = int(quarter[2]) - (1 if quarter[1] == "to" else 0)
        return _clock(hour, 15 if quarter[1] == "past" else 45, _suffix_after(words, quarter.end()), between)
    for match in _TIME.finditer(words):
        hour, minute, suffix = int(match[1]), int(match[2] or 0), (match[3] or "")
        if not suffix and match[2] is None and not _time_context(words, match.start(), bare):
            continue  # a bare number ("for 4") is no time unless "at" or "around" comes before it
        if hour <= 24:
            return _clock(hour, minute, suffix, between)
    return None


def _time_context(words: str, start: int, bare: bool) -> bool:
    before = words[:start].split()[-1:] or [""]
    return before[0] in {"at", "around", "about", "by", "after", "before", "from", "till", "until"} \
        or (bare and words.strip() == words[start:].strip())  # the whole answer is the number


def _suffix_after(words: str, end: int) -> str:
    match = re.match(r"\s*(a\.?\s?m\.?|p\.?\s?m\.?|in the morning|in the afternoon|in the evening|tonight)",
                     words[end:])
    return match[1] if match else ""


def _clock(hour: int, minute: int, suffix: str, between: Sequence[str] | None) -> str | None:
    suffix = suffix.replace(".", "").replace(" ", "")
    if suffix.startswith("pm") or suffix in ("intheafternoon", "intheevening", "atnight", "tonight"):
        return clock(hour, minute, "pm", between)
    if suffix.startswith("am") or suffix == "inthemorning":
        return clock(hour, minute, "am", between)
    return clock(hour, minute, "", between)


# ---- numbers, names, choices -----------------------------------------------------
def parse_integer(text: str, language: str = "en") -> int | None:
    """The one number in the words: "four", "we are 4", "about 30 thousand" (what a field's number
    means in other words, "just me", is the field's own: ``numbers.py``)."""
    if pack_values.reads_values(language):
        return pack_values.parse_integer(text, language)
    words = digits(text.lower())
    found = re.findall(r"(?<![\d:])\d{1,7}(?![\d:])", words)
    return int(found[0]) if len(found) == 1 else None


_NAME_LEAD = re.compile(
    r"^(?:(?:yes|yeah|sure|okay|ok|so|well|um|uh)[,.]?\s+)*(?:(?:it's|it is|its|my name is|my name's|"
    r"the name is|name is|the name's|this is|i'm|i am|under|call me|put it under|under the name|"
    r"book it under|for)\s+)+", re.I)
_NOT_A_NAME = re.compile(
    r"\b(?:book|reserv|appointment|tomorrow|today|pm|am|o'clock|what|when|how|why|where|"
    r"yes|no|cancel|change|don't|do not|sorry|please|help|looking|calling|just|not|here|good|fine|"
    r"hoping|trying|wondering|interested|afraid|sure|okay|ok|well|great|thanks|thank|then|instead|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|tonight|morning|evening|noon)\b|\d|\?",
    re.I)


def parse_name(text: str, not_names: frozenset[str] = frozenset(), language: str = "en") -> str | None:
    """A person's name from an answer to "under what name?": "It's Jordan Blake." -> "Jordan
    Blake". At most four words, no digits, nothing that reads as a request or a question, and
    none of ``not_names`` (the business's own words: "A table, please.")."""
    if pack_values.reads_values(language):
        return pack_values.parse_name(text, not_names, language)
    name = _NAME_LEAD.sub("", text.strip()).strip(" .,!")
    name = re.sub(r"\s*,?\s*(?:please|thanks|thank you)$", "", name, flags=re.I).strip(" .,!")
    words = name.split()
    if not 1 <= len(words) <= 4 or _NOT_A_NAME.search(name):
        return None
    if any(w.lower().strip(".,!?'") in not_names for w in words):
        return None
    return " ".join(w[:1].upper() + w[1:] for w in words)


def match_choice(text: str, choices: Sequence[str]) -> str | None:
    """The one allowed value the words name (case and spacing aside; another form of the same
    word too: "coloured" names "colour", "trims" names "trim"); None for none or several."""
    exact, stems = _named(_plain_words(text), choices, _plain_words), _named(_stems(text), choices, _stems)
    found = list(dict.fromkeys([*exact, *stems]))
    if len(found) > 1:  # "beard trim" also names "trim": the longest wins when it holds the others
        longest = max(found, key=len)
        if all(c.lower() in longest.lower() for c in found):
            return longest
        return None
    return found[0] if found else None


def _plain_words(text: str) -> str:
    return " " + " ".join(re.sub(r"[^\w]+", " ", text.lower()).split()) + " "


def _stems(text: str) -> str:
    return " " + " ".join(_STEMMER.stemWords(_plain_words(text).split())) + " "


def _named(words: str, choices: Sequence[str], form: Callable[[str], str]) -> list[str]:
    """The choices among the words; one in a script whose words take particles may start a word
    ("커트로" names "커트")."""
    return [c for c in choices if c and (form(c) in words or (not c.isascii() and form(c).rstrip() in words))]


def plain_text(text: str, limit: int = 200) -> str | None:
    text = " ".join(text.split()).strip(" .")
    return text[:limit] if text else None


def normalise(kind: str, text: Any, *, today: dt.date, between: Sequence[str] | None = None,
              choices: Sequence[str] = (), not_names: frozenset[str] = frozenset(),
              language: str = "en") -> Any:
    """The value of ``kind`` in ``text`` (a caller's words or the model's copy of them), or None."""
    if text is None:
        return None
    if isinstance(text, bool | int | float) and kind in ("integer", "number"):
        return int(text) if kind == "integer" else text
    text = str(text).strip()
    if not text or text.lower() in ("null", "none", "unknown", "n/a"):
        return None
    if choices:
        return match_choice(text, choices)
    if kind == "date":
        day = parse_date(text, today, language)
        return day.isoformat() if day else None
    if kind == "time":
        return parse_time(text, between, language)
    if kind in ("integer", "number"):
        return parse_integer(text, language)
    if kind == "name":
        return parse_name(text, not_names, language)
    return plain_text(text)


# ---- changes relative to what was read back --------------------------------------
_LATER = re.compile(r"\b(?:(an?|one|two|half an?)\s+hours?\s+|(\d{1,3})\s+minutes\s+|a\s+(?:little|bit)\s+"
                    r"(?:bit\s+)?|slightly\s+)?(later|earlier)\b")
_PUSH = re.compile(r"\b(?:(push|put|move)\s+(?:it|that|the\s+\w+)?\s*back|(bring|move)\s+(?:it|that|"
                   r"the\s+\w+)?\s*forward)\b")
_DAY_AFTER = re.compile(r"\b(?:the\s+(?:day|night)\s+after|the\s+next\s+day|a\s+day\s+later)\b")
_DAY_BEFORE = re.compile(r"\b(?:the\s+(?:day|night)\s+before|a\s+day\s+earlier)\b")


def relative_change(kind: str, text: str, current: Any, language: str = "en") -> Any:
    """A value relative to the one read back: "a little later" (+30 min), "an hour earlier",
    "the day after" (+1 day); a number field's change is its own (``numbers.number_change``). None
    when the words say no such change."""
    if pack_values.reads_values(language):
        return pack_values.relative_change(kind, text, current, language)
    words = digits(text.lower().replace("’", "'"))
    if kind == "time" and isinstance(current, str) and re.fullmatch(r"\d{2}:\d{2}", current):
        minutes = _shift_minutes(words)
        if minutes is not None and (moved := shifted(current, minutes)) is not None:
            return moved
    if kind == "date" and isinstance(current, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", current):
        step = 1 if _DAY_AFTER.search(words) else -1 if _DAY_BEFORE.search(words) else 0
        if step:
            return (dt.date.fromisoformat(current) + dt.timedelta(days=step)).isoformat()
    return None


def _shift_minutes(words: str) -> int | None:
    if re.search(r"\bcall\b", words):  # "I'll call back later" moves nothing
        return None
    if shift := _LATER.search(words):
        amount, minutes = shift[1], shift[2]
        size = 30
        if minutes:
            size = int(minutes)
        elif amount and "half" not in amount:
            size = 120 if amount == "two" else 60
        return size if shift[3] == "later" else -size
    if push := _PUSH.search(words):
        size = 60 if re.search(r"\b(?:an?|one)\s+hour\b", words) and "half" not in words else 30
        return size if push[1] else -size
    return None
