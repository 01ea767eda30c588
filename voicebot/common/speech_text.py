"""Write numbers, times, money, ordinals and units the way people say them.

Shared by the brain (its replies are for the ear) and TTS (any text it is
given). English in full; Korean only where the voice would go wrong (native numbers before
counters, ``speech_text_ko.py``: a voice reads other digits in its own language); other
languages pass through unchanged.
"""

from __future__ import annotations

import re

from voicebot.common.speech_text_ko import korean_speakable

# A comma (; :) right after a letter ends a clause even at the end of the text streamed so far:
# "Yes," is a clause whatever token comes next. After a digit it does not: "1," may be "1,000".
# The gateway's phrase coalescer and TTS's segmenter cut on it alike.
CLAUSE_MARK_AFTER_WORD = r"(?<=[^\W\d_])[,;:]$"

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}


def number_words(n: int) -> str:
    if n < 0:
        return "minus " + number_words(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("-" + _ONES[ones] if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return _ONES[hundreds] + " hundred" + (" " + number_words(rest) if rest else "")
    for size, name in ((10**9, "billion"), (10**6, "million"), (1000, "thousand")):
        if n >= size:
            high, rest = divmod(n, size)
            return number_words(high) + f" {name}" + (" " + number_words(rest) if rest else "")
    raise AssertionError("unreachable")


def ordinal_words(n: int) -> str:
    words = number_words(n)
    head, _, last = words.rpartition("-") if "-" in words else words.rpartition(" ")
    sep = "-" if "-" in words else " "
    if last in _ORDINAL_WORDS:
        last = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return f"{head}{sep}{last}" if head else last


def _time(match: re.Match[str]) -> str:
    hour, minute = int(match["h"]), int(match["m"])
    suffix = match["ampm"]
    if hour > 24 or minute > 59:
        return match[0]
    if minute == 0:
        spoken = number_words(hour) + ("" if suffix else " o'clock")
    elif minute < 10:
        spoken = f"{number_words(hour)} oh {number_words(minute)}"
    else:
        spoken = f"{number_words(hour)} {number_words(minute)}"
    return spoken + (" " + _ampm(suffix) if suffix else "")


def _ampm(raw: str) -> str:
    # "p.m." at the end of a sentence carries the sentence's full stop: keep one.
    return ("a m" if raw.lower().startswith("a") else "p m") + ("." if raw.endswith(".") else "")


# Currency sign: (unit, units, hundredth, hundredths).
_CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
}


def _money(match: re.Match[str]) -> str:
    one, many, small_one, small_many = _CURRENCIES[match["sign"]]
    units = int(match["units"].replace(",", ""))
    cents = int((match["cents"] or "0").ljust(2, "0")[:2])
    spoken = number_words(units) + " " + (one if units == 1 else many)
    if cents:
        spoken += " " + number_words(cents) + " " + (small_one if cents == 1 else small_many)
    return spoken


# Unit abbreviation after a number: (singular, plural). Single letters that are
# also words ("in", "a", "s") are left alone.
_UNITS = {
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "km": ("kilometer", "kilometers"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "m": ("meter", "meters"),
    "kg": ("kilogram", "kilograms"), "mg": ("milligram", "milligrams"), "g": ("gram", "grams"),
    "lbs": ("pound", "pounds"), "lb": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"), "l": ("liter", "liters"), "L": ("liter", "liters"),
    "ft": ("foot", "feet"), "mi": ("mile", "miles"),
    "hrs": ("hour", "hours"), "hr": ("hour", "hours"), "h": ("hour", "hours"),
    "mins": ("minute", "minutes"), "min": ("minute", "minutes"),
    "secs": ("second", "seconds"), "sec": ("second", "seconds"),
    "°C": ("degree Celsius", "degrees Celsius"), "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"),
}
# Longest first, so "km/h" wins over "km" and "mins" over "min".
_UNIT_PATTERN = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))


def _unit(match: re.Match[str]) -> str:
    number = match["n"]
    one, many = _UNITS[match["unit"]]
    spoken = _decimal(re.match(r"(?P<whole>\d+)(?:\.(?P<fraction>\d+))?", number))
    return f"{spoken} {one if number == '1' else many}"


def _decimal(match: re.Match[str]) -> str:
    whole, fraction = match["whole"].replace(",", ""), match["fraction"]
    spoken = number_words(int(whole))
    if fraction:
        spoken += " point " + " ".join(_ONES[int(d)] for d in fraction)
    return spoken


_RULES: list[tuple[re.Pattern[str], object]] = [
    (re.compile(r"(?P<sign>[$€£])(?P<units>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<cents>\d{1,2}))?\b"), _money),
    (re.compile(r"\b(?P<h>\d{1,2}):(?P<m>\d{2})(?:\s*(?P<ampm>[ap]\.?\s?m\b\.?))?(?!\d)", re.I), _time),
    (re.compile(r"\b(?P<h>\d{1,2})\s*(?P<ampm>[ap]\.?m\b\.?)", re.I),
     lambda m: number_words(int(m["h"])) + " " + _ampm(m["ampm"])),
    (re.compile(r"\b(?P<n>\d+)(?:st|nd|rd|th)\b"), lambda m: ordinal_words(int(m["n"]))),
    (re.compile(r"\b(?P<n>\d+(?:\.\d+)?)\s?%"), lambda m: _decimal(re.match(
        r"(?P<whole>\d+)(?:\.(?P<fraction>\d+))?", m["n"])) + " percent"),
    (re.compile(rf"\b(?P<n>\d+(?:\.\d+)?)\s?(?P<unit>{_UNIT_PATTERN})(?![\w/°])"), _unit),
    (re.compile(r"\b(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<fraction>\d+))?\b"), _decimal),
]


def speakable(text: str, language: str = "en") -> str:
    """Numbers, times, money, ordinals, percentages and units as words (English; Korean: the
    numbers before native counters, ``speech_text_ko.py``)."""
    if language.startswith("ko"):
        return korean_speakable(text)
    if not language.startswith("en"):
        return text
    for pattern, replace in _RULES:
        text = pattern.sub(replace, text)  # type: ignore[arg-type]
    return text


def spoken_words(text: str, language: str = "en") -> str:
    """The words as heard, for comparing what was said with what was played: spoken forms,
    lower case, punctuation gone ("7 pm." and "seven p m" give the same words)."""
    return " ".join(re.sub(r"[\W_]+", " ", speakable(text, language).lower()).split())
