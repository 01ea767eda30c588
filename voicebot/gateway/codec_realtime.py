"""``/v1/realtime``: the OpenAI Realtime API (GA event names) as a codec on the conversation.

Client events decode into the conversation's inputs (audio, a typed turn, a truncation, a
cancel, new formats) and its events encode as Realtime server events, so STT, the brain with
its policy, TTS and barge-in are the very same code as on ``/v1/call``.

A turn is one Realtime response with one assistant message item (``item_<turn id>``) and one
audio content part whose transcript is the reply text. What is honoured or not is listed in
docs/protocols.md ("OpenAI Realtime API").
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import (
    Audio,
    AudioEnd,
    AudioFrame,
    AudioStart,
    Cancel,
    Commit,
    Configure,
    Error,
    Event,
    Input,
    Interrupted,
    Reply,
    ReplyCancelled,
    ReplyDelta,
    ReplyDone,
    Say,
    SessionStarted,
    Speech,
    TranscriptFinal,
    TranscriptPartial,
    Truncated,
    TurnMetrics,
    TurnOver,
)
from voicebot.gateway.g711 import alaw_to_pcm16, pcm16_to_alaw, pcm16_to_ulaw, ulaw_to_pcm16
from voicebot.gateway.protocol import SessionStart

PCM_RATE = 24000  # the only rate of OpenAI's audio/pcm
G711_RATE = 8000
# Beta names (input_audio_format: "pcm16") next to GA ones (audio.input.format.type).
FORMATS = {"audio/pcm": "audio/pcm", "pcm16": "audio/pcm", "audio/pcmu": "audio/pcmu",
           "g711_ulaw": "audio/pcmu", "audio/pcma": "audio/pcma", "g711_alaw": "audio/pcma"}
DECODERS = {"audio/pcmu": ulaw_to_pcm16, "audio/pcma": alaw_to_pcm16}
ENCODERS = {"audio/pcmu": pcm16_to_ulaw, "audio/pcma": pcm16_to_alaw}
# Our error codes as OpenAI error types.
ERROR_TYPES = {"bad_request": "invalid_request_error", "payload_too_large": "invalid_request_error",
               "not_found": "invalid_request_error", "rate_limited": "rate_limit_error",
               "too_many_sessions": "rate_limit_error", "idle_timeout": "invalid_request_error",
               "unsupported_language": "invalid_request_error"}
# Our codes that are OpenAI's own under another name.
ERROR_CODES = {"unsupported_language": "invalid_value"}
# Silence that makes the endpointer close an open utterance: above STT_TURN_MAX_SILENCE_MS (1200),
# the longest STT waits when its end-of-turn model says the caller has not finished.
COMMIT_SILENCE_MS = 1500
MODALITIES = ("text", "audio")


class RealtimeError(Exception):
    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.param = message, code, param


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def rate_of(fmt: str) -> int:
    return PCM_RATE if fmt == "audio/pcm" else G711_RATE


@dataclass
class Response:
    """The Realtime response that carries one turn."""

    turn_id: str
    transcript: str = ""
    audio_done: bool = False
    text_done: bool = False
    failed: bool = False
    text_only: bool = False  # output_modalities ["text"]: an output_text part, no audio

    @property
    def modalities(self) -> list[str]:
        return ["text"] if self.text_only else ["audio"]

    @property
    def id(self) -> str:
        return f"resp_{self.turn_id}"

    @property
    def item_id(self) -> str:
        return f"item_{self.turn_id}"


class RealtimeCodec:
    """One Realtime session: a gateway session opened at connect, as OpenAI's is."""

    binary_audio = False  # the Realtime API has no binary messages
    output_rate = PCM_RATE  # until session.update names another format

    def __init__(self, settings: GatewaySettings) -> None:
        self.max_text_chars = settings.max_text_chars
        self.frame_bytes = settings.max_audio_frame_bytes // 2 * 2  # OpenAI takes large appends
        self.input_format = self.output_format = "audio/pcm"
        self.voice = "default"
        self.language = "en"
        self.text_only = False
        self.session_id: str | None = None
        self._response: Response | None = None
        self._user_item = new_id("item")  # the item the next utterance becomes
        self._partial = ""
        self._appended_ms = 0.0
        self._typed: str | None = None  # conversation.item.create text, waiting for response.create
        self._last_item: str | None = None

    def opening(self) -> list[SessionStart]:
        return [SessionStart(None, self.language, rate_of(self.input_format))]

    # ---- decoding ------------------------------------------------------
    def decode_text(self, raw: str) -> list[Input]:
        event_id = None
        try:
            message = json.loads(raw)
            if not isinstance(message, dict):
                raise RealtimeError("an event must be a JSON object")
            event_id = message.get("event_id") if isinstance(message.get("event_id"), str) else None
            handler = DECODERS_BY_TYPE.get(message.get("type"))  # type: ignore[arg-type]
            if handler is None:
                raise RealtimeError(f"unknown event type {message.get('type')!r}", "unknown_event", "type")
            return handler(self, message, event_id)
        except (json.JSONDecodeError, RecursionError):
            return [_refusal("the event is not valid JSON", "invalid_json", None, None)]
        except RealtimeError as exc:
            return [_refusal(exc.message, exc.code, exc.param, event_id)]

    def decode_bytes(self, _data: bytes) -> list[Input]:
        return [_refusal("binary frames are not part of the Realtime API; use input_audio_buffer.append",
                         "invalid_event", None, None)]

    def session_update(self, message: dict[str, Any], _event_id: str | None) -> list[Input]:
        session = message.get("session")
        if not isinstance(session, dict):
            raise RealtimeError("session.update needs a 'session' object", param="session")
        audio = session.get("audio") if isinstance(session.get("audio"), dict) else {}
        inp = audio.get("input") if isinstance(audio.get("input"), dict) else {}
        out = audio.get("output") if isinstance(audio.get("output"), dict) else {}
        in_fmt = _format(inp.get("format", session.get("input_audio_format")),
                         "session.audio.input.format")
        out_fmt = _format(out.get("format", session.get("output_audio_format")),
                          "session.audio.output.format")
        transcription = inp.get("transcription", session.get("input_audio_transcription"))
        language = transcription.get("language") if isinstance(transcription, dict) else None
        if language is not None and (not isinstance(language, str) or not 2 <= len(language) <= 8):
            raise RealtimeError("language must be a code such as 'en'",
                                param="session.audio.input.transcription.language")
        voice = out.get("voice", session.get("voice"))
        if voice is not None and not isinstance(voice, str):
            raise RealtimeError("voice must be a string", param="session.audio.output.voice")
        self.text_only = _text_only(session, self.text_only)
        self.input_format, self.output_format = in_fmt or self.input_format, out_fmt or self.output_format
        self.language = (language or self.language).lower()
        self.voice = voice or self.voice
        self.output_rate = rate_of(self.output_format)
        configure = Configure(self.language, rate_of(self.input_format), rate_of(self.output_format),
                              self.text_only)
        return [configure, Reply((_json({"type": "session.updated", "event_id": new_id("event"),
                                         "session": self.session_object()}),))]

    def append(self, message: dict[str, Any], _event_id: str | None) -> list[Input]:
        audio = message.get("audio")
        if not isinstance(audio, str):
            raise RealtimeError("input_audio_buffer.append needs base64 'audio'", param="audio")
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise RealtimeError("audio is not valid base64", param="audio") from None
        decode = DECODERS.get(self.input_format)
        pcm = decode(data) if decode else data[: len(data) // 2 * 2]
        self._appended_ms += len(pcm) * 1000 / (2 * rate_of(self.input_format))
        return [Audio(pcm[start:start + self.frame_bytes]) for start in range(0, len(pcm), self.frame_bytes)]

    def commit(self, _message: dict[str, Any], event_id: str | None) -> list[Input]:
        """Server VAD commits by itself; a client commit closes the open utterance now (with
        nothing open there is nothing to commit)."""
        refused = _refusal("no speech in the input audio buffer to commit", "input_audio_buffer_commit_empty",
                           None, event_id)
        return [Commit(COMMIT_SILENCE_MS, refused=refused.frames)]

    def clear(self, _message: dict[str, Any], _event_id: str | None) -> list[Input]:
        return [Reply((_json({"type": "input_audio_buffer.cleared", "event_id": new_id("event")}),))]

    def item_create(self, message: dict[str, Any], _event_id: str | None) -> list[Input]:
        item = message.get("item")
        content = item.get("content") if isinstance(item, dict) else None
        texts = [c.get("text") for c in content or [] if isinstance(c, dict)
                 and c.get("type") in ("input_text", "text") and isinstance(c.get("text"), str)]
        if not isinstance(item, dict) or item.get("role") != "user" or not "".join(texts).strip():
            raise RealtimeError("only user messages with input_text content are accepted", param="item")
        text = " ".join(t.strip() for t in texts).strip()
        if len(text) > self.max_text_chars:
            raise RealtimeError(f"text is over {self.max_text_chars} characters", "payload_too_large")
        self._typed = text
        item_id = item.get("id") if isinstance(item.get("id"), str) else new_id("item")
        return [Reply(tuple(self._item_events(item_id, {"type": "input_text", "text": text})))]

    def response_create(self, _message: dict[str, Any], _event_id: str | None) -> list[Input]:
        if self._typed is None:
            # With server VAD every utterance starts its own response already.
            raise RealtimeError("no new user input to respond to", "no_input")
        text, self._typed = self._typed, None
        return [Say(text)]

    def response_cancel(self, _message: dict[str, Any], event_id: str | None) -> list[Input]:
        refused = _refusal("no response in progress", "response_cancel_not_active", None, event_id)
        return [Cancel(refused=refused.frames)]

    def truncate(self, message: dict[str, Any], event_id: str | None) -> list[Input]:
        item_id, played = message.get("item_id"), message.get("audio_end_ms")
        if not isinstance(item_id, str) or not item_id.startswith("item_"):
            raise RealtimeError("item_id must name an assistant item", param="item_id")
        if not isinstance(played, int) or isinstance(played, bool) or played < 0:
            raise RealtimeError("audio_end_ms must be an integer >= 0", param="audio_end_ms")
        done = _json({"type": "conversation.item.truncated", "event_id": new_id("event"), "item_id": item_id,
                      "content_index": message.get("content_index", 0), "audio_end_ms": played})
        refused = _refusal(f"no assistant item {item_id!r}", "item_not_found", "item_id", event_id)
        return [Truncated(item_id.removeprefix("item_"), played, done=(done,), refused=refused.frames)]

    # ---- encoding: the conversation's events as Realtime events ----------
    def encode(self, ev: Event) -> list[str | bytes]:
        translate = TRANSLATIONS.get(type(ev))
        return translate(self, ev) if translate else []

    def _error(self, ev: Error) -> list[str | bytes]:
        response = self._response
        if response is not None and ev.turn_id is not None and response.turn_id == ev.turn_id:
            response.failed = True  # a failure inside the turn: its response ends as failed
        kind = ERROR_TYPES.get(ev.code, "server_error")
        param = "session.audio.input.transcription.language" if ev.code == "unsupported_language" else None
        return [_json(error_payload(kind, ERROR_CODES.get(ev.code, ev.code), ev.message, param, None))]

    def _audio(self, ev: AudioFrame) -> list[str | bytes]:
        encode = ENCODERS.get(self.output_format)
        payload = base64.b64encode(encode(ev.pcm) if encode else ev.pcm).decode()
        out = self._open_response(ev.turn_id)
        response = self._response
        assert response is not None
        return [*out, _json(self._part(response, "response.output_audio.delta", delta=payload))]

    def _session_created(self, ev: SessionStarted) -> list[str | bytes]:
        self.session_id = ev.session_id
        return [_json({"type": "session.created", "event_id": new_id("event"),
                       "session": self.session_object()})]

    def _partial_text(self, ev: TranscriptPartial) -> list[str | bytes]:
        # Whisper revises its partials; OpenAI's deltas only add. A revision is sent whole.
        delta = ev.text[len(self._partial):] if ev.text.startswith(self._partial) else ev.text
        self._partial = ev.text
        if not delta:
            return []
        return [_json({"type": "conversation.item.input_audio_transcription.delta",
                       "event_id": new_id("event"), "item_id": self._user_item, "content_index": 0,
                       "delta": delta})]

    def _final_text(self, ev: TranscriptFinal) -> list[str | bytes]:
        item_id, self._user_item, self._partial = self._user_item, new_id("item"), ""
        out: list[str | bytes] = [_json({"type": "input_audio_buffer.committed", "event_id": new_id("event"),
                                         "item_id": item_id, "previous_item_id": self._last_item})]
        out += self._item_events(item_id, {"type": "input_audio", "transcript": ev.text})
        out.append(_json({"type": "conversation.item.input_audio_transcription.completed",
                          "event_id": new_id("event"), "item_id": item_id, "content_index": 0,
                          "transcript": ev.text,
                          "usage": {"type": "duration", "seconds": round(self._appended_ms / 1000, 3)}}))
        return out + self._open_response(ev.turn_id)

    def _reply_delta(self, ev: ReplyDelta) -> list[str | bytes]:
        out = self._open_response(ev.turn_id)
        response = self._response
        assert response is not None
        response.transcript += ev.text
        kind = ("response.output_text.delta" if response.text_only
                else "response.output_audio_transcript.delta")
        return [*out, _json(self._part(response, kind, delta=ev.text))]

    def _reply_done(self, ev: ReplyDone) -> list[str | bytes]:
        response = self._current(ev.turn_id)
        if response is None:
            return []
        response.transcript, response.text_done = ev.text, True
        return [self._text_done(response)]

    def _audio_start(self, ev: AudioStart) -> list[str | bytes]:
        return self._open_response(ev.turn_id)

    def _audio_end(self, ev: AudioEnd) -> list[str | bytes]:
        response = self._current(ev.turn_id)
        if response is None:
            return []
        response.audio_done = True
        out = [_json(self._part(response, "response.output_audio.done"))]
        if not response.transcript:  # a sentence of the gateway's own (fallback): nothing else will end it
            out += self._close_response("failed" if response.failed else "completed")
        return out

    def _interrupted(self, ev: Interrupted) -> list[str | bytes]:
        return self._close_response("cancelled", "turn_detected") if self._current(ev.turn_id) else []

    def _cancelled(self, ev: ReplyCancelled) -> list[str | bytes]:
        return self._close_response("cancelled", "client_cancelled") if self._current(ev.turn_id) else []

    def _metrics(self, ev: TurnMetrics) -> list[str | bytes]:
        if self._current(ev.turn_id) is None:
            return []
        metadata = {f"{stage}_ms": str(ms) for stage, ms in ev.ms.items() if ms is not None}
        return self._close_response("completed", metadata=metadata)

    def _turn_over(self, ev: TurnOver) -> list[str | bytes]:
        if ev.outcome == "error" and self._current(ev.turn_id) is not None:
            return self._close_response("failed")
        return []

    def _speech(self, ev: Speech) -> list[str | bytes]:
        # STT's offsets are on its stream; the client counts from its first append.
        at = max(0, round(self._appended_ms - ev.behind_ms))
        kind, key = (("input_audio_buffer.speech_started", "audio_start_ms") if ev.started
                     else ("input_audio_buffer.speech_stopped", "audio_end_ms"))
        return [_json({"type": kind, "event_id": new_id("event"), key: at, "item_id": self._user_item})]

    # ---- responses -----------------------------------------------------
    def _current(self, turn_id: str) -> Response | None:
        response = self._response
        return response if response is not None and response.turn_id == turn_id else None

    def _open_response(self, turn_id: str) -> list[str | bytes]:
        """Open the turn's response if it is not open yet (closing an older one as cancelled)."""
        if self._current(turn_id) is not None:
            return []
        out = self._close_response("cancelled", "turn_detected") if self._response is not None else []
        response = self._response = Response(turn_id, text_only=self.text_only)
        item = {"id": response.item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": "in_progress", "content": []}
        out.append(_json({"type": "response.created", "event_id": new_id("event"),
                          "response": self._response_object(response, "in_progress", [])}))
        out.append(_json({"type": "response.output_item.added", "event_id": new_id("event"),
                          "response_id": response.id, "output_index": 0, "item": item}))
        out.append(_json({"type": "conversation.item.added", "event_id": new_id("event"),
                          "previous_item_id": self._last_item, "item": item}))
        out.append(_json({"type": "response.content_part.added", "event_id": new_id("event"),
                          "response_id": response.id, "item_id": response.item_id, "output_index": 0,
                          "content_index": 0, "part": self._content(response, "")}))
        self._last_item = response.item_id
        return out

    def _close_response(self, status: str, reason: str | None = None,
                        metadata: dict[str, str] | None = None) -> list[str | bytes]:
        response, self._response = self._response, None
        if response is None:
            return []
        item_status = "completed" if status == "completed" else "incomplete"
        part = self._content(response, response.transcript)
        content = [{**part, "type": "output_text" if response.text_only else "output_audio"}]
        item = {"id": response.item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": item_status, "content": content}
        out: list[str | bytes] = []
        if not response.text_done:
            out.append(self._text_done(response))
        if not response.audio_done and not response.text_only:
            out.append(_json(self._part(response, "response.output_audio.done")))
        out.append(_json(self._part(response, "response.content_part.done", part=part)))
        out.append(_json({"type": "response.output_item.done", "event_id": new_id("event"),
                          "response_id": response.id, "output_index": 0, "item": item}))
        body = self._response_object(response, status, [item], metadata)
        if reason is not None:
            body["status_details"] = {"type": status, "reason": reason}
        out.append(_json({"type": "response.done", "event_id": new_id("event"), "response": body}))
        return out

    def _content(self, response: Response, text: str) -> dict[str, Any]:
        return {"type": "text", "text": text} if response.text_only else {"type": "audio", "transcript": text}

    def _text_done(self, response: Response) -> str:
        if response.text_only:
            return _json(self._part(response, "response.output_text.done", text=response.transcript))
        return _json(self._part(response, "response.output_audio_transcript.done",
                                transcript=response.transcript))

    def _part(self, response: Response, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "event_id": new_id("event"), "response_id": response.id,
                "item_id": response.item_id, "output_index": 0, "content_index": 0, **fields}

    def _response_object(self, response: Response, status: str, output: list[dict[str, Any]],
                         metadata: dict[str, str] | None = None) -> dict[str, Any]:
        return {"id": response.id, "object": "realtime.response", "status": status, "output": output,
                "conversation_id": self.session_id, "output_modalities": response.modalities,
                "metadata": metadata,
                "audio": {"output": {"format": self._format_object(self.output_format), "voice": self.voice}}}

    def _item_events(self, item_id: str, content: dict[str, Any]) -> list[str]:
        item = {"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
                "status": "completed", "content": [content]}
        previous, self._last_item = self._last_item, item_id
        return [_json({"type": kind, "event_id": new_id("event"), "previous_item_id": previous, "item": item})
                for kind in ("conversation.item.added", "conversation.item.done")]

    def _format_object(self, fmt: str) -> dict[str, Any]:
        return {"type": fmt, "rate": PCM_RATE} if fmt == "audio/pcm" else {"type": fmt}

    def session_object(self) -> dict[str, Any]:
        """The session as it is in effect: what the gateway honours, not what was asked."""
        return {
            "type": "realtime", "object": "realtime.session", "id": self.session_id,
            "model": "voicebot", "output_modalities": ["text"] if self.text_only else ["audio"],
            # The profile's instructions and tools govern the bot; a client's are not applied.
            "instructions": "", "tools": [], "tool_choice": "auto",
            "audio": {
                "input": {"format": self._format_object(self.input_format),
                          "transcription": {"model": "whisper", "language": self.language},
                          "turn_detection": {"type": "server_vad", "create_response": True,
                                             "interrupt_response": True}},
                "output": {"format": self._format_object(self.output_format), "voice": self.voice},
            },
        }


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload)


def _refusal(message: str, code: str, param: str | None, event_id: str | None) -> Reply:
    """A client event the Realtime API refuses: an ``invalid_request_error`` back."""
    return Reply((_json(error_payload("invalid_request_error", code, message, param, event_id)),),
                 error="bad_request")


def _text_only(session: dict[str, Any], current: bool) -> bool:
    """``output_modalities`` (GA) or ``modalities`` (beta): ["text"] asks for text replies only
    (no audio; the text sent counts as what was heard); one with "audio" for spoken replies."""
    modalities = session.get("output_modalities", session.get("modalities"))
    if modalities is None:
        return current
    if not isinstance(modalities, list) or not modalities or any(m not in MODALITIES for m in modalities):
        raise RealtimeError('output_modalities must be ["audio"] or ["text"]',
                            param="session.output_modalities")
    return "audio" not in modalities


def _format(value: Any, param: str) -> str | None:
    """A format named the GA way ({"type": "audio/pcm", "rate": 24000}) or the beta way ("pcm16")."""
    if value is None:
        return None
    name, rate = (value.get("type"), value.get("rate")) if isinstance(value, dict) else (value, None)
    fmt = FORMATS.get(name) if isinstance(name, str) else None
    if fmt is None:
        raise RealtimeError(f"unsupported audio format {name!r}; use audio/pcm, audio/pcmu or audio/pcma",
                            "unsupported_audio_format", param)
    if rate is not None and rate != rate_of(fmt):
        raise RealtimeError(f"{fmt} is {rate_of(fmt)} Hz", "unsupported_audio_format", f"{param}.rate")
    return fmt


def error_payload(kind: str, code: str, message: str, param: str | None,
                  event_id: str | None) -> dict[str, Any]:
    return {"type": "error", "event_id": new_id("event"),
            "error": {"type": kind, "code": code, "message": message, "param": param, "event_id": event_id}}


Decoder = Callable[[RealtimeCodec, dict[str, Any], str | None], list[Input]]
DECODERS_BY_TYPE: dict[str, Decoder] = {
    "session.update": RealtimeCodec.session_update,
    "input_audio_buffer.append": RealtimeCodec.append,
    "input_audio_buffer.commit": RealtimeCodec.commit,
    "input_audio_buffer.clear": RealtimeCodec.clear,
    "conversation.item.create": RealtimeCodec.item_create,
    "conversation.item.truncate": RealtimeCodec.truncate,
    "response.create": RealtimeCodec.response_create,
    "response.cancel": RealtimeCodec.response_cancel,
}
TRANSLATIONS: dict[type, Callable[[RealtimeCodec, Any], list[str | bytes]]] = {
    SessionStarted: RealtimeCodec._session_created,
    TranscriptPartial: RealtimeCodec._partial_text,
    TranscriptFinal: RealtimeCodec._final_text,
    ReplyDelta: RealtimeCodec._reply_delta,
    ReplyDone: RealtimeCodec._reply_done,
    AudioStart: RealtimeCodec._audio_start,
    AudioFrame: RealtimeCodec._audio,
    AudioEnd: RealtimeCodec._audio_end,
    Interrupted: RealtimeCodec._interrupted,
    ReplyCancelled: RealtimeCodec._cancelled,
    TurnMetrics: RealtimeCodec._metrics,
    TurnOver: RealtimeCodec._turn_over,
    Speech: RealtimeCodec._speech,
    Error: RealtimeCodec._error,
}
