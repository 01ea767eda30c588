"""One turn until the caller has heard the reply: a pure decision (no tasks, no clock of its own).

A pause inside a sentence can end an utterance: the endpointer cannot tell it from the end of a
turn, and the turn driver starts the reply. If the caller goes on speaking before any of that
reply was heard, the pause was not the end: the reply is cancelled (brain and TTS) and the next
final is answered with both parts' words, so a short endpoint costs a cancelled reply, not a
caller answered half-way. After some of the reply was heard, speech is a barge-in as before.

Two bounds. A turn that may have written (it answers a question for a yes: the brain writes only
after one) is never cancelled this way: its words would be sent again and the write re-run; it
is a barge-in. And a caller who keeps resuming (a television in the room) gets at most one
cancelled reply per ``min_interval_s`` (GATEWAY_RESUME_MIN_INTERVAL_S): within it the reply is
*kept*: it goes out, and a final that comes before any of it was heard waits for that.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Onset(enum.Enum):
    BARGE_IN = "barge_in"  # judge the speech as a barge-in (bargein.py), nothing more
    RESUME = "resume"  # the same: once confirmed, the reply is cancelled and the turn goes on
    KEEP = "keep"  # neither: the reply goes out, the speech is not weighed against it


@dataclass
class ResumePolicy:
    min_interval_s: float
    # (turn id, utterance): that utterance began before any of that turn's reply was heard.
    resumed_over: tuple[str, int] | None = None
    cancelled_at: float | None = None  # the last reply cancelled unheard (a clock reading)
    kept: str | None = None  # the turn whose reply goes out although speech resumed over it

    def onset(self, turn_id: str, utterance: int, *, spoken_turn: bool, heard: bool, may_write: bool,
              now: float) -> Onset:
        """Speech began while the turn's reply is being made or heard. ``spoken_turn``: the turn
        answers speech (a typed turn is not continued by speech); ``heard``: some of its reply
        reached the caller."""
        if not spoken_turn or heard or may_write:
            return Onset.BARGE_IN
        if self.cancelled_at is not None and now - self.cancelled_at < self.min_interval_s:
            self.kept = turn_id
            return Onset.KEEP
        self.resumed_over = (turn_id, utterance)
        return Onset.RESUME

    def confirmed(self, turn_id: str, utterance: int, now: float) -> bool:
        """The speech was confirmed: True when it cancels the turn's reply unheard (then the turn
        goes on), False when it is a barge-in."""
        resumed, self.resumed_over = self.resumed_over == (turn_id, utterance), None
        if resumed:
            self.cancelled_at = now
        return resumed

    def false_start(self) -> None:
        self.resumed_over = None

    def waits_for(self, turn_id: str) -> bool:
        """A final's turn waits until some of this turn's reply was heard (it was kept)."""
        return turn_id == self.kept
