"""``/v1/realtime``: the OpenAI Realtime API (GA event names) on the gateway's own turns.

An adapter, not a second pipeline: ``RealtimeCall`` is a ``Call`` whose wire is OpenAI's. Client
events are turned into what a v1 client would have sent (audio, a typed turn, a playback
report, an interrupt) and the v1 events the turns emit are re-encoded as Realtime server events,
so STT, the brain with its policy, TTS and barge-in are the very same code as on ``/v1/call``.

A turn is one Realtime response with one assistant message item (``item_<turn id>``) and one
audio content part whose transcript is the reply text. What the client honours or not is listed
in the README ("OpenAI Realtime API").
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from voicebot.gateway.call import Call
from voicebot.gateway.g711 import alaw_to_pcm16, pcm16_to_alaw, pcm16_to_ulaw, ulaw_to_pcm16
from voicebot.gateway.metrics import CLIENT_ERRORS
from voicebot.gateway.protocol import SessionStart
from voicebot.gateway.turn import TurnTimings, cancel_task

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
               "too_many_sessions": "rate_limit_error", "idle_timeout": "invalid_request_error"}
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


class RealtimeCall(Call):
    """One Realtime session: a gateway session created at connect, as OpenAI's is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.input_format = self.output_format = "audio/pcm"
        self.voice = "default"
        self.language = "en"
        self.output_rate = PCM_RATE
        self._response: Response | None = None
        self._user_item = new_id("item")  # the item the next utterance becomes
        self._partial = ""
        self._appended_ms = 0.0
        self._typed: str | None = None  # conversation.item.create text, waiting for response.create
        self._last_item: str | None = None

    # ---- receiving -----------------------------------------------------
    async def run(self, opening: Sequence[str] = ()) -> None:
        await self._start_session(SessionStart(None, self.language, rate_of(self.input_format)))
        await super().run(opening)

    async def _on_text(self, raw: str) -> bool:
        event_id = None
        try:
            message = json.loads(raw)
            if not isinstance(message, dict):
                raise RealtimeError("an event must be a JSON object")
            event_id = message.get("event_id") if isinstance(message.get("event_id"), str) else None
            handler = HANDLERS.get(message.get("type"))  # type: ignore[arg-type]
            if handler is None:
                raise RealtimeError(f"unknown event type {message.get('type')!r}", "unknown_event", "type")
            await handler(self, message)
        except (json.JSONDecodeError, RecursionError):
            await self._error("the event is not valid JSON", "invalid_json", None, None)
        except RealtimeError as exc:
            await self._error(exc.message, exc.code, exc.param, event_id)
        return True

    async def _on_audio(self, data: bytes) -> None:
        """A binary frame: the Realtime API has none (audio comes in input_audio_buffer.append)."""
        await self._error("binary frames are not part of the Realtime API; use input_audio_buffer.append",
                          "invalid_event", None, None)

    async def _error(self, message: str, code: str, param: str | None, event_id: str | None) -> None:
        CLIENT_ERRORS.labels("bad_request").inc()
        payload = error_payload("invalid_request_error", code, message, param, event_id)
        await self._send(text=json.dumps(payload))

    async def session_update(self, message: dict[str, Any]) -> None:
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
        await self._reconfigure(in_fmt or self.input_format, out_fmt or self.output_format,
                                (language or self.language).lower())
        self.voice = voice or self.voice
        await self._send(text=json.dumps({"type": "session.updated", "event_id": new_id("event"),
                                          "session": self.session_object()}))

    async def _reconfigure(self, in_fmt: str, out_fmt: str, language: str) -> None:
        """A new input format or language needs a new STT stream (its config is its first message)."""
        if (in_fmt, language) != (self.input_format, self.language):
            self.input_format, self.language = in_fmt, language
            self.session = SessionStart(self.session_id, language, rate_of(in_fmt))
            if self._stt is not None:
                stt, self._stt = self._stt, None
                await stt.close()
            if self.fallback is not None:
                self.fallback.warm(language)
        self.output_format, self.output_rate = out_fmt, rate_of(out_fmt)

    async def append(self, message: dict[str, Any]) -> None:
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
        step = self.settings.max_audio_frame_bytes // 2 * 2  # OpenAI takes large appends; STT gets frames
        for start in range(0, len(pcm), step):
            await super()._on_audio(pcm[start:start + step])

    async def commit(self, _message: dict[str, Any]) -> None:
        """Server VAD commits by itself; a client commit closes the open utterance now by giving the
        endpointer the silence it waits for. With nothing open there is nothing to commit."""
        if not self._utterance_open:
            raise RealtimeError("no speech in the input audio buffer to commit",
                                "input_audio_buffer_commit_empty")
        silence = bytes(2 * rate_of(self.input_format) * COMMIT_SILENCE_MS // 1000)
        step = self.settings.max_audio_frame_bytes // 2 * 2
        for start in range(0, len(silence), step):
            await super()._on_audio(silence[start:start + step])

    async def clear(self, _message: dict[str, Any]) -> None:
        await self._send(text=json.dumps({"type": "input_audio_buffer.cleared", "event_id": new_id("event")}))

    async def item_create(self, message: dict[str, Any]) -> None:
        item = message.get("item")
        content = item.get("content") if isinstance(item, dict) else None
        texts = [c.get("text") for c in content or [] if isinstance(c, dict)
                 and c.get("type") in ("input_text", "text") and isinstance(c.get("text"), str)]
        if not isinstance(item, dict) or item.get("role") != "user" or not "".join(texts).strip():
            raise RealtimeError("only user messages with input_text content are accepted", param="item")
        text = " ".join(t.strip() for t in texts).strip()
        if len(text) > self.settings.max_text_chars:
            raise RealtimeError(f"text is over {self.settings.max_text_chars} characters",
                                "payload_too_large")
        self._typed = text
        item_id = item.get("id") if isinstance(item.get("id"), str) else new_id("item")
        await self._send(texts=self._item_events(item_id, {"type": "input_text", "text": text}))

    async def response_create(self, _message: dict[str, Any]) -> None:
        if self._typed is None:
            # With server VAD every utterance starts its own response already.
            raise RealtimeError("no new user input to respond to", "no_input")
        if not await self.typed_turn_allowed():
            return  # the typed message stays: a later response.create may run it
        text, self._typed = self._typed, None
        self._unanswered = None
        self._start_turn(text, TurnTimings())

    async def response_cancel(self, _message: dict[str, Any]) -> None:
        turn = self.turn
        if turn is None or turn.interrupted or not turn.audible(time.perf_counter()):
            raise RealtimeError("no response in progress", "response_cancel_not_active")
        await self._interrupt(turn)
        await cancel_task(turn.task)
        await self._send(texts=self._close_response("cancelled", "client_cancelled"))

    async def truncate(self, message: dict[str, Any]) -> None:
        item_id, played = message.get("item_id"), message.get("audio_end_ms")
        if not isinstance(item_id, str) or not item_id.startswith("item_"):
            raise RealtimeError("item_id must name an assistant item", param="item_id")
        if not isinstance(played, int) or isinstance(played, bool) or played < 0:
            raise RealtimeError("audio_end_ms must be an integer >= 0", param="audio_end_ms")
        if not self.truncated(item_id.removeprefix("item_"), played):
            raise RealtimeError(f"no assistant item {item_id!r}", "item_not_found", "item_id")
        await self._send(text=json.dumps({
            "type": "conversation.item.truncated", "event_id": new_id("event"), "item_id": item_id,
            "content_index": message.get("content_index", 0), "audio_end_ms": played}))

    # ---- the wire: v1 events as Realtime events -------------------------
    def wire_error(self, code: str, message: str) -> str:
        return json.dumps(error_payload(ERROR_TYPES.get(code, "server_error"), code, message, None, None))

    def wire_audio(self, turn_id: str, frame: bytes) -> tuple[list[str] | None, bytes | None]:
        encode = ENCODERS.get(self.output_format)
        payload = base64.b64encode(encode(frame) if encode else frame).decode()
        texts = self._open_response(turn_id)
        response = self._response
        assert response is not None
        return [*texts, json.dumps(self._part(response, "response.output_audio.delta", delta=payload))], None

    def wire_event(self, kind: str, fields: dict[str, Any]) -> list[str]:
        translate = TRANSLATIONS.get(kind)
        return translate(self, fields) if translate else []

    def _session_created(self, _fields: dict[str, Any]) -> list[str]:
        return [json.dumps({"type": "session.created", "event_id": new_id("event"),
                            "session": self.session_object()})]

    def _partial_text(self, fields: dict[str, Any]) -> list[str]:
        text = fields["text"]
        # Whisper revises its partials; OpenAI's deltas only add. A revision is sent whole.
        delta = text[len(self._partial):] if text.startswith(self._partial) else text
        self._partial = text
        if not delta:
            return []
        return [json.dumps({"type": "conversation.item.input_audio_transcription.delta",
                            "event_id": new_id("event"), "item_id": self._user_item, "content_index": 0,
                            "delta": delta})]

    def _final_text(self, fields: dict[str, Any]) -> list[str]:
        item_id, self._user_item, self._partial = self._user_item, new_id("item"), ""
        out = [json.dumps({"type": "input_audio_buffer.committed", "event_id": new_id("event"),
                           "item_id": item_id, "previous_item_id": self._last_item})]
        out += self._item_events(item_id, {"type": "input_audio", "transcript": fields["text"]})
        out.append(json.dumps({"type": "conversation.item.input_audio_transcription.completed",
                               "event_id": new_id("event"), "item_id": item_id, "content_index": 0,
                               "transcript": fields["text"],
                               "usage": {"type": "duration", "seconds": round(self._appended_ms / 1000, 3)}}))
        return out + self._open_response(fields["turn_id"])

    def _reply_delta(self, fields: dict[str, Any]) -> list[str]:
        out = self._open_response(fields["turn_id"])
        response = self._response
        assert response is not None
        response.transcript += fields["text"]
        kind = ("response.output_text.delta" if response.text_only
                else "response.output_audio_transcript.delta")
        return [*out, json.dumps(self._part(response, kind, delta=fields["text"]))]

    def _reply_done(self, fields: dict[str, Any]) -> list[str]:
        response = self._response
        if response is None or response.turn_id != fields["turn_id"]:
            return []
        response.transcript, response.text_done = fields["text"], True
        return [self._text_done(response)]

    def _audio_start(self, fields: dict[str, Any]) -> list[str]:
        return self._open_response(fields["turn_id"])

    def _audio_end(self, fields: dict[str, Any]) -> list[str]:
        response = self._response
        if response is None or response.turn_id != fields["turn_id"]:
            return []
        response.audio_done = True
        out = [json.dumps(self._part(response, "response.output_audio.done"))]
        if not response.transcript:  # a sentence of the gateway's own (fallback): nothing else will end it
            out += self._close_response("failed" if response.failed else "completed")
        return out

    def _interrupted(self, fields: dict[str, Any]) -> list[str]:
        response = self._response
        if response is None or response.turn_id != fields["turn_id"]:
            return []
        return self._close_response("cancelled", "turn_detected")

    def _metrics(self, fields: dict[str, Any]) -> list[str]:
        response = self._response
        if response is None or response.turn_id != fields["turn_id"]:
            return []
        metadata = {f"{stage}_ms": str(ms) for stage, ms in fields["ms"].items() if ms is not None}
        return self._close_response("completed", metadata=metadata)

    async def on_speech(self, started: bool, stream_ms: int) -> None:
        # STT's offsets are on its stream; the client counts from its first append.
        received = self._stt.received_ms if self._stt is not None else 0
        at = max(0, round(self._appended_ms - (received - stream_ms)))
        kind, key = (("input_audio_buffer.speech_started", "audio_start_ms") if started
                     else ("input_audio_buffer.speech_stopped", "audio_end_ms"))
        await self._send(text=json.dumps({"type": kind, "event_id": new_id("event"), key: at,
                                          "item_id": self._user_item}))

    async def on_turn_over(self, turn: Any, outcome: str) -> None:
        response = self._response
        if outcome == "error" and response is not None and response.turn_id == turn.turn_id:
            await self._send(texts=self._close_response("failed"))

    async def send_error(self, code: str, message: str) -> None:
        response, turn = self._response, self.turn
        if response is not None and turn is not None and response.turn_id == turn.turn_id:
            response.failed = True  # a failure inside the turn: its response ends as failed
        await super().send_error(code, message)

    # ---- responses -----------------------------------------------------
    def _open_response(self, turn_id: str) -> list[str]:
        """Open the turn's response if it is not open yet (closing an older one as cancelled)."""
        if self._response is not None and self._response.turn_id == turn_id:
            return []
        out = self._close_response("cancelled", "turn_detected") if self._response is not None else []
        response = self._response = Response(turn_id, text_only=self.text_only)
        item = {"id": response.item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": "in_progress", "content": []}
        out.append(json.dumps({"type": "response.created", "event_id": new_id("event"),
                               "response": self._response_object(response, "in_progress", [])}))
        out.append(json.dumps({"type": "response.output_item.added", "event_id": new_id("event"),
                               "response_id": response.id, "output_index": 0, "item": item}))
        out.append(json.dumps({"type": "conversation.item.added", "event_id": new_id("event"),
                               "previous_item_id": self._last_item, "item": item}))
        out.append(json.dumps({"type": "response.content_part.added", "event_id": new_id("event"),
                               "response_id": response.id, "item_id": response.item_id, "output_index": 0,
                               "content_index": 0, "part": self._content(response, "")}))
        self._last_item = response.item_id
        return out

    def _close_response(self, status: str, reason: str | None = None,
                        metadata: dict[str, str] | None = None) -> list[str]:
        response, self._response = self._response, None
        if response is None:
            return []
        item_status = "completed" if status == "completed" else "incomplete"
        part = self._content(response, response.transcript)
        content = [{**part, "type": "output_text" if response.text_only else "output_audio"}]
        item = {"id": response.item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": item_status, "content": content}
        out = []
        if not response.text_done:
            out.append(self._text_done(response))
        if not response.audio_done and not response.text_only:
            out.append(json.dumps(self._part(response, "response.output_audio.done")))
        out.append(json.dumps(self._part(response, "response.content_part.done", part=part)))
        out.append(json.dumps({"type": "response.output_item.done", "event_id": new_id("event"),
                               "response_id": response.id, "output_index": 0, "item": item}))
        body = self._response_object(response, status, [item], metadata)
        if reason is not None:
            body["status_details"] = {"type": status, "reason": reason}
        out.append(json.dumps({"type": "response.done", "event_id": new_id("event"), "response": body}))
        return out

    def _content(self, response: Response, text: str) -> dict[str, Any]:
        return {"type": "text", "text": text} if response.text_only else {"type": "audio", "transcript": text}

    def _text_done(self, response: Response) -> str:
        if response.text_only:
            return json.dumps(self._part(response, "response.output_text.done", text=response.transcript))
        return json.dumps(self._part(response, "response.output_audio_transcript.done",
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
        return [json.dumps({"type": kind, "event_id": new_id("event"), "previous_item_id": previous,
                            "item": item}) for kind in ("conversation.item.added", "conversation.item.done")]

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


HANDLERS = {
    "session.update": RealtimeCall.session_update,
    "input_audio_buffer.append": RealtimeCall.append,
    "input_audio_buffer.commit": RealtimeCall.commit,
    "input_audio_buffer.clear": RealtimeCall.clear,
    "conversation.item.create": RealtimeCall.item_create,
    "conversation.item.truncate": RealtimeCall.truncate,
    "response.create": RealtimeCall.response_create,
    "response.cancel": RealtimeCall.response_cancel,
}
TRANSLATIONS = {
    "session.started": RealtimeCall._session_created,
    "transcript.partial": RealtimeCall._partial_text,
    "transcript.final": RealtimeCall._final_text,
    "reply.delta": RealtimeCall._reply_delta,
    "reply.done": RealtimeCall._reply_done,
    "audio.start": RealtimeCall._audio_start,
    "audio.end": RealtimeCall._audio_end,
    "interrupt": RealtimeCall._interrupted,
    "turn.metrics": RealtimeCall._metrics,
}
