"""A turn as the conversation keeps it: its playout, what was heard of it, the calls it began
with, and its output (``TurnChannel``), which lets its audio out only while it is the live turn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace

from voicebot.gateway.events import AudioEnd, AudioFrame, AudioStart, Event, ReplyDelta
from voicebot.gateway.playout import Playout
from voicebot.gateway.preemptive import EarlyReply
from voicebot.gateway.spoken import SpokenTracker
from voicebot.gateway.standby import StandbyCalls
from voicebot.gateway.turn import TurnTimings
from voicebot.v1 import brain_pb2

Events = Sequence[Event] | Callable[[], Sequence[Event]]


class Outlet(Protocol):
    """Where a conversation's events go (the transport, through a codec)."""

    def emit(self, events: Events, still_valid: Callable[[], bool] | None = None) -> Awaitable[bool]:
        """Send the events together (no other event between them); ``events`` may be a function
        that makes them, called once ``still_valid()`` said yes. False only when it said no."""


@dataclass
class ActiveTurn:
    turn_id: str
    text: str
    transcribed: bool
    spoken: SpokenTracker
    playout: Playout
    task: asyncio.Task | None = None
    # The client's last playback.position: played_ms at perf_counter() time.
    played_ms: int | None = None
    played_at: float = 0.0
    played_stopped: bool = False  # the client stopped playback at played_ms (a truncate)
    announced: bool = False  # audio.start went out
    interrupted: bool = False
    timings: TurnTimings | None = None  # a turn through the brain (not a fallback's)
    # A session that asked for text only: the reply's text as it went to the client (None: voice).
    delivered: list[str] | None = None
    outcome: str = ""  # "completed" or "error" once the turn ended by itself
    # What was heard, fixed when the turn was cut off (the client stopped playing then).
    record: brain_pb2.SpokenPart | None = None
    # The brain's dialog state after this turn (its final's): "confirm" when the reply asked
    # for a yes, so the next turn may be the one that writes.
    dialog_state: str = ""
    # This turn may carry out a write (it answers a question for a yes, or follows a turn whose
    # end the brain never reported): cancelled, its words are never sent again (turn_driver.py).
    may_write: bool = False

    def heard_ms_reported(self, now: float) -> float | None:
        """The client's position now: its report plus the time since, while it had audio."""
        if self.played_ms is None:
            return None
        if self.played_stopped:
            return self.played_ms
        return self.played_ms + (now - self.played_at) * 1000

    def report(self, now: float, slack_ms: float) -> brain_pb2.SpokenPart | None:
        """What the person heard of this reply, for the brain: the audio played (the client's own
        position where it reports one, else what was sent less what it still buffers), or the
        text delivered to a text-only session. ``interrupted`` whenever that is not the whole
        reply (a barge-in, a failure, a sentence TTS could not speak); the brain then keeps only
        the heard part, and a read-back counts as heard only from the words reported here."""
        if not self.text:
            return None  # a fallback with no turn around it answers nothing
        if self.record is not None:
            return self.record
        if self.delivered is not None:
            heard, whole = "".join(self.delivered).strip(), True
        else:
            played = self.heard_ms_reported(now)
            heard = self.spoken.spoken_text(played, now)
            whole = self.spoken.heard_all(played, now, slack_ms)
        whole = whole and self.outcome == "completed" and not self.interrupted
        return brain_pb2.SpokenPart(turn_id=self.turn_id, text=heard, interrupted=not whole,
                                    user_text="" if whole else self.text)

    def heard_any(self, now: float) -> bool:
        """The caller has heard some of the reply: the client played some of its audio (its own
        report, else what was sent less what it still buffers), or a text-only session was sent
        some of its text."""
        if self.delivered is not None:
            return any(self.delivered)
        return self.spoken.heard_ms(self.heard_ms_reported(now), now) > 0

    def audible(self, now: float) -> bool:
        """The reply is being made or heard (and was not interrupted)."""
        if self.interrupted or self.task is None:
            return False
        return not self.task.done() or self.spoken.playing(now)


@dataclass
class TurnStart:
    """The calls a turn begins with: a reply started before the endpoint (preemptive.py), the
    calls opened at the onset (standby.py)."""

    early: EarlyReply | None = None
    standby: StandbyCalls | None = None

    def release(self, _task: asyncio.Task | None = None) -> None:
        """The turn's task ended: these calls end too, even if the task never ran (cancelled
        before its first step, it runs no ``finally``); a call that is over stays as it is.
        A brain call the turn did make is ended by the turn itself (``TurnRunner.run``)."""
        if self.standby is not None:
            self.standby.cancel()
        if self.early is not None:
            self.early.call.cancel()


@dataclass
class WaitingTurn:
    """A final's turn waiting until the caller heard some of the reply kept for them."""

    text: str
    timings: TurnTimings
    span: trace.Span | None
    early: EarlyReply | None
    standby: StandbyCalls | None
    task: asyncio.Task | None = None

    def cancel(self) -> str:
        """Never started: its calls end, and its words go to the turn that took its place."""
        if self.task is not None:
            self.task.cancel()
        if self.early is not None:
            self.early.discard()
        if self.standby is not None:
            self.standby.cancel()
        if self.span is not None:
            self.span.set_attribute("voicebot.turn.outcome", "joined")
            self.span.end()
        return self.text


class TurnChannel:
    """A turn's output: its audio goes out only while it is the live, unpaused turn."""

    def __init__(self, out: Outlet, turn: ActiveTurn, live: Callable[[ActiveTurn], bool]) -> None:
        self.out, self.turn, self._is_live = out, turn, live

    def _live(self) -> bool:
        return not self.turn.interrupted and self._is_live(self.turn)

    async def event(self, event: Event) -> None:
        if isinstance(event, ReplyDelta) and self.turn.delivered is not None:
            self.turn.delivered.append(event.text)  # a text-only session reads what it was sent
        await self.out.emit((event,))

    async def audio(self, frame: bytes, start: bool = False) -> bool:
        # Checked under the send lock: once `interrupt` is out, no frame of the turn follows,
        # and once the playout is paused, none until it resumes.
        sent = await self.out.emit(lambda: self._audio_events(frame, start),
                                   still_valid=lambda: self._live() and not self.turn.playout.paused)
        return sent or not self._live()  # not live: the playout is stopped, the frame is moot

    def _audio_events(self, frame: bytes, start: bool) -> list[Event]:
        """The frame, after ``audio.start`` when it starts the turn's audio (not when a fallback
        after part of the reply continues it): one write, one read for the client."""
        events: list[Event] = []
        if start and not self.turn.announced:
            events.append(AudioStart(self.turn.turn_id))
            self.turn.announced = True
        events.append(AudioFrame(self.turn.turn_id, frame, self.turn.spoken.sent_ms))
        return events

    async def audio_end(self) -> None:
        await self.out.emit((AudioEnd(self.turn.turn_id),), still_valid=self._live)
