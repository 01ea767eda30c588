"""bench-gateway's callers: the audio frames they write straight to the socket, prepared once,
arrive at a WebSocket server as the same binary messages the library's send would make, every
caller sends one every 20 ms, and a turn is timed from the caller's quiet frame going to its
reply's bytes arriving, not from or to when the client's loop got round to either."""

from __future__ import annotations

import asyncio
import time

import websockets
from websockets.asyncio.server import serve

from bench.gateway import PHASES, SILENCE, TONE, Session, StampedConnection, microphones, send_frame


def test_prepared_frames_arrive_as_the_audio_they_carry_and_text_still_goes_through_the_library():
    async def scenario() -> list:
        received: list = []
        done = asyncio.Event()

        async def handler(ws) -> None:
            async for message in ws:
                received.append(message)
                if len(received) == 4:
                    done.set()

        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            async with websockets.connect(f"ws://127.0.0.1:{port}") as ws:
                await send_frame(ws, TONE)
                await send_frame(ws, SILENCE)
                await ws.send("hello")  # the library's own frames interleave whole
                await send_frame(ws, b"\x01\x02" * 10)  # not prepared: sent through the library
                await asyncio.wait_for(done.wait(), 5)
        return received

    assert asyncio.run(scenario()) == [TONE, SILENCE, "hello", b"\x01\x02" * 10]


def test_every_caller_sends_a_frame_every_20_ms_even_after_a_stalled_slot():
    """The callers' frames are spread over slots of the 20 ms; a slot that runs late (here the
    whole loop stalls for 50 ms once) is caught up, not skipped, so no caller loses a frame."""
    class Transport:
        def __init__(self) -> None:
            self.frames = 0

        def is_closing(self) -> bool:
            return False

        def write(self, data: bytes) -> None:
            self.frames += 1

    class Ws:
        def __init__(self) -> None:
            self.protocol = type("Protocol", (), {"extensions": []})()
            self.transport = Transport()

    async def scenario() -> list[int]:
        sessions = [Session(Ws(), phase=i % PHASES, next_turn_at=1e18, period=(1e9, 1e9))
                    for i in range(2 * PHASES)]
        stop = asyncio.Event()
        mics = asyncio.create_task(microphones(sessions, stop, []))
        await asyncio.sleep(0.1)
        time.sleep(0.05)  # noqa: ASYNC251 - on purpose: the loop stalls, five rounds of slots come due
        await asyncio.sleep(0.15)
        stop.set()
        await mics
        return [s.ws.transport.frames for s in sessions]

    frames = asyncio.run(scenario())
    # 300 ms of wall time is 15 frames a caller; every caller got about as many as the others.
    assert min(frames) >= 12 and max(frames) - min(frames) <= 1, frames


def test_the_end_of_speech_is_stamped_as_each_callers_quiet_frame_goes():
    """Three callers in one slot end their speech at once, and each write takes 2 ms (a burst of
    sends): each caller's end of speech is the moment its own quiet frame went, not the slot's
    start, so the client's sending order is not counted as the system's latency."""
    writes: list[float] = []

    class Transport:
        def is_closing(self) -> bool:
            return False

        def write(self, data: bytes) -> None:
            writes.append(time.perf_counter())
            time.sleep(0.002)  # a slow send, inside the burst

    class Ws:
        def __init__(self) -> None:
            self.protocol = type("Protocol", (), {"extensions": []})()
            self.transport = Transport()

    async def scenario() -> list[Session]:
        sessions = [Session(Ws(), phase=0, next_turn_at=1e18, period=(1e9, 1e9), state="speaking")
                    for _ in range(3)]
        stop = asyncio.Event()
        mics = asyncio.create_task(microphones(sessions, stop, []))
        await asyncio.sleep(0.01)  # the first slot has gone
        stop.set()
        await mics
        return sessions

    sessions = asyncio.run(scenario())
    assert [s.state for s in sessions] == ["waiting"] * 3
    # Each caller's stamp comes before its own write and after the slow write before it.
    assert sessions[0].speech_end_at <= writes[0]
    for i in (1, 2):
        assert writes[i - 1] + 0.002 <= sessions[i].speech_end_at <= writes[i]


def test_a_reply_is_timed_from_its_bytes_arriving_not_from_when_the_caller_reads_it():
    """The reply's audio arrives while the client's loop is busy elsewhere for 200 ms: the turn is
    the time to its arrival, as the connection noted it."""
    async def scenario() -> tuple[list[float], float]:
        async def handler(ws) -> None:
            async for _ in ws:
                await ws.send(SILENCE)  # the reply's first audio

        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            url = f"ws://127.0.0.1:{port}"
            async with websockets.connect(url, create_connection=StampedConnection) as ws:
                caller = Session(ws, phase=0, next_turn_at=1e18, period=(1e9, 1e9), state="waiting")
                caller.speech_end_at = time.perf_counter()
                await ws.send("end of speech")
                async with asyncio.timeout(5):
                    while ws.received_at < caller.speech_end_at:  # noqa: ASYNC110 - the reply's bytes
                        await asyncio.sleep(0.005)
                busy_from = time.perf_counter()
                time.sleep(0.2)  # noqa: ASYNC251 - on purpose: the client's loop busy with other callers
                reader = asyncio.create_task(caller.receive())
                async with asyncio.timeout(5):
                    while not caller.turns:  # noqa: ASYNC110 - the caller's task has read it
                        await asyncio.sleep(0.005)
                reader.cancel()
                return (caller.turns, (ws.received_at - caller.speech_end_at) * 1000,
                        (busy_from - caller.speech_end_at) * 1000)

    turns, to_arrival_ms, to_busy_ms = asyncio.run(scenario())
    assert turns == [to_arrival_ms]
    assert to_arrival_ms <= to_busy_ms  # the 200 ms the loop was busy are not in the turn


def test_a_caller_refused_at_capacity_records_the_error_it_was_told_not_just_the_close(monkeypatch):
    """A gateway at capacity accepts, sends ``overloaded`` and closes 1013 without reading the
    caller's start. Here the close has always arrived before the caller sends its start (as it
    had for 199 of 200 refused callers in a loaded run): the send fails, and the error is read."""
    from bench import gateway as bench_gateway
    from bench.gateway import open_session

    connect = websockets.connect

    async def connect_then_closed(url, **kwargs):
        ws = await connect(url, **kwargs)
        await asyncio.wait_for(ws.wait_closed(), 5)
        return ws

    monkeypatch.setattr(bench_gateway.websockets, "connect", connect_then_closed)

    async def scenario() -> tuple:
        async def at_capacity(ws) -> None:
            await ws.send('{"type": "error", "code": "overloaded", "message": "at capacity"}')
            await ws.close(code=1013, reason="at capacity")

        async def silent(ws) -> None:
            await ws.close(code=1013, reason="at capacity")

        async with serve(at_capacity, "127.0.0.1", 0) as full, serve(silent, "127.0.0.1", 0) as bare:
            urls = [f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}" for server in (full, bare)]
            await asyncio.sleep(0)
            told = await open_session(urls[0], 0, 0.0, (2.0, 4.0))
            closed = await open_session(urls[1], 0, 0.0, (2.0, 4.0))
        return told, closed

    assert asyncio.run(scenario()) == (("refused", "overloaded"), ("refused", 1013))
