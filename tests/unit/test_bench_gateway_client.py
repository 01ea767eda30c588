"""bench-gateway's callers: the audio frames they write straight to the socket, prepared once,
arrive at a WebSocket server as the same binary messages the library's send would make."""

from __future__ import annotations

import asyncio

import websockets
from websockets.asyncio.server import serve

from gateway.bench_gateway import SILENCE, TONE, send_frame


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
