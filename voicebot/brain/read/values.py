"""Caller's words to typed values, by well-kept libraries rather than the model.

A 1.5B model copies the words a caller said for a field well enough; turning
"the day after tomorrow", "half past seven" or "four of us" into 2030-01-09,
19:30 and 4 is work for a parser that is never creative. Numbers written as
words go through ``text_to_num`` (text2num), dates through ``parsedatetime``
with the few phrases it gets wrong handled first. Every function returns None
when the words do not hold a value of its kind: code then asks again. The words
of those rules are the language pack's ``library_values`` and ``names`` (en.yaml).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import parsedatetime
import snowballstemmer
from text_to_num import alpha2digit

from voicebot.brain.lang import LanguagePack, pack_or_default
from voicebot.brain.read import pack_values
from voicebot.brain.read.clock import clock, next_day_of_month, shifted

_CALENDAR = parsedatetime.Calendar(version=parsedatetime.VERSION_CONTEXT_STYLE)
# Other forms of a choice's words ("coloured", "trims"): the Snowball stemmer, not a suffix list.
_STEMMER = snowballstemmer.stemmer("english")
_NONE = r"(?!x)x"  # no words: matches nothing


def _alternation(pack: LanguagePack, words: Sequence[str]) -> str:
    return pack.phrases(list(words))


def _spelled(words: Sequence[str]) -> str:
    """Phrases as said or as an STT writes them: a dot or an apostrophe may be left out, and a
    space may follow a dot ("a.m." is also "am", "a. m."; "o'clock" is also "oclock")."""
    def one(phrase: str) -> str:
        marks = {".": r"\.?\s?", "'": "'?"}
        pattern = "".join(marks.get(ch, re.escape(ch)) for ch in phrase.rstrip("."))
        return pattern + (r"\.?" if phrase.endswith(".") else "")

    ordered = sorted({" ".join(w.lower().split()) for w in words if w.strip()}, key=len, reverse=True)
    return "|".join(r"\s+".join(one(part) for part in phrase.split()) for phrase in ordered) or _NONE


def _indexed(words: Sequence[str]) -> str:
    """An alternation whose group ``w<i>`` tells which of ``words`` matched (``_index``), longest first."""
    ordered = sorted(enumerate(words), key=lambda said: len(said[1]), reverse=True)
    return "|".join(f"(?P<w{i}>{re.escape(w.lower())})" for i, w in ordered) or _NONE


def _index(match: re.Match[str]) -> int:
    return next(int(name[1:]) for name, said in match.groupdict().items() if name[0] == "w" and said)


def _said(table: dict[str, int], words: str) -> int:
    """The number ``table`` gives the phrase matched in ``words`` (spacing and commas aside)."""
    plain = {" ".join(k.lower().split()): v for k, v in table.items()}
    return plain[" ".join(words.lower().replace(",", " ").split())]


@dataclass(frozen=True)
class _Rules:
    """One language's ``library_values`` and name words as the patterns the rules below use."""
    pack: LanguagePack
    ordinals: dict[str, int]
    ordinal_word: re.Pattern[str]
    ordinal_compound: re.Pattern[str]
    date_words: re.Pattern[str]
    ordinal_day: re.Pattern[str]
    ordinal_alone: re.Pattern[str]
    weekday: re.Pattern[str]
    next_weekday: re.Pattern[str]
    weekend: re.Pattern[str]
    days: tuple[tuple[re.Pattern[str], int], ...]
    time: re.Pattern[str]
    am: re.Pattern[str]
    pm: re.Pattern[str]
    half_of_day: re.Pattern[str]
    past_to: re.Pattern[str]
    noon: re.Pattern[str]
    not_times: re.Pattern[str]
    time_leads: frozenset[str]
    name_lead: re.Pattern[str]
    name_end: re.Pattern[str]
    not_a_name: re.Pattern[str]
    later: re.Pattern[str]
    size: re.Pattern[str]
    push: re.Pattern[str]
    not_changes: re.Pattern[str]
    day_after: re.Pattern[str]
    day_before: re.Pattern[str]


@functools.cache
def _rules(language: str) -> _Rules:
    pack = pack_or_default(language)
    read, names = pack.library_values, pack.names
    numbers, dates, times, changes = read.numbers, read.dates, read.times, read.changes
    said = functools.partial(_alternation, pack)
    suffixes = said(numbers.ordinal_suffixes)
    units = {w: n for w, n in numbers.ordinals.items() if n < 10}
    not_of = rf"(?!\s+(?:{said(dates.of)})\s+\w+)"
    weekdays = _indexed(dates.weekdays)
    size = (rf"(?P<size>{said(changes.sizes)})|(?P<n>\d{{1,3}})\s+(?:(?P<hours>{said(changes.hours)})"
            rf"|(?P<minutes>{said(changes.minutes)}))")
    moved = rf"(?:{said(changes.moved)}|(?:{said(changes.moved_articles)})\s+\w+)"
    past_to = "|".join([*(f"(?P<p{i}>{said([w])})" for i, w in enumerate(times.past)),
                        *(f"(?P<t{i}>{said([w])})" for i, w in enumerate(times.to))]) or _NONE
    return _Rules(
        pack=pack,
        ordinals={w.lower(): n for w, n in numbers.ordinals.items()},
        ordinal_word=re.compile(rf"\b({said(numbers.ordinals)})\b", re.I),
        ordinal_compound=re.compile(rf"\b({said(numbers.ordinal_tens)})[- ]({said(units)})\b", re.I),
        date_words=re.compile(rf"\b(?:{said([*dates.days, *dates.also, *dates.weekdays, *dates.months])}"
                              rf"|\d{{4}}-\d{{2}}-\d{{2}}|\d{{1,2}}(?:{suffixes}))\b"),
        ordinal_day=re.compile(rf"\b(?:{said(dates.day_leads)})\s+(\d{{1,2}})(?:{suffixes})\b{not_of}"
                               rf"|^\W*(\d{{1,2}})(?:{suffixes})\W*$"),
        ordinal_alone=re.compile(rf"\b\d{{1,2}}(?:{suffixes})\b{not_of}"),
        weekday=re.compile(rf"\b(?:{weekdays})s?\b"),
        next_weekday=re.compile(rf"\b(?:{said(dates.next)})\s+(?:{weekdays})\b"),
        weekend=re.compile(rf"\b(?:{said(dates.weekend)})\b"),
        days=tuple((re.compile(rf"\b(?:{said([w])})\b"), n) for w, n in dates.days.items()),
        time=re.compile(rf"\b(\d{{1,2}})(?:(?::|\s|\.)([0-5]\d))?\s*"
                        rf"({_spelled([*times.am, *times.pm, *times.oclock])})?(?=\W|$)"),
        am=re.compile(_spelled(times.am)),
        pm=re.compile(_spelled(times.pm)),
        half_of_day=re.compile(rf"\s*({_spelled([*times.am, *times.pm])})"),
        past_to=re.compile(rf"\b(?:{past_to})\s+(?P<hour>\d{{1,2}})\b"),
        noon=re.compile(rf"\b(?:(?P<noon>{said(times.noon)})|(?P<midnight>{said(times.midnight)}))\b"),
        not_times=re.compile(rf"\b(\d{{1,2}})\s+(?:{said(times.durations)})\b"),
        time_leads=frozenset(w.lower() for w in times.leads),
        name_lead=re.compile(rf"^(?:(?:{said(names.answer_sounds)})[,.]?\s+)*"
                             rf"(?:(?:{said(names.answer_leads)})\s+)+", re.I),
        name_end=re.compile(rf"\s*,?\s*(?:{said(names.ends)})$", re.I),
        not_a_name=re.compile(rf"\b(?:{said(names.never)})\b|\d|\?", re.I),
        later=re.compile(rf"\b(?:(?:{size})\s+)?(?:(?P<later>{said(changes.later)})"
                         rf"|(?P<earlier>{said(changes.earlier)}))\b"),
        size=re.compile(rf"\b(?:{size})\b"),
        push=re.compile(rf"\b(?:(?P<back>{said(changes.push_back)})\s+{moved}?\s*(?:{said(changes.back)})"
                        rf"|(?:{said(changes.bring_forward)})\s+{moved}?\s*(?:{said(changes.forward)}))\b"),
        not_changes=re.compile(rf"\b(?:{said(changes.not_changes)})\b"),
        day_after=re.compile(rf"\b(?:{said(changes.day_after)})\b"),
        day_before=re.compile(rf"\b(?:{said(changes.day_before)})\b"),
    )


def digits(text: str, language: str = "en") -> str:
    """Numbers written as words as digits ("a table for four" -> "a table for 4"); single small
    numbers too, which text2num leaves as words by default. A language whose pack reads its own
    numbers by its numerals ("두 명" -> "2 명")."""
    if pack_values.reads_values(language):
        return pack_values.digits(text, language)
    rules = _rules(language)
    written = rules.pack.library_values.numbers.ordinal or "{n}"

    def compound(said: re.Match[str]) -> str:
        tens, units = rules.pack.library_values.numbers.ordinal_tens, rules.ordinals
        day = _said(tens, said[1]) + units[said[2].lower()]
        return written.format(n=day) if day <= 31 else said[0]  # a day of the month

    text = rules.ordinal_compound.sub(compound, text)
    text = rules.ordinal_word.sub(lambda said: written.format(n=rules.ordinals[said[1].lower()]), text)
    return alpha2digit(text, "en", threshold=0)


# ---- dates ------------------------------------------------------------------
def parse_date(text: str, today: dt.date, language: str = "en") -> dt.date | None:
    """A day the caller means, today or later: "tomorrow", "Friday", "next Friday", "the 12th",
    "December 12th", "2030-01-09". A weekday is the nearest one, today included."""
    if pack_values.reads_values(language):
        return pack_values.parse_date(text, today, language)
    rules = _rules(language)
    words = digits(text.lower().replace("’", "'"), language)
    dated = rules.date_words.search(rules.ordinal_alone.sub(" ", words)) or rules.ordinal_day.search(words)
    if not dated:
        return None
    if iso := re.search(r"\b(\d{4})-(\d{2})-(\d{2})\b", words):
        try:
            return dt.date(int(iso[1]), int(iso[2]), int(iso[3]))
        except ValueError:
            return None
    if rules.weekend.search(words):  # its Saturday
        return today + dt.timedelta(days=(5 - today.weekday()) % 7)
    for phrase, ahead in rules.days:
        if phrase.search(words):
            return today + dt.timedelta(days=ahead)
    if nxt := rules.next_weekday.search(words):
        return today + dt.timedelta(days=(_index(nxt) - today.weekday()) % 7 or 7)
    months = rules.pack.library_values.dates.months
    month = next((m for m in months if re.search(rf"\b{re.escape(m[:3].lower())}\w*\b", words)), None)
    if month is None and (day := rules.ordinal_day.search(words)):
        return next_day_of_month(int(day[1] or day[2]), today)
    if month is None and (weekday := rules.weekday.search(words)):
        return today + dt.timedelta(days=(_index(weekday) - today.weekday()) % 7)
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
def parse_time(text: str, between: Sequence[str] | None = None, language: str = "en",
               bare: bool = True) -> str | None:
    """A clock time as "HH:MM": "seven pm", "7:30", "half past seven", "seven thirty", "noon".
    An hour without am or pm is read inside ``between`` (the business's hours, "HH:MM" pair)
    when one of the two readings falls there; otherwise 1-6 is afternoon and 7-11 morning.
    ``bare``: a number alone is an hour (the answer to "at what time?", not to "how many?")."""
    if pack_values.reads_values(language):
        return pack_values.parse_time(text, between, language, bare)
    rules = _rules(language)
    words = rules.not_times.sub(" ", digits(text.lower().replace("’", "'"), language))
    if noon := rules.noon.search(words):
        return "00:00" if noon["midnight"] else "12:00"
    if said := rules.past_to.search(words):
        return _past_or_to(said, rules, words, between)
    for match in rules.time.finditer(words):
        hour, minute, suffix = int(match[1]), int(match[2] or 0), (match[3] or "")
        if not suffix and match[2] is None and not _time_context(words, match.start(), bare, rules):
            continue  # a bare number ("for 4") is no time unless "at" or "around" comes before it
        if hour <= 24:
            return _clock(hour, minute, suffix, between, rules)
    return None


def _past_or_to(said: re.Match[str], rules: _Rules, words: str, between: Sequence[str] | None) -> str | None:
    """"half past 7" (30 minutes past it), "quarter to 8" (15 minutes before it)."""
    times = rules.pack.library_values.times
    hour, half = int(said["hour"]), _half_of_day(words, said.end(), rules)
    for i, phrase in enumerate(times.past):
        if said[f"p{i}"]:
            return _clock(hour, times.past[phrase], half, between, rules)
    before = next(times.to[phrase] for i, phrase in enumerate(times.to) if said[f"t{i}"])
    return _clock(hour - 1, 60 - before, half, between, rules)


def _time_context(words: str, start: int, bare: bool, rules: _Rules) -> bool:
    before = words[:start].split()[-1:] or [""]
    return before[0] in rules.time_leads \
        or (bare and words.strip() == words[start:].strip())  # the whole answer is the number


def _half_of_day(words: str, end: int, rules: _Rules) -> str:
    match = rules.half_of_day.match(words[end:])
    return match[1] if match else ""


def _clock(hour: int, minute: int, suffix: str, between: Sequence[str] | None, rules: _Rules) -> str | None:
    if rules.pm.fullmatch(suffix):
        return clock(hour, minute, "pm", between)
    if rules.am.fullmatch(suffix):
        return clock(hour, minute, "am", between)
    return clock(hour, minute, "", between)


# ---- numbers, names, choices -----------------------------------------------------
def parse_integer(text: str, language: str = "en") -> int | None:
    """The one number in the words: "four", "we are 4", "about 30 thousand" (what a field's number
    means in other words, "just me", is the field's own: ``numbers.py``)."""
    if pack_values.reads_values(language):
        return pack_values.parse_integer(text, language)
    words = digits(text.lower(), language)
    found = re.findall(r"(?<![\d:])\d{1,7}(?![\d:])", words)
    return int(found[0]) if len(found) == 1 else None


def parse_name(text: str, not_names: frozenset[str] = frozenset(), language: str = "en") -> str | None:
    """A person's name from an answer to "under what name?": "It's Jordan Blake." -> "Jordan
    Blake". At most four words, no digits, nothing that reads as a request or a question, and
    none of ``not_names`` (the business's own words: "A table, please.")."""
    if pack_values.reads_values(language):
        return pack_values.parse_name(text, not_names, language)
    rules = _rules(language)
    name = rules.name_lead.sub("", text.strip()).strip(" .,!")
    name = rules.name_end.sub("", name).strip(" .,!")
    words = name.split()
    if not 1 <= len(words) <= 4 or rules.not_a_name.search(name):
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
def relative_change(kind: str, text: str, current: Any, language: str = "en") -> Any:
    """A value relative to the one read back: "a little later" (+30 min), "an hour earlier",
    "the day after" (+1 day); a number field's change is its own (``numbers.number_change``). None
    when the words say no such change."""
    if pack_values.reads_values(language):
        return pack_values.relative_change(kind, text, current, language)
    rules = _rules(language)
    words = digits(text.lower().replace("’", "'"), language)
    if kind == "time" and isinstance(current, str) and re.fullmatch(r"\d{2}:\d{2}", current):
        minutes = _shift_minutes(words, rules)
        if minutes is not None and (moved := shifted(current, minutes)) is not None:
            return moved
    if kind == "date" and isinstance(current, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", current):
        step = 1 if rules.day_after.search(words) else -1 if rules.day_before.search(words) else 0
        if step:
            return (dt.date.fromisoformat(current) + dt.timedelta(days=step)).isoformat()
    return None


def _shift_minutes(words: str, rules: _Rules) -> int | None:
    if rules.not_changes.search(words):  # "I'll call back later" moves nothing
        return None
    if shift := rules.later.search(words):
        size = _size(shift, rules) if shift["size"] or shift["n"] else 30
        return size if shift["later"] else -size
    if push := rules.push.search(words):
        size = _size(said, rules) if (said := rules.size.search(words)) else 30
        return size if push["back"] else -size
    return None


def _size(said: re.Match[str], rules: _Rules) -> int:
    """A change's size in minutes: "an hour", "20 minutes", "2 hours"."""
    if said["size"]:
        return _said(rules.pack.library_values.changes.sizes, said["size"])
    return int(said["n"]) * (60 if said["hours"] else 1)
