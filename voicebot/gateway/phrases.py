"""The brain's text deltas (a word or a token each) joined into phrases on their way to TTS and
to the client: one gRPC message and one ``reply.delta`` per phrase instead of per word.

It costs no speech time: TTS cannot start a sentence (or a clause at a comma) before its
punctuation has arrived, and the text goes out as soon as a phrase boundary is in it, with
everything after the boundary that has arrived too. So TTS sees each boundary as early as it
would have word by word, including what follows it, which it needs to tell "3." from "3.5"
or "p.m. See" from "p.m. sharp". A long run without punctuation goes out at ``max_chars``;
anything that is not text (a tool call, the end of the reply) flushes what is held.

Except at the reply's start: TTS may begin its first piece at a word boundary when no comma
comes (TTS_FIRST_CLAUSE_WORDS and _MIN_WORDS), so the first ``first_words`` words go on as each
is complete, until the first punctuation mark. Held until the full stop, a long first sentence
reached TTS in one piece, hundreds of ms of decode after its first word (``make bench-v2v``):
TTS's word rule could never apply.
"""

from __future__ import annotations

import re

from voicebot.common.speech_text import CLAUSE_MARK_AFTER_WORD

# Latin punctuation needs whitespace after it (what TTS's segmenter cuts on), full-width does not;
# nor does a comma right after a word, which goes at once instead of one token later.
_BOUNDARY = re.compile(r"[.!?…,;:][\"'”’)\]]*\s|" + CLAUSE_MARK_AFTER_WORD + r"|[。！？，、；：]|\n")
# A run without punctuation goes out at this length. One message per word instead (the bench's
# former ``messages-per-frame`` variant) cost gRPC and WebSocket work per token and saved no time.
MAX_CHARS = 160
# Whitespace in a delta: the word before it is complete.
_SPACE = re.compile(r"\s+")


class PhraseCoalescer:
    def __init__(self, max_chars: int = MAX_CHARS, first_words: int = 0) -> None:
        self.max_chars = max_chars
        self.first_words = first_words  # the reply's first words go on one by one (0: never)
        self._buffer = ""
        self._words_sent = 0
        self._punctuated = False  # a phrase boundary went out: coalescing from here on

    def push(self, text: str) -> str | None:
        """Add a delta; returns the text to send now, if a phrase is complete."""
        if not text:
            return None
        # Only the new delta, with the few characters before it, can complete a boundary.
        start = max(0, len(self._buffer) - 4)
        self._buffer += text
        if len(self._buffer) >= self.max_chars or _BOUNDARY.search(self._buffer, start):
            self._punctuated = True
            return self.flush()
        if not self._punctuated and self._words_sent < self.first_words and _SPACE.search(text):
            # A word is complete (the space after it came): TTS may cut before or after it.
            self._words_sent += len(_SPACE.findall(text))
            return self.flush()
        return None

    def flush(self) -> str | None:
        text, self._buffer = self._buffer, ""
        return text or None
