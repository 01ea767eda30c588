"""Which part of a reply the person can have heard: a leaf module (imports nothing of the gateway).

The playout paces its sending by this model and the barge-in record is cut by it, so the
two can never disagree about what the client holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class SpokenTracker:
    """Which part of a reply the person can have heard.

    Sentences sit on the reply's audio timeline as TTS delivers them
    (``audio_received``); the audio leaves for the client later, paced
    (``audio_sent``); the client plays it in real time, so ``play_end`` is when
    it will have played everything sent so far. Heard is the client's own
    report when there is one, else what was sent less what is still
    buffered at the client. The same model paces the sending (voicebot/gateway/playout.py),
    so the estimate and the pacing cannot disagree.
    """

    sample_rate: int
    # [text, start_ms, end_ms] on the audio timeline.
    sentences: list[list] = field(default_factory=list)
    received_ms: float = 0.0
    sent_ms: float = 0.0
    play_end: float | None = None
    # Some of the reply was never voiced: a sentence TTS could not speak, text past its cap.
    skipped: bool = False
    # Where the reply's own audio ended (``cut``): audio sent after it is not the reply's.
    cut_ms: float | None = None
    # The last sentence's audio is still coming (TTS has not said it is done).
    sentence_open: bool = False

    def _ms(self, nbytes: int) -> float:
        return nbytes * 1000 / (2 * self.sample_rate)

    def sentence_started(self, text: str) -> None:
        self.sentences.append([text, self.received_ms, self.received_ms])
        self.sentence_open = True

    def sentence_done(self) -> None:
        self.sentence_open = False

    def audio_received(self, nbytes: int) -> None:
        self.received_ms += self._ms(nbytes)
        if self.sentences:
            self.sentences[-1][2] = self.received_ms

    def sentence_failed(self) -> None:
        """TTS could not speak the current sentence: without audio, nobody heard it; with part
        of it, which words that part holds is not known. (An error after a finished sentence,
        e.g. the text past TTS's cap, leaves that sentence be.)"""
        self.skipped = True
        if self.sentences and (self.sentence_open or self.sentences[-1][1] == self.sentences[-1][2]):
            self.sentences.pop()
        self.sentence_open = False

    def cut(self) -> None:
        """The reply failed: its audio ends with what was sent (the rest was dropped), and what
        follows on the same timeline (the fallback sentence) is none of its words. A sentence
        whose audio had not all come is dropped: which of its words the part that came holds
        is not known (its timeline ends where its audio stopped)."""
        if self.cut_ms is not None:
            return
        self.cut_ms = self.sent_ms
        if self.sentence_open and self.sentences:
            self.sentences.pop()
            self.sentence_open = False

    def audio_sent(self, nbytes: int, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        self.sent_ms += self._ms(nbytes)
        # A client that ran dry starts again from now, not from where it stopped.
        self.play_end = max(self.play_end or now, now) + self._ms(nbytes) / 1000

    def buffered_ms(self, now: float | None = None) -> float:
        """Audio sent but not yet played at the client (estimate)."""
        if self.play_end is None:
            return 0.0
        now = time.perf_counter() if now is None else now
        return max(0.0, (self.play_end - now) * 1000)

    def playing(self, now: float | None = None) -> bool:
        return self.buffered_ms(now) > 0

    def heard_ms(self, played_ms: float | None = None, now: float | None = None) -> float:
        """What the client played of the reply: its own report, else what it was sent less its
        buffer; never past the reply's ``cut``."""
        if played_ms is not None:
            heard = max(0.0, min(played_ms, self.sent_ms))
        else:
            heard = max(0.0, self.sent_ms - self.buffered_ms(now))
        return heard if self.cut_ms is None else min(heard, self.cut_ms)

    def heard_all(self, played_ms: float | None = None, now: float | None = None,
                  slack_ms: float = 0.0) -> bool:
        """Every sentence was voiced and played to its end (within ``slack_ms``: a client reports
        its position a frame at a time), and the reply was not cut."""
        if self.skipped or self.cut_ms is not None:
            return False
        return self.heard_ms(played_ms, now) >= self.received_ms - slack_ms

    def spoken_text(self, played_ms: float | None = None, now: float | None = None) -> str:
        heard = self.heard_ms(played_ms, now)
        words: list[str] = []
        for text, start, end in self.sentences:
            if heard >= end:
                words += text.split()
            elif heard > start:
                # Part of a sentence: keep the share of words its audio covered.
                share = (heard - start) / max(1.0, end - start)
                sentence_words = text.split()
                words += sentence_words[: int(len(sentence_words) * share)]
                break
            else:
                break
        return " ".join(words)
