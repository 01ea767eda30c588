"""The words' side of the end-of-turn decision: does the decode made at the pause read as finished?

Whisper writes what it heard with punctuation, and it marks speech that stops mid-phrase:
"My name is...", "I would like to book a table for.", "Could you move my reservation to".
A transcript reads as unfinished when it has no closing punctuation, trails off (an
ellipsis, a comma, a dash), or ends on a word that cannot end a sentence (an article, a
preposition, a conjunction, an auxiliary). Words are known for English; other languages
are judged by their punctuation alone.
"""

from __future__ import annotations

import re

CLOSING = (".", "?", "!", "。", "？", "！", "؟", "।")
TRAILING = ("...", "…", ",", "，", "、", "-", "–", "—", ":", ";")
# Words after which an English sentence goes on (a speaker pausing here is thinking).
CONTINUES = {"en": frozenset("""
a an the my your our their his her its this that these those some any every no
to for of at in on by with from about into onto over under between after before until than as
and or but so because if when while whether nor
is am are was were be been being do does did have has had will would shall should can could
may might must i we you he she they it's i'm we're you're they're there's
like want wanna gonna need um uh er erm
""".split())}


def unfinished(text: str, language: str) -> bool:
    """True when the transcript at a pause reads as speech that goes on."""
    text = text.strip()
    if not text:
        return False  # no words (a noise): nothing to wait for
    if text.endswith(TRAILING) or not text.endswith(CLOSING):
        return True
    words = re.findall(r"[^\W_]+(?:'[^\W_]+)?", text.lower())
    return bool(words) and words[-1] in CONTINUES.get(language, frozenset())
