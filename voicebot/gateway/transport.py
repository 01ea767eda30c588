"""One WebSocket between a codec and a conversation, whatever the protocol.

Reads the client's messages, has the codec decode them, and hands the inputs to the
conversation one at a time; writes the conversation's events as the codec encodes them, under
one lock (several messages for one event, or a frame and the ``audio.start`` before it, go
together: one write where the server's protocol can, ``ws_direct.py``). Where the codec's
binary messages are audio as it is, they are handed to the conversation where the socket reads
them (``ws_direct.py``: no task switch per frame).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from voicebot.gateway import ws_direct
from voicebot.gateway.active_turn import Events
from voicebot.gateway.conversation import Conversation, Outcome
from voicebot.gateway.events import Cancel, Close, Commit, Event, Hangup, Input, Reply, Truncated
from voicebot.gateway.metrics import CLIENT_ERRORS
from voicebot.gateway.protocol import SessionStart


async def read_opening(ws: WebSocket, admits: Callable[[str], bool | None], max_messages: int,
                       timeout_s: float) -> tuple[str | None, str]:
    """The text message that admits a socket before it holds a session (a Twilio stream's
    ``start`` with its secret), read within ``timeout_s`` from at most ``max_messages``:
    ``admits`` (the codec's) says True (this one), None (wait for the next) or False.
    (None, why) when none did: "unauthorized" or "auth_timeout"."""
    try:
        async with asyncio.timeout(timeout_s):
            for _ in range(max_messages):
                message = await ws.receive()
                raw = message.get("text")
                if message["type"] == "websocket.disconnect" or raw is None:
                    break
                verdict = admits(raw)
                if verdict is not None:
                    return (raw, "") if verdict else (None, "unauthorized")
    except TimeoutError:
        return None, "auth_timeout"
    return None, "unauthorized"


class Codec(Protocol):
    binary_audio: bool
    output_rate: int | None  # the rate the protocol fixes for reply audio (None: the gateway's)

    def opening(self) -> list[SessionStart]:
        """The sessions the protocol opens itself at connect (the Realtime API's)."""

    def decode_text(self, raw: str) -> list[Input]: ...

    def decode_bytes(self, data: bytes) -> list[Input]: ...

    def encode(self, ev: Event) -> list[str | bytes]: ...


class Transport:
    def __init__(self, ws: WebSocket, codec: Codec) -> None:
        self.ws, self.codec = ws, codec
        self._lock = asyncio.Lock()
        self._together: ws_direct.SendTogether | None = None  # set in serve() where the server has it

    # ---- out -----------------------------------------------------------
    async def emit(self, events: Events, still_valid: Callable[[], bool] | None = None) -> bool:
        """The events, encoded, in one write (see ``active_turn.Outlet``). A closed socket
        swallows them."""
        if self.ws.application_state != WebSocketState.CONNECTED:
            return True
        hangup: Hangup | None = None
        async with self._lock:
            if still_valid is not None and not still_valid():
                return False
            frames: list[str | bytes] = []
            for ev in events() if callable(events) else events:
                if isinstance(ev, Hangup):
                    hangup = ev
                else:
                    frames += self.codec.encode(ev)
            await self._write(frames)
        if hangup is not None:
            await self.close(hangup.code, hangup.reason)
        return True

    async def send(self, frames: Sequence[str | bytes]) -> None:
        """Frames straight from the codec (replies to the client's messages)."""
        if frames and self.ws.application_state == WebSocketState.CONNECTED:
            async with self._lock:
                await self._write(frames)

    async def _write(self, frames: Sequence[str | bytes]) -> None:
        if len(frames) > 1 and self._together is not None and self._together(frames):
            return
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            for frame in frames:
                if isinstance(frame, bytes):
                    await self.ws.send_bytes(frame)
                else:
                    await self.ws.send_text(frame)

    async def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(code=code, reason=reason)

    # ---- in ------------------------------------------------------------
    async def serve(self, conversation: Conversation, opening: Sequence[str] = ()) -> None:
        """Serve the socket until it closes; ``opening``: text messages already read from it
        (a Twilio stream's ``start``, read before the call was admitted). A session the
        protocol opens itself that cannot be opened raises ``ProtocolError``."""
        scope = self.ws.scope
        ws_direct.register(scope, conversation.audio_now if self.codec.binary_audio else None)
        self._together = ws_direct.send_together(scope)
        if self.codec.output_rate is not None:
            conversation.output_rate = self.codec.output_rate
        conversation.arm_idle()
        try:
            for start in self.codec.opening():
                await conversation.start_session(start)
            for raw in opening:
                if not await self.apply(conversation, self.codec.decode_text(raw)):
                    return
            while True:
                message = await self.ws.receive()
                conversation.touch()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes") is not None:
                    items = self.codec.decode_bytes(message["bytes"])
                elif message.get("text") is not None:
                    items = self.codec.decode_text(message["text"])
                else:
                    continue
                if not await self.apply(conversation, items):
                    return
        finally:
            ws_direct.register(scope, None)  # the server's protocol no longer holds the conversation
            self._together = None  # nor the transport the protocol
            await conversation.close()

    async def apply(self, conversation: Conversation, items: list[Input]) -> bool:
        """The inputs of one message, in order; False ends the session."""
        for item in items:
            if isinstance(item, Reply):
                if item.error is not None:
                    CLIENT_ERRORS.labels(item.error).inc()
                await self.send(item.frames)
                continue
            if isinstance(item, Close):
                await self.close(item.code, item.reason)
                return False
            outcome = await conversation.handle(item)
            if outcome is Outcome.END:
                return False
            if outcome is Outcome.REFUSED and isinstance(item, Truncated | Cancel | Commit):
                CLIENT_ERRORS.labels("bad_request").inc()
                await self.send(item.refused)
            elif outcome is Outcome.DONE and isinstance(item, Truncated):
                await self.send(item.done)
        return True
