"""WebSocket protocol v1 (docs/protocols.md): parsing client messages, building server events.

Every parse problem is a ``ProtocolError`` with one of the documented codes;
the caller turns it into an ``error`` event and the session goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SUPPORTED_RATES = (8000, 16000, 24000, 48000)
OUTPUTS = ("audio", "text")


class ProtocolError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SessionStart:
    session_id: str | None
    language: str
    sample_rate: int
    # "text": the replies come as text events only (a chat client): no TTS, no audio.
    output: str = "audio"


@dataclass(frozen=True)
class InputText:
    text: str


@dataclass(frozen=True)
class PlaybackPosition:
    turn_id: str
    played_ms: int


@dataclass(frozen=True)
class SessionEnd:
    pass


ClientMessage = SessionStart | InputText | PlaybackPosition | SessionEnd


def parse_client_text(raw: str, max_text_chars: int) -> ClientMessage:
    try:
        message = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        raise ProtocolError("bad_request", "message is not valid JSON") from None
    if not isinstance(message, dict):
        raise ProtocolError("bad_request", "message must be a JSON object")
    kind = message.get("type")
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise ProtocolError("bad_request", f"unknown message type {kind!r}")
    return parser(message, max_text_chars)


def _session_start(message: dict[str, Any], _limit: int) -> SessionStart:
    session_id = message.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not 0 < len(session_id) <= 64):
        raise ProtocolError("bad_request", "session_id must be null or a string of 1-64 characters")
    language = message.get("language") or "en"
    if not isinstance(language, str) or not 2 <= len(language) <= 8:
        raise ProtocolError("bad_request", "language must be a language code such as 'en'")
    audio = message.get("audio") or {}
    if not isinstance(audio, dict):
        raise ProtocolError("bad_request", "audio must be an object")
    encoding = audio.get("encoding", "pcm16")
    rate = audio.get("sample_rate", 16000)
    if encoding != "pcm16":
        raise ProtocolError("bad_request", "audio.encoding must be 'pcm16'")
    if rate not in SUPPORTED_RATES or isinstance(rate, bool):
        raise ProtocolError(
            "bad_request", f"audio.sample_rate must be one of {list(SUPPORTED_RATES)}"
        )
    output = message.get("output", "audio")
    if output not in OUTPUTS:
        raise ProtocolError("bad_request", "output must be 'audio' or 'text'")
    return SessionStart(session_id, language.lower(), int(rate), output)


def _input_text(message: dict[str, Any], limit: int) -> InputText:
    text = message.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ProtocolError("bad_request", "input.text needs a non-empty 'text' string")
    if len(text) > limit:
        raise ProtocolError("payload_too_large", f"text is over {limit} characters")
    return InputText(text.strip())


def _playback_position(message: dict[str, Any], _limit: int) -> PlaybackPosition:
    turn_id, played = message.get("turn_id"), message.get("played_ms")
    if not isinstance(turn_id, str) or not isinstance(played, int) or isinstance(played, bool) or played < 0:
        raise ProtocolError("bad_request", "playback.position needs 'turn_id' and 'played_ms' >= 0")
    return PlaybackPosition(turn_id, played)


_PARSERS = {
    "session.start": _session_start,
    "input.text": _input_text,
    "playback.position": _playback_position,
    "session.end": lambda _m, _l: SessionEnd(),
}


def event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


def error_event(code: str, message: str) -> str:
    return event("error", code=code, message=message)
