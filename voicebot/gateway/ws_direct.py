"""The gateway's WebSocket protocol: uvicorn's, with audio frames handed over where they arrive.

uvicorn's WebSocket protocol gives each message to the app through an ``asyncio.Queue``: it
pauses reading the socket, wakes the app's task, and resumes reading once the app has taken
the message (two changes to the poller and a task switch per 20 ms audio frame, a sizeable
share of the gateway's work per frame). Here a conversation may
register a *frame sink*: a plain function that takes a binary message and says whether it
handled it. While the app waits for its next message and none is queued, a binary message
goes to the sink inside ``data_received``, so the order of messages is the same as through the
queue; whatever the sink declines (``False``: it needs to await, e.g. to answer with an error)
and every other message go through the queue as before.

The sink must not block, raise or await; a sink that raises is dropped and its message queued.

The other way, a call may send several messages *together*: one write to the socket for all of
them, where uvicorn's ``send`` makes one per message. A reply's ``audio.start`` and its first
audio go out so: the client reads both in one wake-up, and the gateway runs the ASGI send path
once on the turn's way to its first audio.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState

log = logging.getLogger("gateway")

# Where an app finds the frame tap in its scope (``scope["extensions"]``).
EXTENSION = "voicebot.frame_sink"
# Where it finds the connection's send of several messages in one write.
TOGETHER = "voicebot.send_together"

FrameSink = Callable[[bytes], bool]
# Sends the messages (text: str, binary: bytes) in one write and says True; False, with nothing
# sent, where the connection cannot take them now (send them one by one, as usual, then).
SendTogether = Callable[[Sequence[str | bytes]], bool]


class FrameTap:
    """A connection's one registration point: ``tap.sink = handler`` (``None``: all queued)."""

    __slots__ = ("sink",)

    def __init__(self) -> None:
        self.sink: FrameSink | None = None


def register(scope: dict, sink: FrameSink | None) -> bool:
    """Give the connection's binary messages to ``sink`` where it can; False when the server
    runs another protocol (every message then comes through ``receive`` as usual)."""
    tap = scope.get("extensions", {}).get(EXTENSION)
    if tap is None:
        return False
    tap.sink = sink
    return True


def send_together(scope: dict) -> SendTogether | None:
    """The connection's send of several messages in one write; None under another protocol."""
    return scope.get("extensions", {}).get(TOGETHER)


class DirectFramesProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol plus the frame tap (see the module's docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tap = FrameTap()
        self.app_waiting = False  # the app is in receive() with nothing queued

    def handle_connect(self, event) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][EXTENSION] = self.tap
            scope["extensions"][TOGETHER] = self.send_together

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        scope = getattr(self, "scope", None)
        if scope is not None:  # the scope held this protocol's method: no cycle outlives it
            scope["extensions"].pop(TOGETHER, None)

    def send_together(self, messages: Sequence[str | bytes]) -> bool:
        """``messages`` in one write (see the module's docstring). Not where uvicorn's ``send``
        would wait or refuse: the socket's buffer full (flow control), the connection closing
        or closed, or no WebSocket to send on (the handshake answered over HTTP)."""
        if (self.disconnected or self.close_sent or not self.handshake_complete
                or self.initial_response is not None or not self.writable.is_set()
                or self.transport.is_closing()):
            return False
        try:
            for message in messages:
                if isinstance(message, bytes):
                    self.conn.send_binary(message)
                else:
                    self.conn.send_text(message.encode())
        except InvalidState:  # the peer's close came first: nothing was queued
            return False
        self.transport.write(b"".join(self.conn.data_to_send()))
        return True

    def send_receive_event_to_app(self) -> None:
        sink = self.tap.sink
        if (sink is not None and self.app_waiting and self.curr_msg_data_type == "bytes"
                and not self.close_sent and self.queue.empty()):
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            try:
                handled = sink(data)
            except Exception:  # a bug in a sink must not take the connection down
                log.exception("frame sink failed; this connection's frames go through the queue")
                self.tap.sink, handled = None, False
            if handled:
                self.frames = []
                return
        super().send_receive_event_to_app()

    async def receive(self):
        self.app_waiting = self.queue.empty()
        try:
            return await super().receive()
        finally:
            self.app_waiting = False
