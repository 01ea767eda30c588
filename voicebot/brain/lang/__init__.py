"""Language packs: every word the brain recognises by itself, one YAML file per language.

Code keeps the logic (what a plain yes is, what starts a question); the words are data
(``en.yaml``, ``ko.yaml``), loaded by language code and validated when first used: a pack
with a missing or unknown key fails naming the file and the key. A new language is a new
pack and its tests, no code (docs/languages.md).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

PACKS_DIR = Path(__file__).resolve().parent


class LanguageError(ValueError):
    """A language without a pack, or a pack that does not validate."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Acts(_Strict):
    yes: list[str] = Field(min_length=1)  # a plain yes to a read-back
    polite: list[str] = []  # words that may follow a yes without changing it
    fillers: list[str] = []  # sounds before a yes ("oh, yes")
    no: list[str] = Field(min_length=1)  # a bare no
    no_tail: list[str] = []  # words that may follow a no without changing it
    hedge: list[str] = []  # neither yes nor no: the read-back is said again
    leading_no: list[str] = []  # a no that starts longer words: a change
    person: list[str] = Field(min_length=1)  # asks for a person
    greeting: list[str] = []
    thanks: list[str] = []
    thanks_lead: list[str] = []  # "okay, thanks"
    no_more: list[str] = []  # "no, I'll call back"


class Questions(_Strict):
    starts: list[str] = []  # words that start a question
    anywhere: list[str] = []  # words anywhere that make a question
    about_business: list[str] = []  # a question about the business starts so ...
    # ... or holds them anywhere, in a language that asks with the question word mid-sentence
    # ("거기 저녁에 몇 시에 문 열어요?")
    about_business_anywhere: bool = False
    about_caller: list[str] = []  # ... unless the words name the caller's own
    request_starts: list[str] = []  # a request to the bot starts so
    requests: list[str] = []  # or holds these


class Same(_Strict):
    word: str  # "same"
    articles: list[str] = []  # "the" same
    ends: list[str] = []  # words after `word` that end what it names ("the same for Friday")
    not_nouns: list[str] = []  # words after `word` that name no field
    phrases: list[str] = []  # "as before"


class Counting(_Strict):
    more: list[str] = []  # "two more people", "an extra guest"
    fewer: list[str] = []  # "one less", "two fewer"
    another: list[str] = []  # "another guest"


class Names(_Strict):
    leads: list[str] = []  # words that introduce a name
    not_names: list[str] = []  # capitalised words that are never a name
    ends: list[str] = []  # words after a name that are not part of it ("입니다", "으로 해주세요")
    follows: list[str] = []  # words that follow a name said inside a request ("김민수 이름으로")


class Numerals(_Strict):
    """Number words and how they combine, where no library reads the language's numbers: words
    add (열+두 = 12, 스물+셋 = 23), a digit multiplies the scale after it (이+십+오 = 25)."""
    words: dict[str, int] = {}  # number words that add (native Korean: 하나, 두, 열, 스물)
    digits: dict[str, int] = {}  # digits that multiply a scale (Sino-Korean: 일, 이, 삼)
    scales: dict[str, int] = {}  # 십 10, 백 100, 천 1000, 만 10000
    counters: list[str] = []  # a number word is a number only before one ("두 명", "세 시")
    alone: list[str] = []  # ... or when it is one of these, alone or before a particle ("넷이요")
    not_numbers: list[str] = []  # words that look like a number and a counter ("이번": this time)


class Dates(_Strict):
    days: dict[str, int] = {}  # relative days: today 0, tomorrow 1 (the longest phrase wins)
    weekdays: list[str] = []  # Monday first; a weekday alone is the nearest one, today included
    next_week: list[str] = []  # before a weekday: that day of next week ("다음 주 금요일")
    this_week: list[str] = []  # before a weekday: that day of this week
    weekend: list[str] = []  # the coming Saturday
    day_of_month: str = ""  # "{d}일": a day of the month, the next one from today
    month_day: str = ""  # "{m}월 {d}일"


class Times(_Strict):
    hour: str = ""  # "{h}시"
    minutes: str = ""  # "{m}분", after the hour
    half: list[str] = []  # half past, after the hour ("7시 반")
    am: list[str] = []  # said before the hour: morning words ("오전 9시")
    pm: list[str] = []  # afternoon and evening words ("저녁 7시")
    noon: list[str] = []
    midnight: list[str] = []
    not_times: list[str] = []  # a duration is no clock time ("{n}시간")


class Changes(_Strict):
    """A value said relative to the one read back ("조금 늦게", "한 시간 일찍", "다음 날")."""
    later: list[str] = []
    earlier: list[str] = []
    hours: str = ""  # "{n}시간": the size of the change; a change without one is half an hour
    minutes: str = ""  # "{n}분"
    day_after: list[str] = []
    day_before: list[str] = []


class Values(_Strict):
    """Typed values read by rules from this language's words (``read/pack_values.py``). A pack
    without them is read by the libraries of ``read/values.py`` (English: text2num,
    parsedatetime)."""
    numerals: Numerals = Numerals()
    dates: Dates = Dates()
    times: Times = Times()
    changes: Changes = Changes()
    particles: list[str] = []  # what may follow a word without changing it (은, 는, 이요)


class Speak(_Strict):
    """How code says a value in this language (``speak/readback.py``); English's forms are the
    default where a pack has none."""
    date: str = ""  # "{month}월 {day}일 {weekday}"
    date_without_weekday: str = ""  # "{month}월 {day}일"
    weekdays: list[str] = []  # Monday first
    time: str = ""  # "{period} {hour}시"
    time_with_minutes: str = ""  # "{period} {hour}시 {minute}분"
    am: str = ""  # the period before noon
    pm: str = ""
    list_and: str = ""  # joins the last two of a list ("A, B 그리고 C")
    list_or: str = ""
    yes: str = ""
    no: str = ""
    # What the caller asked for, in a sentence about it ("nothing is free {wanted}"), per field
    # type (date, time, integer, other): "on {value}", "at {value}", "for {value}"; {unit} is
    # what a number field counts.
    wanted: dict[str, str] = {}


class LanguagePack(_Strict):
    language: str
    name: str
    # False: phrases match inside words (Korean particles attach to the word before them).
    word_boundaries: bool = True
    acts: Acts
    questions: Questions = Questions()
    same: Same
    names: Names = Names()
    counting: Counting = Counting()  # a number field's changes in words (``read/numbers.py``)
    values: Values | None = None  # dates, times and numbers by this pack's words, else libraries
    speak: Speak = Speak()
    # The brain's own sentences in this language, where a business's profile does not write its
    # own (the keys of ``sentences`` in docs/add-a-business.md; English is the profile's default).
    sentences: dict[str, str] = {}

    def phrases(self, words: list[str], drawn_out: bool = False) -> str:
        """A regex alternation of phrases, longest first; between a phrase's words a comma or
        spaces (or nothing, where the language's words need no space between them). ``drawn_out``:
        a sound's last letter may repeat ("hmmm", "umm")."""
        ordered = sorted({w.strip().lower() for w in words if w.strip()}, key=len, reverse=True)
        between = r",?\s+" if self.word_boundaries else r",?\s*"

        def one(phrase: str) -> str:
            pattern = between.join(re.escape(part) for part in phrase.split())
            return f"{pattern}{re.escape(phrase[-1])}*" if drawn_out else pattern

        return "|".join(one(phrase) for phrase in ordered) or r"(?!x)x"  # no phrases: matches nothing

    def word(self, alternation: str) -> str:
        """An alternation as whole words, where the language has word boundaries."""
        return rf"\b(?:{alternation})\b" if self.word_boundaries else f"(?:{alternation})"


@functools.cache
def language_pack(code: str) -> LanguagePack:
    """The pack for a language code ("en", "ko"; a region such as "en-GB" falls back to "en")."""
    base = (code or "en").lower().split("-")[0].split("_")[0]
    path = PACKS_DIR / f"{base}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PACKS_DIR.glob("*.yaml")))
        raise LanguageError(f"no language pack for {code!r} (packs: {known})")
    return load_pack(path)


def load_pack(path: Path) -> LanguagePack:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return LanguagePack.model_validate(raw)
    except yaml.YAMLError as exc:
        raise LanguageError(f"language pack {path}: not YAML ({exc})") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise LanguageError(f"language pack {path}: {problems}") from None


def english() -> LanguagePack:
    """The default language's pack (a session that names none)."""
    return language_pack("en")


def pack_or_default(code: str) -> LanguagePack:
    """The session's pack; a language without one is read as the default (the gateway refuses
    such a session's language at its start, so this is a last resort, never an error mid-call)."""
    try:
        return language_pack(code or "en")
    except LanguageError:
        return english()
