"""Codes the caller reads out (a plate, a reference, a member number) and the words around values.

A field is a code when the profile types it ``code`` or the tool's schema gives it a
``pattern``. Callers say codes in pieces: "M N seven three one zero", "M as in Mike, N
as in November, 7310", "double four". ``parse_code`` joins the pieces into one code
and checks it against the pattern; ``spoken_code`` says one back character by
character ("M N 7 3 1 0" is spoken "M N seven three one zero", never "seven
thousand three hundred ten").

``strip_lead`` takes the carrier words off a free-text answer ("The plate is MN 7310."
is "MN 7310"; "It's for a sore throat" is "a sore throat"): only the value is kept.
The words of both are the language pack's ``codes``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from voicebot.brain.lang import pack_or_default
from voicebot.brain.read.values import digits


@dataclass(frozen=True)
class _CodeWords:
    digits: dict[str, str]
    repeats: dict[str, int]
    fillers: frozenset[str]
    spelled: re.Pattern[str]
    leads: re.Pattern[str]


@functools.cache
def _code_words(language: str) -> _CodeWords:
    """The language pack's ``codes`` words as the shapes a code and a value are said in."""
    pack = pack_or_default(language)
    codes, said = pack.codes, pack.phrases
    sounds = rf"(?:(?:{said(codes.sounds)})[,\s]+)*"
    owned = rf"(?:{said(codes.owners)})\s+(?:[\w-]+\s+){{0,3}}?(?:{said(codes.verbs)}|:)\s+"
    return _CodeWords(
        digits={w.lower(): str(n) for w, n in codes.digits.items()},
        repeats={w.lower(): n for w, n in codes.repeats.items()},
        fillers=frozenset(w.lower() for w in codes.fillers),
        # "M as in Mike", "M for Mike": the letter, not the word that spells it.
        spelled=re.compile(rf"\b([a-z])\s*(?:,\s*)?(?:{said(codes.spelled)})\s+[a-z]+\b", re.I),
        leads=re.compile(rf"^{sounds}(?:(?:{said(codes.leads)})\s+|{owned})?", re.I),
    )


def strip_lead(text: str, language: str = "en") -> str:
    """The value without the words that carry it: "The plate is MN 7310." -> "MN 7310"."""
    value = " ".join(text.split()).strip()
    stripped = _code_words(language).leads.sub("", value, count=1).strip()
    return (stripped or value).rstrip(".!,;")


def code_pieces(text: str, language: str = "en") -> list[str]:
    """The characters of a code as said: letters, digits, digit words, "double 4"."""
    said = _code_words(language)
    text = said.spelled.sub(r"\1", strip_lead(text, language))
    tokens = re.findall(r"[A-Za-z0-9]+", text.replace("-", " "))
    pieces: list[str] = []
    repeat = 1
    for token in tokens:
        lower = token.lower()
        if lower in said.repeats:
            repeat = said.repeats[lower]
            continue
        if lower in said.digits and not (len(token) == 1 and token.isupper()):  # "O": the letter
            piece = said.digits[lower]
        elif lower in said.fillers and not token.isupper():
            repeat = 1
            continue
        elif len(token) == 1 or token.isupper() or any(c.isdigit() for c in token):
            piece = token.upper()
        else:
            piece = digits(lower, language)
            if not piece.isdigit():  # a word that is not part of a code ("plate", "thanks")
                repeat = 1
                continue
        pieces.append(piece * repeat if len(piece) == 1 else piece)
        repeat = 1
    return pieces


def parse_code(text: str, pattern: str = "", language: str = "en") -> str | None:
    """The code in the caller's words, or None (nothing like one, or not matching ``pattern``)."""
    code = "".join(code_pieces(text, language))
    if not code or len(code) > 40:
        return None
    if pattern:
        try:
            if re.fullmatch(pattern, code) is None and re.search(pattern, code) is None:
                return None
        except re.error:
            return code
    return code


def spoken_code(value: str) -> str:
    """A code said back one character at a time."""
    return " ".join(ch for ch in str(value) if ch.isalnum())


_CODE_LIKE = re.compile(r"\b(?=[A-Za-z]*\d)[A-Za-z0-9]*\d[A-Za-z0-9]*\b")


def spoken_codes_in(text: str) -> str:
    """Free text said back with its code-like tokens (four digits or more, or letters and
    digits mixed) spelled out: "MN 7310" -> "M N 7 3 1 0"; "2 weeks" stays."""
    def spell(match: re.Match[str]) -> str:
        token = match[0]
        if token.isdigit() and len(token) < 4:
            return token
        return spoken_code(token)

    spelled = _CODE_LIKE.sub(spell, text)
    # A short capital group right before a spelled code is part of it ("MN 7 3 1 0").
    return re.sub(r"\b([A-Z]{2,3})\b(?=\s+[A-Z0-9](?:\s|$))",
                  lambda m: spoken_code(m[1]) if m.end() < len(spelled) else m[1], spelled)
