"""Cut streamed text into sentences as soon as each one is complete.

Boundaries: . ! ? … and their full-width/Korean forms, followed by a space or
the end of input. Not boundaries: abbreviations (Dr. Mr. e.g.), decimals
(3.5), times (7.30), initials, and an ellipsis in the middle of a thought
only ends a sentence when a capital letter follows. A clause longer than
``max_clause_chars`` is cut at its last comma so the first audio is not held
back by a long sentence.
"""

from __future__ import annotations

import re

ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e",
    "a.m", "p.m", "no", "approx", "dept", "inc", "ltd", "co", "mt", "ft",
}
_END_CHARS = ".!?…。！？"
_BOUNDARY = re.compile(r"([.!?…。！？]+)([\"'”’)\]]*)(\s+|$)")


class SentenceSegmenter:
    def __init__(self, max_clause_chars: int = 120) -> None:
        self.max_clause_chars = max_clause_chars
        self._buffer = ""

    def push(self, text: str) -> list[str]:
        """Add streamed text; return the sentences it completed."""
        self._buffer += text
        sentences: list[str] = []
        while (cut := self._next_cut(final=False)) is not None:
            sentence, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:]
            if sentence:
                sentences.append(sentence)
        return sentences

    def flush(self) -> list[str]:
        """The text stream ended: whatever is left is the last sentence."""
        sentences = self.push("")
        rest, self._buffer = self._buffer.strip(), ""
        return [*sentences, rest] if rest else sentences

    def _next_cut(self, final: bool) -> int | None:
        for match in _BOUNDARY.finditer(self._buffer):
            end = match.end()
            if match.group(3) == "" and not final:
                # Punctuation at the very end of what we have: the next delta
                # may continue it ("3." + "5 dollars"), so wait for a space.
                continue
            if self._is_boundary(match):
                return end
        return self._clause_cut()

    def _is_boundary(self, match: re.Match[str]) -> bool:
        punct = match.group(1)
        before = self._buffer[: match.start()]
        if punct == ".":
            word = re.split(r"\s", before)[-1].lower().rstrip(".")
            if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                return False
        if punct in ("...", "…"):
            # "Wait... Really?" ends; "Well... I think" and "so... maybe" go on.
            following = self._buffer[match.end():].split(" ", 1)[0]
            return following[:1].isupper() and following != "I"
        return True

    def _clause_cut(self) -> int | None:
        if len(self._buffer) < self.max_clause_chars:
            return None
        comma = max(self._buffer.rfind(", ", 0, self.max_clause_chars),
                    self._buffer.rfind("，", 0, self.max_clause_chars))
        return comma + 1 if comma > 0 else None


def is_sentence_end(text: str) -> bool:
    return text.rstrip()[-1:] in _END_CHARS
