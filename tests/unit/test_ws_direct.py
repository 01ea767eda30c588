"""Audio frames handed to a call where the socket reads them (voicebot/gateway/ws_direct.py): the same
messages in the same order as through uvicorn's queue, whatever the sink takes or declines.
And the other way, messages sent together: in order, in one write to the socket."""

from __future__ import annotations

import asyncio
import contextlib
from typing import ClassVar

import uvicorn
import websockets
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

from voicebot.gateway import ws_direct


class Recorder:
    """An app that logs every message it gets, and by which path, in one list."""

    def __init__(self, sink_takes=lambda data: True, farewell: list[str | bytes] | None = None) -> None:
        self.log: list[tuple[str, object]] = []
        self.sink_takes = sink_takes
        self.registered: bool | None = None
        self.done = asyncio.Event()
        self.farewell = farewell  # sent together before "bye"
        self.together: list[bool] = []  # what each send_together said

    def sink(self, data: bytes) -> bool:
        if not self.sink_takes(data):
            return False
        self.log.append(("sink", data))
        return True

    async def endpoint(self, ws) -> None:
        await ws.accept()
        self.registered = ws_direct.register(ws.scope, self.sink)
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            if message.get("text") == "slow":
                await asyncio.sleep(0.2)  # busy: frames arriving now must wait in the queue
            self.log.append(("queue", message.get("bytes") if message.get("bytes") is not None
                             else message["text"]))
            if message.get("text") == "end":
                together = ws_direct.send_together(ws.scope)
                if self.farewell is not None and together is not None:
                    self.together.append(together(self.farewell))
                await ws.send_text("bye")
        self.done.set()


class WriteLog:
    """A transport that keeps every write the protocol makes."""

    def __init__(self, transport, writes: list[bytes]) -> None:
        self._transport, self.writes = transport, writes

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class LoggedWrites(ws_direct.DirectFramesProtocol):
    writes: ClassVar[list[bytes]] = []

    def connection_made(self, transport) -> None:
        super().connection_made(WriteLog(transport, self.writes))


@contextlib.asynccontextmanager
async def serving(app: Recorder, protocol="direct"):
    ws = {"direct": ws_direct.DirectFramesProtocol, "logged": LoggedWrites}.get(protocol, protocol)
    config = uvicorn.Config(Starlette(routes=[WebSocketRoute("/ws", app.endpoint)]), host="127.0.0.1",
                            port=0, log_config=None, access_log=False, lifespan="off", ws=ws,
                            ws_per_message_deflate=False)  # as the gateway: frames as they are
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag only
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"ws://127.0.0.1:{port}/ws"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def play(url: str, messages: list[bytes | str]) -> list[bytes | str]:
    """Send the messages, then "end"; what came back up to the app's "bye"."""
    async with websockets.connect(url) as ws:
        for message in messages:
            await ws.send(message)
            await asyncio.sleep(0.005)
        await ws.send("end")
        answers = []
        while (answer := await asyncio.wait_for(ws.recv(), 10)) != "bye":
            answers.append(answer)
        return answers


def received(app: Recorder) -> list[object]:
    return [payload for _, payload in app.log]


async def test_frames_go_to_the_sink_in_order_between_text_messages():
    app = Recorder()
    sent = ["hello", b"frame-1", b"frame-2", "between", b"frame-3"]
    async with serving(app) as url:
        await play(url, sent)
    assert app.registered is True
    assert received(app) == [*sent, "end"]
    assert [path for path, payload in app.log if isinstance(payload, bytes)] == ["sink"] * 3


async def test_a_declined_frame_takes_the_awaited_path_in_its_place():
    app = Recorder(sink_takes=lambda data: data != b"needs-an-answer")
    sent = [b"frame-1", b"needs-an-answer", b"frame-2"]
    async with serving(app) as url:
        await play(url, sent)
    assert app.log[:3] == [("sink", b"frame-1"), ("queue", b"needs-an-answer"), ("sink", b"frame-2")]


async def test_frames_wait_behind_a_message_the_app_is_still_handling():
    app = Recorder()
    sent = ["slow", b"frame-1", b"frame-2", b"frame-3"]
    async with serving(app) as url:
        await play(url, sent)
    # The app was busy with "slow" when the first frame came: it queued behind it (and the
    # socket was paused); once the app waits again, the frames after it go to the sink.
    assert received(app) == [*sent, "end"]
    assert app.log[1] == ("queue", b"frame-1")


async def test_a_sink_that_raises_is_dropped_and_the_connection_goes_on():
    def broken(data: bytes) -> bool:
        raise RuntimeError("a bug in the sink")

    app = Recorder(sink_takes=broken)
    sent = [b"frame-1", b"frame-2"]
    async with serving(app) as url:
        await play(url, sent)
    assert app.log[:2] == [("queue", b"frame-1"), ("queue", b"frame-2")]


async def test_under_uvicorns_own_protocol_registering_says_no_and_every_frame_is_queued():
    app = Recorder()
    async with serving(app, "websockets-sansio") as url:
        await play(url, [b"frame-1", "text"])
    assert app.registered is False
    assert app.log[:2] == [("queue", b"frame-1"), ("queue", "text")]


async def test_messages_sent_together_reach_the_client_in_order_from_one_write():
    farewell = ['{"type": "audio.start"}', b"first-audio-frame", '{"type": "note"}']
    app = Recorder(farewell=farewell)
    LoggedWrites.writes = []
    async with serving(app, "logged") as url:
        answers = await play(url, [b"frame-1"])
    assert app.together == [True]
    assert answers == farewell
    # One write carries all three frames (the client reads them in one wake-up), not one each.
    parts = (b"audio.start", b"first-audio-frame", b"note")
    carrying = [write for write in LoggedWrites.writes if any(part in write for part in parts)]
    assert len(carrying) == 1
    assert all(part in carrying[0] for part in parts)


async def test_under_uvicorns_own_protocol_there_is_no_sending_together():
    app = Recorder(farewell=["a", "b"])
    async with serving(app, "websockets-sansio") as url:
        assert await play(url, []) == []
    assert app.together == []  # send_together(scope) was None: the app sends one by one


def test_sending_together_declines_once_the_connection_cannot_take_them():
    protocol = LoggedWrites.__new__(LoggedWrites)  # the checks run before any I/O
    protocol.disconnected, protocol.close_sent, protocol.handshake_complete = True, False, True
    protocol.initial_response = None
    protocol.writable = asyncio.Event()
    protocol.transport = ClosingTransport()
    assert protocol.send_together(["a", b"b"]) is False  # the client is gone
    protocol.disconnected = False
    assert protocol.send_together(["a", b"b"]) is False  # its buffer is full: flow control
    protocol.writable.set()
    assert protocol.send_together(["a", b"b"]) is False  # the socket is being closed
    assert protocol.transport.written == []


class ClosingTransport:
    written: list[bytes]

    def __init__(self) -> None:
        self.written = []

    def is_closing(self) -> bool:
        return True

    def write(self, data: bytes) -> None:
        self.written.append(data)
