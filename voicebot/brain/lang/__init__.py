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
    # Words of a field's question that name no field ("What is your name?" names it by "name").
    question_words: list[str] = []


class Counting(_Strict):
    more: list[str] = []  # "two more people", "an extra guest"
    fewer: list[str] = []  # "one less", "two fewer"
    another: list[str] = []  # "another guest"


class Corrections(_Strict):
    after_value: list[str] = []  # follow the value they take back: "seven, no wait", "세 명 말고"
    before_value: list[str] = []  # come before it: "not two"
    instead: list[str] = []  # end what `before_value` took back: "not Wednesday *but* Thursday"


class Names(_Strict):
    leads: list[str] = []  # words that introduce a name
    not_names: list[str] = []  # capitalised words that are never a name
    ends: list[str] = []  # words after a name that are not part of it ("입니다", "으로 해주세요")
    follows: list[str] = []  # words that follow a name said inside a request ("김민수 이름으로")
    # An answer to "under what name?" read by ``read/values.py`` (a pack without ``values``):
    answer_sounds: list[str] = []  # before the name or its leads ("yes, it's Jordan")
    answer_leads: list[str] = []  # before the name, one or more ("it's under Jordan")
    never: list[str] = []  # a word that makes the answer no name (a request, a question, a time)
    # A capitalised name said inside other words follows one of these ("for two under Jordan Blake").
    said_leads: list[str] = []


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


class LibraryNumbers(_Strict):
    """Ordinals said as words, written as digits before the libraries read them."""
    ordinals: dict[str, int] = {}  # "twelfth": 12
    ordinal_tens: dict[str, int] = {}  # "twenty-first": tens before an ordinal under ten (a day, to 31)
    ordinal: str = ""  # how one is written for the libraries: "{n}th"
    ordinal_suffixes: list[str] = []  # after digits, an ordinal: "12th", "3rd"


class LibraryDates(_Strict):
    weekdays: list[str] = []  # Monday first ("Fridays" too); alone, the nearest one, today included
    months: list[str] = []  # January first; the first three letters name one ("Dec")
    days: dict[str, int] = {}  # relative days: the first written that the words hold wins
    next: list[str] = []  # before a weekday: the first one after today ("next Friday")
    weekend: list[str] = []  # the coming Saturday
    also: list[str] = []  # other words that make the words a date for the library ("next week")
    day_leads: list[str] = []  # before an ordinal: a day of the month ("the 12th", "on 3rd")
    of: list[str] = []  # after an ordinal and before a word: not a day alone ("the 12th of May")


class LibraryTimes(_Strict):
    """Words around a clock time; in a phrase a dot or an apostrophe may be left out ("pm",
    "oclock") and a space may follow a dot ("a. m.")."""
    am: list[str] = []  # after an hour: its morning ("7 a.m.", "7 in the morning")
    pm: list[str] = []  # after an hour: its afternoon or evening ("7 p.m.", "7 tonight")
    oclock: list[str] = []  # after an hour, either half of the day
    noon: list[str] = []
    midnight: list[str] = []
    past: dict[str, int] = {}  # before an hour: minutes past it ("half past 7": 30)
    to: dict[str, int] = {}  # before an hour: minutes before it ("quarter to 8": 15)
    durations: list[str] = []  # after a number: a duration, never a clock time ("2 hours")
    leads: list[str] = []  # a bare number after one is an hour ("at 7", "around 8")


class LibraryChanges(_Strict):
    """A value said relative to the one read back ("a little later", "the day after")."""
    later: list[str] = []
    earlier: list[str] = []
    sizes: dict[str, int] = {}  # a change's size in minutes ("an hour": 60); without one, half an hour
    hours: list[str] = []  # after a number: the size in hours ("2 hours later")
    minutes: list[str] = []  # ... in minutes ("20 minutes earlier")
    push_back: list[str] = []  # before what is moved and `back`: later ("push it back")
    back: list[str] = []
    bring_forward: list[str] = []  # before what is moved and `forward`: earlier ("bring it forward")
    forward: list[str] = []
    moved: list[str] = []  # what is moved ("it", "that") ...
    moved_articles: list[str] = []  # ... or one of these and any word ("the table")
    not_changes: list[str] = []  # words that make "later" no change ("I'll call back later")
    day_after: list[str] = []
    day_before: list[str] = []


class LibraryValues(_Strict):
    """The words of the rules around the libraries that read a language's values (English:
    text2num, parsedatetime; ``read/values.py``), for a pack without ``values``."""
    numbers: LibraryNumbers = LibraryNumbers()
    dates: LibraryDates = LibraryDates()
    times: LibraryTimes = LibraryTimes()
    changes: LibraryChanges = LibraryChanges()


class Codes(_Strict):
    """Codes read out in pieces and the words around a value (``read/codes.py``)."""
    digits: dict[str, int] = {}  # digits said as words ("oh" too); a capital letter alone stays a letter
    repeats: dict[str, int] = {}  # "double four"
    spelled: list[str] = []  # between a letter and the word that spells it ("M as in Mike")
    fillers: list[str] = []  # words among a code's pieces that are no part of it ("the code is")
    sounds: list[str] = []  # before a value's words ("so, um, it's ...")
    leads: list[str] = []  # words that carry a value ("it's for a sore throat")
    owners: list[str] = []  # ... or one of these, up to three words and one of `verbs` ...
    verbs: list[str] = []  # ... ("the plate is MN 7310", "my reference would be AB12")


class Claims(_Strict):
    """Words that state or promise an action's outcome ("I've booked", "is confirmed", "I'll
    cancel"): only code's read-back and done sentences say them (``act/answers.py``)."""
    done_by: list[str] = []  # who did it or what it was done to ("i've", "the booking") ...
    owners: list[str] = []  # ... or one of these and any word ("your table") ...
    done: list[str] = []  # ... then, up to two words later, what was done ("booked", "all set")
    will: list[str] = []  # a promise ("i'll", "let me") ...
    will_do: list[str] = []  # ... then, up to a word later, what will be done ("cancel")
    phrases: list[str] = []  # a claim as it is said, anywhere in the words ("예약되었습니다")


class Refusal(_Strict):
    """The model's stock refusal ("I'm sorry, but I can't assist with that."): a first sentence
    that is nothing but an apology and "can't help" (``read/refusals.py``)."""
    leads: list[str] = []  # "i'm" (sorry)
    very: list[str] = []  # "so" (sorry)
    sorry: list[str] = []
    but: list[str] = []
    cannot: list[str] = []  # "i can't", "i am unable to"
    help: list[str] = []  # "assist"
    objects: list[str] = []  # after help: "with that", "you with this request"


class Examples(_Strict):
    """Sentences the words are compared with as embeddings, besides the profile's own."""
    # The task picker's (``read/reading.py``): questions about a business, and pleasantries, neither
    # a task nor a question.
    questions: list[str] = []
    other: list[str] = []
    # Requests no voice line for a business is for: the topic guard's quick screen never passes a
    # turn nearer one of them (``read/guard_screen.py``; a profile adds its own near-domain ones).
    blocked: list[str] = []


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
    """How code says a value in this language (``speak/readback.py``); a pack without a form says
    it as English's pack does."""
    date: str = ""  # "{weekday}, {month_name} {day}{ordinal}", "{month}월 {day}일 {weekday}"
    date_without_weekday: str = ""  # "{month_name} {day}{ordinal}", "{month}월 {day}일"
    weekdays: list[str] = []  # Monday first
    months: list[str] = []  # January first: {month_name}
    # The day's ordinal ending, {ordinal}: by the day's last two digits, else its last digit,
    # else "other" ("11": th, "1": st, other: th -> 1st, 11th, 21st).
    ordinals: dict[str, str] = {}
    time: str = ""  # "{hour} {period}", "{period} {hour}시"
    time_with_minutes: str = ""  # "{hour}:{minute:02d} {period}", "{period} {hour}시 {minute}분"
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
    # A read-back made from a tool's title where the profile writes none: "{title} {named} with
    # {values}" ("close a ticket for your monitor ticket with priority high"): `action_for` names
    # a reference ("for {value}"), `action_with` the other values ("with {values}"), each value
    # "{name} {value}" (`action_value`).
    action_for: str = ""
    action_with: str = ""
    action_value: str = ""


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
    corrections: Corrections = Corrections()  # a value taken back in the same words
    values: Values | None = None  # dates, times and numbers by this pack's words, else libraries
    library_values: LibraryValues = LibraryValues()  # the words around the libraries, without `values`
    codes: Codes = Codes()
    # An option offered chosen by its place ("the second one"): its index, -1 the last.
    option_places: dict[str, int] = {}
    examples: Examples = Examples()
    # Words a model's copy of the caller's words may add ("the", "please"): the others must have
    # been said (``read/reading.py``).
    small_words: list[str] = []
    # Words with no content of their own: a question and a passage are compared by the others
    # (``act/answers.py``).
    stop_words: list[str] = []
    claims: Claims = Claims()
    refusal: Refusal = Refusal()
    speak: Speak = Speak()
    # The brain's own sentences in this language, where a business's profile does not write its
    # own (the keys of ``sentences`` in docs/add-a-business.md); a profile's first language needs
    # every key, from here or from the profile.
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
