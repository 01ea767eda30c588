"""A draining service ends the streams still waiting for their first message at once
(voicebot/common/grpc_server.py, ``IdleCalls``): the gateway opens a turn's calls when the
caller starts speaking (voicebot/gateway/standby.py), and such a call must not hold a replica's drain
for its whole grace period, nor carry a turn into a replica that is going away.

A real service process (tests/fakes/idle_echo.py, ``serve_forever`` with a 10 s grace), real
gRPC, SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import grpc
import pytest

from voicebot.common.internal_auth import internal_channel

TOKEN = "t" * 32
GRACE_S = 10.0


@pytest.fixture
def echo_service():
    env = {**os.environ, "VOICEBOT_INTERNAL_TOKEN": TOKEN, "DRAIN_SECONDS": str(GRACE_S),
           "LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.idle_echo"], env=env,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("READY echo"), line
    port = int(line.split("grpc=")[1].split()[0])
    yield proc, f"127.0.0.1:{port}"
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def stream(channel):
    return channel.stream_stream("/bench.Echo/Stream", request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)


async def test_a_stream_waiting_for_its_first_message_ends_at_once_when_the_service_drains(echo_service):
    proc, addr = echo_service
    never = asyncio.Event()

    async def nothing_yet():
        await never.wait()
        yield b""

    async with internal_channel(addr, token=TOKEN) as channel:
        call = stream(channel)(nothing_yet())
        await call.wait_for_connection()
        await asyncio.sleep(0.2)  # the service's handler is waiting for the first message
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(call.code(), GRACE_S / 2) == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in await call.details()
        await asyncio.to_thread(proc.wait, GRACE_S / 2)  # nothing else held the drain
        assert time.monotonic() - sent < GRACE_S / 2
        never.set()


async def test_a_stream_under_way_finishes_within_the_grace_period(echo_service):
    proc, addr = echo_service
    go_on = asyncio.Event()

    async def two_messages():
        yield b"one"
        await go_on.wait()
        yield b"two"

    async with internal_channel(addr, token=TOKEN) as channel:
        call = stream(channel)(two_messages())
        assert await call.read() == b"one"
        proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        go_on.set()
        assert await call.read() == b"two"  # not cut: the drain waits for streams under way
        assert await call.code() == grpc.StatusCode.OK
    await asyncio.to_thread(proc.wait, GRACE_S)
