"""How the gateway process serves: the event loop and uvicorn's WebSocket protocol.

uvicorn's default WebSocket protocol (websockets-sansio) pauses reading the socket after every
message and resumes it when the app takes that message: two event-loop reader changes per
20 ms audio frame and call. ``QueuedReadProtocol`` pauses only when ``ws_max_queue`` messages
are waiting (backpressure on a client that sends faster than the call consumes). uvloop runs
the loop in C. ``make bench-gateway`` measures both (README, "Gateway capacity").
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol


class QueuedReadProtocol(WebSocketsSansIOProtocol):
    """websockets-sansio that stops reading only when its queue is full, not at every message."""

    def send_receive_event_to_app(self) -> None:
        paused = self.read_paused
        self.read_paused = True  # the parent pauses whenever this is False: not at every message
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = paused
        if not self.read_paused and self.queue.qsize() >= self.config.ws_max_queue:
            self.read_paused = True
            self.transport.pause_reading()


def ws_protocol(name: str) -> type | str:
    """uvicorn's ``ws`` setting: ours for "auto", else the named uvicorn implementation."""
    return QueuedReadProtocol if name == "auto" else name


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def run(main: Coroutine[Any, Any, None], loop: str) -> None:
    if loop != "asyncio" and uvloop_available():
        import uvloop

        uvloop.run(main)
        return
    if loop == "uvloop":
        raise SystemExit("GATEWAY_LOOP=uvloop but uvloop is not installed")
    asyncio.run(main)
