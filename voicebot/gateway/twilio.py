"""``/v1/twilio``: a Twilio Media Streams bridge (bidirectional ``<Connect><Stream>``).

Like ``voicebot/gateway/realtime.py``, an adapter on ``Call``: Twilio's ``media`` payloads (base64 μ-law
8 kHz) become the caller's audio, the turns' audio goes back as ``media`` messages in μ-law, each
followed by a ``mark`` naming the turn and how far into it that message ends. Twilio echoes a
mark once the caller has heard the audio before it, so marks are the client's playback report
(what was heard, for the record the brain gets). A barge-in sends ``clear`` (Twilio drops what it
buffered and returns the remaining marks at once: those are ignored, they were never heard).

Twilio cannot send our headers, so the deployment's secret (GATEWAY_TWILIO_SECRET) comes as the
``secret`` custom parameter of ``start`` (or in the stream URL, ``?secret=``, which access logs
keep). A socket without it in the URL holds no session slot until its ``start`` proved it
(``read_start``, within GATEWAY_TWILIO_START_TIMEOUT_S). Twilio has no error message; bad input
is counted (voicebot_gateway_client_errors_total) and logged within a budget, and the call goes on.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
from typing import Any

from starlette.websockets import WebSocket

from voicebot.gateway.admission import LogBudget
from voicebot.gateway.call import Call
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.g711 import pcm16_to_ulaw, ulaw_to_pcm16
from voicebot.gateway.metrics import ADMISSION_REFUSALS, CLIENT_ERRORS
from voicebot.gateway.protocol import SessionStart

log = logging.getLogger("voicebot.gateway.twilio")
RATE = 8000
CLOSE_UNAUTHORIZED = 4401


# Before its secret, a stream may send `connected` (Twilio's first message), then `start`.
MESSAGES_BEFORE_START = 2
# Warnings about bad input, across the process (GATEWAY_BAD_MESSAGE_LOGS_PER_S): set by the app.
BAD_INPUT_LOGS = LogBudget(GatewaySettings.model_fields["bad_message_logs_per_s"].default)


def secret_ok(given: str | None, settings: GatewaySettings) -> bool:
    secret = settings.twilio_secret.get_secret_value()
    return bool(secret and given) and hmac.compare_digest(str(given).encode(), secret.encode())


def twilio_enabled(settings: GatewaySettings) -> bool:
    """The endpoint is on once a secret is configured; the secret itself is checked at `start`."""
    return bool(settings.twilio_secret.get_secret_value())


def start_secret(raw: str) -> tuple[str | None, str | None]:
    """(the event's name, the `secret` custom parameter of a `start`) of one raw message."""
    try:
        message = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        return None, None
    if not isinstance(message, dict):
        return None, None
    start = message.get("start") if isinstance(message.get("start"), dict) else {}
    params = start.get("customParameters") if isinstance(start.get("customParameters"), dict) else {}
    secret = params.get("secret")
    return message.get("event"), secret if isinstance(secret, str) else None


async def read_start(ws: WebSocket, settings: GatewaySettings) -> str | None:
    """The stream's `start` message, if it carries the secret and comes within
    GATEWAY_TWILIO_START_TIMEOUT_S; None (the refusal counted) otherwise."""
    reason = "unauthorized"
    try:
        async with asyncio.timeout(settings.twilio_start_timeout_s):
            for _ in range(MESSAGES_BEFORE_START):
                message = await ws.receive()
                raw = message.get("text")
                if message["type"] == "websocket.disconnect" or raw is None:
                    break
                kind, secret = start_secret(raw)
                if kind == "start":
                    if secret_ok(secret, settings):
                        return raw
                    break
                if kind != "connected":
                    break
    except TimeoutError:
        reason = "auth_timeout"
    ADMISSION_REFUSALS.labels(reason).inc()
    return None


class TwilioCall(Call):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.output_rate = RATE
        self.stream_sid: str | None = None
        self.call_sid: str | None = None
        # The start message's customParameters, less the secret: the call's metadata.
        self.context: dict[str, str] = {}
        self._cleared: set[str] = set()  # turns a `clear` ended: their returned marks were not heard

    async def _on_text(self, raw: str) -> bool:
        try:
            message = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            return self._bad("not JSON")
        kind = message.get("event") if isinstance(message, dict) else None
        if kind == "connected" or kind == "dtmf":
            return True
        if kind == "start":
            return await self._on_start(message)
        if kind == "stop":
            return False
        if self.session is None:
            return self._bad(f"{kind!r} before start")
        if kind == "media":
            await self._on_media(message)
        elif kind == "mark":
            self._on_mark(message)
        else:
            self._bad(f"unknown event {kind!r}")
        return True

    def _bad(self, why: str) -> bool:
        """Twilio has no message for bad input: it is counted (and logged, within the process's
        budget: a flood of it must not flood the logs), and the call goes on."""
        CLIENT_ERRORS.labels("bad_request").inc()
        if BAD_INPUT_LOGS.allow():
            log.warning("bad twilio message", extra={"detail": why[:200], "stream_sid": self.stream_sid})
        return True

    async def _on_start(self, message: dict[str, Any]) -> bool:
        start = message.get("start")
        if not isinstance(start, dict) or self.session is not None:
            return self._bad("start without a start object, or a second start")
        params = start.get("customParameters") if isinstance(start.get("customParameters"), dict) else {}
        if not secret_ok(self.ws.query_params.get("secret") or params.get("secret"), self.settings):
            await self.ws.close(code=CLOSE_UNAUTHORIZED, reason="unauthorized")
            return False
        fmt = start.get("mediaFormat") if isinstance(start.get("mediaFormat"), dict) else {}
        if (fmt.get("encoding", "audio/x-mulaw"), fmt.get("sampleRate", RATE)) != ("audio/x-mulaw", RATE):
            self._bad(f"media format {fmt} (expected audio/x-mulaw at 8000 Hz)")
        self.stream_sid = start.get("streamSid") or message.get("streamSid")
        self.call_sid = start.get("callSid")
        self.context = {str(k)[:200]: str(v)[:200] for k, v in list(params.items())[:20] if k != "secret"}
        self.session_context = self.context  # reaches the brain with every turn, as data
        language = self.context.get("language", "en")
        language = language if 2 <= len(language) <= 8 else "en"
        await self._start_session(SessionStart(None, language, RATE))
        # The custom parameters are the caller's data: redacted by the log formatter unless an
        # operator turns VOICEBOT_LOG_CONTENT on.
        log.info("twilio call started", extra={"stream_sid": self.stream_sid, "call_sid": self.call_sid,
                                               "session_id": self.session_id,
                                               "context": self.context})
        return True

    async def _on_media(self, message: dict[str, Any]) -> None:
        media = message.get("media")
        payload = media.get("payload") if isinstance(media, dict) else None
        if not isinstance(payload, str):
            self._bad("media without a payload")
            return
        if media.get("track", "inbound") != "inbound":
            return  # an outbound track echoed back: the bot's own voice is not the caller's
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            self._bad("media payload is not base64")
            return
        await super()._on_audio(ulaw_to_pcm16(data))

    def _on_mark(self, message: dict[str, Any]) -> None:
        mark = message.get("mark")
        name = mark.get("name") if isinstance(mark, dict) else None
        turn_id, _, ms = name.rpartition(":") if isinstance(name, str) else ("", "", "")
        if not turn_id or not ms.isdigit():
            self._bad(f"mark {name!r} is not one of ours")
            return
        turn = self.turn
        live = turn is not None and turn.turn_id == turn_id and not turn.interrupted
        if live and turn_id not in self._cleared:
            self.played(turn, int(ms))

    async def _on_audio(self, data: bytes) -> None:
        self._bad("binary frame")

    # ---- the wire ------------------------------------------------------
    def wire_event(self, kind: str, fields: dict[str, Any]) -> list[str]:
        if kind == "interrupt" and self.stream_sid:
            self._cleared.add(fields["turn_id"])
            return [json.dumps({"event": "clear", "streamSid": self.stream_sid})]
        return []  # the phone hears audio only; text events stay in the gateway's logs

    def wire_audio(self, turn_id: str, frame: bytes) -> tuple[list[str] | None, bytes | None]:
        turn = self.turn
        # How far into the turn this message ends: the mark Twilio returns once it was played.
        end_ms = round((turn.spoken.sent_ms if turn else 0) + len(frame) * 1000 / (2 * RATE))
        media = {"event": "media", "streamSid": self.stream_sid,
                 "media": {"payload": base64.b64encode(pcm16_to_ulaw(frame)).decode()}}
        mark = {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": f"{turn_id}:{end_ms}"}}
        return [json.dumps(media), json.dumps(mark)], None

    def wire_error(self, code: str, message: str) -> None:
        log.info("error not sent to twilio", extra={"code": code, "detail": message})
        return None
