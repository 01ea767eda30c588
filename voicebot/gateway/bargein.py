"""Barge-in decisions as a pure state machine: STT events, playout state and clock readings in,
decisions out (no sockets, no tasks, no clock of its own).

Why it works this way. The person may start speaking while the bot's reply is in flight
(being made or being heard). A cough, a click or a short "mm" must not cut the bot off, yet
the bot must not talk over a real interruption either. So it goes in two steps:

1. ``SpeechStarted`` (the STT's VAD saw ~64 ms of speech) while a reply is audible: **pause**.
   The caller stops the playout within one frame; nothing is dropped, and the client keeps
   playing the short lead it holds, so a pause that ends soon is not heard at all.
2. **confirm** on a partial (or final) transcript with words over at least ``min_words_ms`` of
   speech (Whisper readily hears "up" or "you" in a click; fillers such as "uh", "mm" are not
   words here), or on ``min_speech_ms`` since the onset while the utterance is still open,
   counted both in stream time and in wall time (see ``Pending.long_enough``). That figure
   includes the endpointer's closing silence (the gateway only learns that speech ended from
   ``EndOfUtterance``), so it must stay above that silence plus the longest noise to ignore.
   Not confirmed (``EndOfUtterance`` came first and the final has no such words): **resume**,
   a false start; that final is not a turn either. The STT stream ending also resumes: with
   no recogniser there is no confirmation, and a paused reply must not wait for ever.

Everything else is **ignore**. The detector knows the turn only by its id; whether that turn is
still the live one when a decision comes back is the caller's business.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

# Sounds that are not an interruption when they are all there is.
FILLERS = {"uh", "um", "umm", "er", "erm", "eh", "ah", "oh", "mm", "mmm", "hm", "hmm", "mhm", "uh-huh"}


def has_words(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def spoken_words(text: str) -> list[str]:
    """The words of a transcript that mean something (fillers and backchannels left out)."""
    return [w for w in re.findall(r"[\w'-]+", text.lower()) if w.strip("'-") not in FILLERS]


class Action(enum.Enum):
    IGNORE = "ignore"
    PAUSE = "pause"  # hold the reply's audio: speech started over it
    CONFIRM = "confirm"  # a real interruption: stop the reply, send `interrupt`
    RESUME = "resume"  # a false start: the reply goes on from where it paused


@dataclass(frozen=True)
class Rules:
    min_speech_ms: int = 600
    min_words_ms: int = 200


@dataclass
class Pending:
    """Speech started while a reply was audible; not yet confirmed."""

    turn_id: str
    utterance: int
    onset_ms: int
    detected_at: float  # clock reading when SpeechStarted reached the gateway
    # Stream time already received when SpeechStarted came: how far STT runs behind.
    detected_stream_ms: int = 0
    ended: bool = False  # EndOfUtterance came: the final transcript decides

    def long_enough(self, received_ms: int, now: float, min_speech_ms: int) -> bool:
        """The utterance is still open after ``min_speech_ms`` since its onset.

        Counted in stream time (the audio received) *and* in wall time since SpeechStarted: a
        client that sends a burst of audio is ahead of what STT has processed, and the
        EndOfUtterance of a short sound may still be on its way.
        """
        if self.ended:
            return False
        detected_late_ms = self.detected_stream_ms - self.onset_ms
        return (received_ms - self.onset_ms >= min_speech_ms
                and (now - self.detected_at) * 1000 + detected_late_ms >= min_speech_ms)


@dataclass(frozen=True)
class Decision:
    action: Action
    pending: Pending | None = None  # the barge-in it is about (for PAUSE, CONFIRM, RESUME)
    reason: str = ""  # CONFIRM: partial | final | min_speech; RESUME: false_start | stt_ended


IGNORE = Decision(Action.IGNORE)


class BargeInDetector:
    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.pending: Pending | None = None

    def speech_started(self, utterance: int, onset_ms: int, *, audible_turn: str | None,
                       received_ms: int, now: float) -> Decision:
        """``audible_turn``: the id of the reply being made or heard now, None when there is none."""
        if audible_turn is None:
            return IGNORE
        self.pending = Pending(audible_turn, utterance, onset_ms, now, received_ms)
        return Decision(Action.PAUSE, self.pending)

    def end_of_utterance(self, utterance: int) -> Decision:
        if self.pending is not None and self.pending.utterance == utterance:
            self.pending.ended = True
        return IGNORE

    def transcript(self, utterance: int, text: str, start_ms: int, end_ms: int, final: bool) -> Decision:
        pending = self.pending
        if pending is None or pending.utterance != utterance:
            return IGNORE
        if spoken_words(text) and end_ms - start_ms >= self.rules.min_words_ms:
            return self._take(Action.CONFIRM, "final" if final else "partial")
        if final:
            return self._take(Action.RESUME, "false_start")
        return IGNORE

    def audio(self, received_ms: int, now: float) -> Decision:
        """More audio arrived: a long enough open utterance confirms."""
        pending = self.pending
        if pending is not None and pending.long_enough(received_ms, now, self.rules.min_speech_ms):
            return self._take(Action.CONFIRM, "min_speech")
        return IGNORE

    def stt_ended(self) -> Decision:
        return self._take(Action.RESUME, "stt_ended") if self.pending is not None else IGNORE

    def clear(self) -> None:
        """A new turn took over (it interrupts the old one anyway): forget without a decision."""
        self.pending = None

    def _take(self, action: Action, reason: str) -> Decision:
        pending, self.pending = self.pending, None
        return Decision(action, pending, reason)
