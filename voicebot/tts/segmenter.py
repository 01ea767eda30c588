"""Cut streamed text into sentences as soon as each one is complete.

Boundaries: . ! ? … followed by a space or the end of input, full-width
。！？ (no space needed after them), and a line break. Not boundaries: titles
(Dr. Mr. e.g.), "No. 5", single initials (J. Smith), decimals (3.5) and
times (7.30), which never have a space after the dot. A sentence-final
abbreviation (etc. p.m.) or an ellipsis ends a sentence only when a capital
letter follows: "Wait... Really?" is two sentences, "Well... I think" and
"so... maybe" are one.

A clause that grows past ``max_clause_chars`` without ending is cut at its
last comma (or ; :) within that length, or at the first one after it, so a
long sentence's first audio is not held back until its full stop arrives.
A punctuation mark at the very end of the text so far waits for the next
delta: "3." may become "3.5".

The first piece of a reply does not wait for its full stop: it is cut at its
first comma (or ; :) once it holds ``first_clause_chars``; when no such mark
comes, at a word boundary: before the first word that opens a phrase (a
preposition or a conjunction: "I'm located about one mile | from the station")
once ``first_clause_min_words`` words precede it, else after
``first_clause_words`` words. So the first audio starts while the model is
still writing the sentence. A comma cut joins without a seam (piper pauses at a
comma anyway); a word cut (``WordCut``) is voiced with a comma of its own
(``voiced``: a rise and a short pause, where a speaker pauses before a phrase,
instead of a full stop's fall) and reported as written.
"""

from __future__ import annotations

import re

from voicebot.common.speech_text import CLAUSE_MARK_AFTER_WORD

# Never end a sentence: they introduce what follows.
TITLES = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "approx", "dept", "e.g", "i.e",
    "fig", "vol",
}
# End a sentence only when a capital letter follows ("at 7 p.m. See you").
FINAL_ABBREVIATIONS = {"etc", "a.m", "p.m", "inc", "ltd", "co", "u.s", "u.k"}
# Abbreviations before a number: "No. 5" goes on, "Say no. Then" ends.
NUMBER_ABBREVIATIONS = {"no", "nos", "p", "pp"}

_BOUNDARY = re.compile(
    r"(?P<punct>[.!?…]+)(?P<close>[\"'”’)\]]*)(?P<space>\s+|$)"  # Latin: needs a space after
    r"|(?P<wide>[。！？]+)(?P<wide_close>[」』”’)\]]*)(?P<wide_space>\s*)"  # full-width: no space needed
    r"|(?P<newline>\n+)"
)
# A comma after a word ends a clause even at the end of the text so far ("Yes,"): the first
# piece need not wait for the next token.
_CLAUSE_BREAK = re.compile(r"[,;:](?=\s)|" + CLAUSE_MARK_AFTER_WORD + r"|[，、；：]")
# A clause cut leaves at least this much on its left, so no two-word fragments.
MIN_CLAUSE_CHARS = 12
# Words that open a phrase in English (prepositions, conjunctions, relative words): a speaker
# may pause before one, so a reply's first piece may end there. Other languages fall back to
# the word count.
PHRASE_OPENERS = frozenset({
    "about", "after", "and", "around", "as", "at", "because", "before", "between", "but", "by",
    "during", "for", "from", "if", "in", "into", "near", "on", "or", "since", "so", "than", "that",
    "to", "until", "when", "where", "which", "while", "who", "with", "within", "without",
})
# What ends a first piece cut at a word boundary, for the voice only (``voiced``).
WORD_CUT_MARK = ","


class WordCut(str):
    """A reply's first piece cut at a word boundary: reported as written, voiced with a comma."""


def voiced(piece: str) -> str:
    """The text the voice renders for a piece: a word cut ends in WORD_CUT_MARK."""
    return piece + WORD_CUT_MARK if isinstance(piece, WordCut) else piece


class SentenceSegmenter:
    def __init__(self, max_clause_chars: int = 120, first_clause_chars: int = 0,
                 first_clause_words: int = 0, first_clause_min_words: int = 0) -> None:
        self.max_clause_chars = max_clause_chars
        self.first_clause_chars = first_clause_chars  # 0: the first piece is a whole sentence
        self.first_clause_words = first_clause_words  # 0: no cut at a word boundary
        # Before a phrase opener once this many words precede it (0: only the word count).
        self.first_clause_min_words = first_clause_min_words
        self._buffer = ""
        self._started = False  # a piece was cut already: the first-clause rule is spent
        self._word_cut: int | None = None  # where the first piece ends at a word boundary

    def push(self, text: str) -> list[str]:
        """Add streamed text; return the sentences it completed."""
        self._buffer += text
        return self._drain(final=False)

    def flush(self) -> list[str]:
        """The text stream ended: cut what is complete, the rest is the last sentence."""
        sentences = self._drain(final=True)
        rest, self._buffer = self._buffer.strip(), ""
        return [*sentences, rest] if rest else sentences

    def _drain(self, final: bool) -> list[str]:
        sentences: list[str] = []
        while (cut := self._next_cut(final)) is not None:
            sentence, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:]
            if sentence and cut == self._word_cut and not self._started:
                sentence = WordCut(sentence)
            if sentence:
                sentences.append(sentence)
                self._started = True
        return sentences

    def _first_clause_cut(self) -> int | None:
        """Where the reply's first piece may end before its sentence does, if anywhere yet."""
        self._word_cut = None
        if self._started or not self.first_clause_chars:
            return None
        for mark in _CLAUSE_BREAK.finditer(self._buffer):
            if mark.end() >= self.first_clause_chars:
                return mark.end()
        if self.first_clause_words and not _BOUNDARY.search(self._buffer):
            self._word_cut = self._word_boundary_cut()
            return self._word_cut
        return None

    def _word_boundary_cut(self) -> int | None:
        """Before the first phrase opener with ``first_clause_min_words`` words before it, else
        after ``first_clause_words`` words; only whole words count (whitespace after them)."""
        words = list(re.finditer(r"\S+(?=\s)", self._buffer))
        for index, word in enumerate(words):
            if (self.first_clause_min_words and index >= self.first_clause_min_words
                    and word.group().lower() in PHRASE_OPENERS):
                return words[index - 1].end()
            if index + 1 >= self.first_clause_words:
                return word.end()
        return None

    def _next_cut(self, final: bool) -> int | None:
        for match in _BOUNDARY.finditer(self._buffer):
            if match["newline"] is not None:
                return match.end()
            if match["wide"] is not None:
                return match.end()
            if match["space"] == "" and not final:
                # Punctuation at the very end of what we have: the next delta
                # may continue it ("3." + "5 dollars"), so wait for a space.
                continue
            if self._is_boundary(match, final):
                return self._earlier(match.end())
        return self._earlier(None) or self._clause_cut()

    def _earlier(self, boundary: int | None) -> int | None:
        """The sentence boundary, or the reply's first clause when that ends sooner."""
        first = self._first_clause_cut()
        if first is not None and (boundary is None or first < boundary):
            return first
        return boundary

    def _is_boundary(self, match: re.Match[str], final: bool) -> bool:
        punct = match["punct"]
        following = self._buffer[match.end():].split(None, 1)
        next_word = following[0] if following else ""
        if not next_word and not final:
            # "Dr." + " Smith": a space came but the next word did not yet.
            return not self._is_abbreviation(match) and punct not in ("...", "…")
        capital_next = next_word[:1].isupper() and next_word != "I"
        if punct in ("...", "…"):
            # "Wait... Really?" ends; "Well... I think" and "so... maybe" go on.
            return (final and not next_word) or capital_next
        if punct != ".":
            return True
        word = re.split(r"\s", self._buffer[: match.start()])[-1].lower()
        if word in TITLES or _is_initial(self._buffer[: match.start()]):
            return False
        if word in FINAL_ABBREVIATIONS:
            return capital_next or (final and not next_word)
        if word in NUMBER_ABBREVIATIONS:
            return not next_word[:1].isdigit()
        return True

    def _is_abbreviation(self, match: re.Match[str]) -> bool:
        if match["punct"] != ".":
            return False
        before = self._buffer[: match.start()]
        word = re.split(r"\s", before)[-1].lower()
        return word in TITLES | FINAL_ABBREVIATIONS | NUMBER_ABBREVIATIONS or _is_initial(before)

    def _clause_cut(self) -> int | None:
        if len(self._buffer) < self.max_clause_chars:
            return None
        breaks = [m.end() for m in _CLAUSE_BREAK.finditer(self._buffer) if m.end() >= MIN_CLAUSE_CHARS]
        within = [b for b in breaks if b <= self.max_clause_chars]
        if within:
            return within[-1]
        return breaks[0] if breaks else None


def _is_initial(before: str) -> bool:
    """'J' in "J. Smith": one capital Latin letter (not a Korean syllable, not "I")."""
    word = re.split(r"\s", before)[-1]
    return len(word) == 1 and "A" <= word <= "Z" and word != "I"
