"""What a conversation takes in and gives out, whatever the wire.

A codec (``codec_v1.py``, ``codec_realtime.py``, ``codec_twilio.py``) decodes a client's messages
into the *inputs* below and encodes the conversation's *events* into its own messages; the
conversation (``conversation.py``) never sees a socket or a wire format. The events are named
after protocol v1's (``kind``), whose encoding is the identity; the other codecs translate them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from voicebot.gateway.protocol import SessionStart

# ---- inputs: a client's messages, decoded ----------------------------------------------------
# A message straight back to the client (an acknowledgement, an error only the codec knows):
# ``error`` names the error code it is counted under, if it is one.
Frames = tuple[str, ...]


@dataclass(frozen=True)
class Reply:
    frames: Frames
    error: str | None = None


@dataclass(frozen=True)
class Start:
    """Open the session (v1's session.start, Twilio's start): ``context`` is the call's metadata
    for the brain (a phone bridge's custom parameters), never the user id."""

    session: SessionStart
    context: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Audio:
    pcm: bytes  # PCM16 mono at the session's input rate


@dataclass(frozen=True)
class Say:
    """A typed turn (v1's input.text, the Realtime API's response.create)."""

    text: str


@dataclass(frozen=True)
class Played:
    """The client plays the turn's audio at ``played_ms`` (v1's playback.position, a Twilio mark)."""

    turn_id: str
    played_ms: int


@dataclass(frozen=True)
class Truncated:
    """The client stopped the turn's audio at ``played_ms``; ``done`` goes back when that turn is
    known, ``refused`` when it is not."""

    turn_id: str
    played_ms: int
    done: Frames = ()
    refused: Frames = ()


@dataclass(frozen=True)
class Configure:
    """New audio formats, language or output (the Realtime API's session.update)."""

    language: str
    input_rate: int
    output_rate: int
    text_only: bool


@dataclass(frozen=True)
class Cancel:
    """Stop the reply in progress (response.cancel); ``refused`` when none is."""

    refused: Frames = ()


@dataclass(frozen=True)
class Commit:
    """Close the open utterance now (input_audio_buffer.commit): the endpointer gets
    ``silence_ms`` of silence; ``refused`` when no utterance is open."""

    silence_ms: int
    refused: Frames = ()


@dataclass(frozen=True)
class End:
    """The client ends the session."""


@dataclass(frozen=True)
class Close:
    """The socket is to be closed with ``code`` (an unauthorized stream)."""

    code: int
    reason: str


Input = Reply | Start | Audio | Say | Played | Truncated | Configure | Cancel | Commit | End | Close


# ---- events: what the conversation says ------------------------------------------------------
@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = ""

    def fields(self) -> dict[str, Any]:
        """The event's fields as v1 sends them."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class SessionStarted(Event):
    kind: ClassVar[str] = "session.started"
    session_id: str
    sample_rate: int
    output: str

    def fields(self) -> dict[str, Any]:
        return {"session_id": self.session_id,
                "audio": {"encoding": "pcm16", "sample_rate": self.sample_rate}, "output": self.output}


@dataclass(frozen=True)
class TranscriptPartial(Event):
    kind: ClassVar[str] = "transcript.partial"
    text: str

    def fields(self) -> dict[str, Any]:
        return {"turn_id": "", "text": self.text}


@dataclass(frozen=True)
class TranscriptFinal(Event):
    kind: ClassVar[str] = "transcript.final"
    turn_id: str
    text: str


@dataclass(frozen=True)
class ReplyDelta(Event):
    kind: ClassVar[str] = "reply.delta"
    turn_id: str
    text: str


@dataclass(frozen=True)
class ReplyDone(Event):
    kind: ClassVar[str] = "reply.done"
    turn_id: str
    text: str


@dataclass(frozen=True)
class AudioStart(Event):
    kind: ClassVar[str] = "audio.start"
    turn_id: str


@dataclass(frozen=True)
class AudioFrame(Event):
    """Reply audio (PCM16 at the output rate); ``offset_ms``: how much of the turn's audio went
    before it."""

    kind: ClassVar[str] = "audio"
    turn_id: str
    pcm: bytes
    offset_ms: float = 0.0


@dataclass(frozen=True)
class AudioEnd(Event):
    kind: ClassVar[str] = "audio.end"
    turn_id: str


@dataclass(frozen=True)
class Interrupted(Event):
    """The turn's audio was cut off (a barge-in, a newer turn)."""

    kind: ClassVar[str] = "interrupt"
    turn_id: str


@dataclass(frozen=True)
class TurnMetrics(Event):
    kind: ClassVar[str] = "turn.metrics"
    turn_id: str
    ms: dict[str, int | None]


@dataclass(frozen=True)
class TurnOver(Event):
    """A turn ended by itself: ``outcome`` "completed" or "error" (not sent when cancelled)."""

    kind: ClassVar[str] = "turn.over"
    turn_id: str
    outcome: str


@dataclass(frozen=True)
class ReplyCancelled(Event):
    """The client's Cancel stopped the turn."""

    kind: ClassVar[str] = "reply.cancelled"
    turn_id: str


@dataclass(frozen=True)
class Speech(Event):
    """Speech started (``started``) or the utterance ended, ``behind_ms`` before the end of the
    audio received so far."""

    kind: ClassVar[str] = "speech"
    started: bool
    behind_ms: int


@dataclass(frozen=True)
class Error(Event):
    """An error for the client; ``turn_id``: the turn it fails, if any."""

    kind: ClassVar[str] = "error"
    code: str
    message: str
    turn_id: str | None = None

    def fields(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Hangup(Event):
    """The conversation ends the session: the socket closes with ``code``."""

    kind: ClassVar[str] = "hangup"
    code: int
    reason: str
