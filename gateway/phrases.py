"""The brain's text deltas (a word or a token each) joined into phrases on their way to TTS and
to the client: one gRPC message and one ``reply.delta`` per phrase instead of per word.

It costs no speech time: TTS cannot start a sentence (or a clause at a comma) before its
punctuation has arrived, and the text goes out as soon as a phrase boundary is in it, with
everything after the boundary that has arrived too. So TTS sees each boundary as early as it
would have word by word, including what follows it, which it needs to tell "3." from "3.5"
or "p.m. See" from "p.m. sharp". A long run without punctuation goes out at ``max_chars``;
anything that is not text (a tool call, the end of the reply) flushes what is held.
"""

from __future__ import annotations

import re

from voicebot.common.speech_text import CLAUSE_MARK_AFTER_WORD

# Latin punctuation needs whitespace after it (what TTS's segmenter cuts on), full-width does not;
# nor does a comma right after a word, which goes at once instead of one token later.
_BOUNDARY = re.compile(r"[.!?…,;:][\"'”’)\]]*\s|" + CLAUSE_MARK_AFTER_WORD + r"|[。！？，、；：]|\n")


class PhraseCoalescer:
    def __init__(self, max_chars: int = 160) -> None:
        self.max_chars = max_chars
        self._buffer = ""

    def push(self, text: str) -> str | None:
        """Add a delta; returns the text to send now, if a phrase is complete."""
        if not text:
            return None
        # Only the new delta, with the few characters before it, can complete a boundary.
        start = max(0, len(self._buffer) - 4)
        self._buffer += text
        if len(self._buffer) >= self.max_chars or _BOUNDARY.search(self._buffer, start):
            return self.flush()
        return None

    def flush(self) -> str | None:
        text, self._buffer = self._buffer, ""
        return text or None
