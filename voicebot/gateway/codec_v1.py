"""Protocol v1 (``/v1/call``, ``protocol-v1.schema.json``, docs/protocols.md): JSON text messages
both ways, reply audio as binary PCM16 messages, the caller's audio as binary messages.

The conversation's events are v1's own, so encoding is the identity; decoding is
``protocol.parse_client_text``, whose ``ProtocolError`` goes back as an ``error`` event.
"""

from __future__ import annotations

from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import (
    Audio,
    AudioFrame,
    End,
    Event,
    Input,
    Played,
    Reply,
    ReplyCancelled,
    Say,
    Speech,
    Start,
    TurnOver,
)
from voicebot.gateway.protocol import (
    InputText,
    PlaybackPosition,
    ProtocolError,
    SessionEnd,
    SessionStart,
    error_event,
    event,
    parse_client_text,
)

# The conversation's events v1 does not send.
SILENT = (TurnOver, ReplyCancelled, Speech)


class V1Codec:
    # Binary messages are the caller's audio, taken as they are: the transport may hand them to
    # the conversation where the socket reads them (ws_direct.py).
    binary_audio = True
    output_rate: int | None = None  # GATEWAY_OUTPUT_SAMPLE_RATE

    def __init__(self, settings: GatewaySettings) -> None:
        self.max_text_chars = settings.max_text_chars
        self.max_message_bytes = settings.max_message_bytes

    def opening(self) -> list[SessionStart]:
        """A v1 client opens its session itself (session.start)."""
        return []

    def decode_text(self, raw: str) -> list[Input]:
        if len(raw) > self.max_message_bytes:
            return [_error("payload_too_large", "text frame too large")]
        try:
            message = parse_client_text(raw, self.max_text_chars)
        except ProtocolError as exc:
            return [_error(exc.code, exc.message)]
        if isinstance(message, SessionStart):
            return [Start(message)]
        if isinstance(message, InputText):
            return [Say(message.text)]
        if isinstance(message, PlaybackPosition):
            return [Played(message.turn_id, message.played_ms)]
        assert isinstance(message, SessionEnd)
        return [End()]

    def decode_bytes(self, data: bytes) -> list[Input]:
        return [Audio(data)]

    def encode(self, ev: Event) -> list[str | bytes]:
        if isinstance(ev, AudioFrame):
            return [ev.pcm]
        if isinstance(ev, SILENT):
            return []
        return [event(ev.kind, **ev.fields())]


def _error(code: str, message: str) -> Reply:
    return Reply((error_event(code, message),), error=code)
