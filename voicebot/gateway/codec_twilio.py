"""``/v1/twilio``: a Twilio Media Streams bridge (bidirectional ``<Connect><Stream>``) as a codec.

Twilio's ``media`` payloads (base64 μ-law 8 kHz) decode into the caller's audio; the turns'
audio goes back as ``media`` messages in μ-law, each followed by a ``mark`` naming the turn and
how far into it that message ends. Twilio echoes a
mark once the caller has heard the audio before it, so marks are the client's playback report
(what was heard, for the record the brain gets). A barge-in sends ``clear`` (Twilio drops what it
buffered and returns the remaining marks at once: those are ignored, they were never heard).

Twilio cannot send our headers, so the deployment's secret (GATEWAY_TWILIO_SECRET) comes as the
``secret`` custom parameter of ``start`` (or in the stream URL, ``?secret=``, which access logs
keep). A socket without it in the URL holds no session slot until its ``start`` proved it
(``admits`` judges each message; ``transport.read_opening`` reads them, within
GATEWAY_TWILIO_START_TIMEOUT_S): no codec reads the socket. Twilio has no error message; bad input
is counted (voicebot_gateway_client_errors_total) and logged within a budget, and the call goes on.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
from typing import Any

from voicebot.gateway.admission import LogBudget
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import (
    Audio,
    AudioFrame,
    Close,
    End,
    Error,
    Event,
    Input,
    Interrupted,
    Played,
    Reply,
    SessionStarted,
    Start,
)
from voicebot.gateway.g711 import pcm16_to_ulaw, ulaw_to_pcm16
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


def admits(raw: str, settings: GatewaySettings) -> bool | None:
    """What one message before the secret says of the stream: True, a `start` with the secret
    (the stream is admitted on it); None, Twilio's `connected` (wait for the next); False,
    anything else (refuse)."""
    kind, secret = start_secret(raw)
    if kind == "start":
        return secret_ok(secret, settings)
    return None if kind == "connected" else False


class TwilioCodec:
    binary_audio = False  # Twilio sends JSON text only
    output_rate = RATE

    def __init__(self, settings: GatewaySettings, url_secret: str | None = None) -> None:
        self.settings, self.url_secret = settings, url_secret
        self.started = False
        self.stream_sid: str | None = None
        self.call_sid: str | None = None
        # The start message's customParameters, less the secret: the call's metadata.
        self.context: dict[str, str] = {}
        self._cleared: set[str] = set()  # turns a `clear` ended: their returned marks were not heard

    def opening(self) -> list[SessionStart]:
        return []  # the session opens at Twilio's `start`

    # ---- decoding ------------------------------------------------------
    def decode_text(self, raw: str) -> list[Input]:
        try:
            message = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            return self._bad("not JSON")
        kind = message.get("event") if isinstance(message, dict) else None
        if kind == "connected" or kind == "dtmf":
            return []
        if kind == "start":
            return self._start(message)
        if kind == "stop":
            return [End()]
        if not self.started:
            return self._bad(f"{kind!r} before start")
        if kind == "media":
            return self._media(message)
        if kind == "mark":
            return self._mark(message)
        return self._bad(f"unknown event {kind!r}")

    def decode_bytes(self, _data: bytes) -> list[Input]:
        return self._bad("binary frame")

    def _bad(self, why: str) -> list[Input]:
        """Twilio has no message for bad input: it is counted (and logged, within the process's
        budget: a flood of it must not flood the logs), and the call goes on."""
        if BAD_INPUT_LOGS.allow():
            log.warning("bad twilio message", extra={"detail": why[:200], "stream_sid": self.stream_sid})
        return [Reply((), error="bad_request")]

    def _start(self, message: dict[str, Any]) -> list[Input]:
        start = message.get("start")
        if not isinstance(start, dict) or self.started:
            return self._bad("start without a start object, or a second start")
        params = start.get("customParameters") if isinstance(start.get("customParameters"), dict) else {}
        if not secret_ok(self.url_secret or params.get("secret"), self.settings):
            return [Close(CLOSE_UNAUTHORIZED, "unauthorized")]
        out: list[Input] = []
        fmt = start.get("mediaFormat") if isinstance(start.get("mediaFormat"), dict) else {}
        if (fmt.get("encoding", "audio/x-mulaw"), fmt.get("sampleRate", RATE)) != ("audio/x-mulaw", RATE):
            out += self._bad(f"media format {fmt} (expected audio/x-mulaw at 8000 Hz)")
        self.started = True
        self.stream_sid = start.get("streamSid") or message.get("streamSid")
        self.call_sid = start.get("callSid")
        self.context = {str(k)[:200]: str(v)[:200] for k, v in list(params.items())[:20] if k != "secret"}
        language = self.context.get("language", "en")
        language = language if 2 <= len(language) <= 8 else "en"
        # The context reaches the brain with every turn, as data.
        return [*out, Start(SessionStart(None, language, RATE), dict(self.context))]

    def _media(self, message: dict[str, Any]) -> list[Input]:
        media = message.get("media")
        payload = media.get("payload") if isinstance(media, dict) else None
        if not isinstance(payload, str):
            return self._bad("media without a payload")
        if media.get("track", "inbound") != "inbound":
            return []  # an outbound track echoed back: the bot's own voice is not the caller's
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            return self._bad("media payload is not base64")
        return [Audio(ulaw_to_pcm16(data))]

    def _mark(self, message: dict[str, Any]) -> list[Input]:
        mark = message.get("mark")
        name = mark.get("name") if isinstance(mark, dict) else None
        turn_id, _, ms = name.rpartition(":") if isinstance(name, str) else ("", "", "")
        if not turn_id or not ms.isdigit():
            return self._bad(f"mark {name!r} is not one of ours")
        if turn_id in self._cleared:
            return []  # returned by a `clear`: never heard
        return [Played(turn_id, int(ms))]

    # ---- encoding ------------------------------------------------------
    def encode(self, ev: Event) -> list[str | bytes]:
        if isinstance(ev, AudioFrame):
            return self._audio(ev)
        if isinstance(ev, Interrupted) and self.stream_sid:
            self._cleared.add(ev.turn_id)
            return [json.dumps({"event": "clear", "streamSid": self.stream_sid})]
        if isinstance(ev, Error):
            log.info("error not sent to twilio", extra={"code": ev.code, "detail": ev.message})
        elif isinstance(ev, SessionStarted):
            # The custom parameters are the caller's data: redacted by the log formatter unless
            # an operator turns VOICEBOT_LOG_CONTENT on.
            log.info("twilio call started", extra={"stream_sid": self.stream_sid, "call_sid": self.call_sid,
                                                   "session_id": ev.session_id, "context": self.context})
        return []  # the phone hears audio only; text events stay in the gateway's logs

    def _audio(self, ev: AudioFrame) -> list[str | bytes]:
        # How far into the turn this message ends: the mark Twilio returns once it was played.
        end_ms = round(ev.offset_ms + len(ev.pcm) * 1000 / (2 * RATE))
        media = {"event": "media", "streamSid": self.stream_sid,
                 "media": {"payload": base64.b64encode(pcm16_to_ulaw(ev.pcm)).decode()}}
        mark = {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": f"{ev.turn_id}:{end_ms}"}}
        return [json.dumps(media), json.dumps(mark)]
