"""The words' side of the end-of-turn decision: does the decode made at the pause read as finished?

Whisper writes what it heard with punctuation, and it marks speech that stops mid-phrase:
"My name is...", "I would like to book a table for.", "Could you move my reservation to".
A transcript reads as unfinished when it has no closing punctuation, trails off (an ellipsis,
a comma, a dash), or ends on a word after which the language's sentences go on (an article, a
preposition, a conjunction, an auxiliary), unless its last words are an ending the language
lists as finished ("Yes, I do.", "What would you like?").

The rules are language data, one JSON file per language in ``turn_languages/``: ``default.json``
(punctuation of any script) and ``<language>.json`` (its ``continues`` words and ``finishes``
endings, and punctuation of its own if need be). A language without a file is judged by its
punctuation alone.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).with_name("turn_languages")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")


@dataclass(frozen=True)
class WordRules:
    closing: tuple[str, ...]  # punctuation that ends a sentence
    trailing: tuple[str, ...]  # punctuation that trails off: the speaker goes on
    continues: frozenset[str]  # last words after which a sentence goes on
    finishes: tuple[tuple[str, ...], ...]  # endings that finish one though their last word "continues"


@functools.cache
def rules_for(language: str) -> WordRules:
    """The language's rules (``default.json`` alone for a language without a file)."""
    data = json.loads((DATA / "default.json").read_text(encoding="utf-8"))
    own = DATA / f"{language.lower().split('-')[0]}.json"
    if re.fullmatch(r"[a-z]{2,3}", own.stem) and own.is_file():
        data |= json.loads(own.read_text(encoding="utf-8"))
    return WordRules(
        closing=tuple(data["closing"]), trailing=tuple(data["trailing"]),
        continues=frozenset(w.lower() for w in data.get("continues", ())),
        finishes=tuple(tuple(_WORD.findall(e.lower())) for e in data.get("finishes", ())),
    )


def unfinished(text: str, language: str) -> bool:
    """True when the transcript at a pause reads as speech that goes on."""
    text = text.strip()
    if not text:
        return False  # no words (a noise): nothing to wait for
    rules = rules_for(language)
    if text.endswith(rules.trailing) or not text.endswith(rules.closing):
        return True
    words = [w.replace("’", "'") for w in _WORD.findall(text.lower())]
    if not words or words[-1] not in rules.continues:
        return False
    return not any(tuple(words[-len(e):]) == e for e in rules.finishes if e)
