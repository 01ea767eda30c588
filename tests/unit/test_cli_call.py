"""`voicebot call`'s client against a scripted gateway: when is a call over?

The call is over once the audio (with its trailing silence) is all sent and the last turn has
reported its ``turn.metrics``, in whichever order the two happen. A reply started on the
speculative transcript can report before the trailing silence is all sent.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import websockets
from websockets.asyncio.server import serve

from voicebot.common.audio import float_to_pcm16, write_wav
from voicebot.gateway.call_result import TRAILING_SILENCE_MS
from voicebot.gateway.cli import call

# The 100 ms of speech and the client's trailing silence, as 16 kHz pcm16.
ALL_AUDIO_BYTES = (1600 + 16000 * TRAILING_SILENCE_MS // 1000) * 2


def short_wav(tmp_path) -> str:
    path = tmp_path / "speech.wav"
    write_wav(path, float_to_pcm16(np.zeros(1600, dtype=np.float32)), 16000)  # 100 ms
    return str(path)


def event(kind: str, **fields) -> str:
    return json.dumps({"type": kind, **fields})


def turn(turn_id: str, text: str) -> list[str]:
    return [event("transcript.final", turn_id=turn_id, text=text),
            event("reply.done", turn_id=turn_id, text=f"reply to {text}"),
            event("turn.metrics", turn_id=turn_id, ms={"voice_to_voice": 300})]


async def scripted_gateway(plan):
    """A gateway that answers session.start, then runs ``plan(ws, all_audio_sent)``."""
    async def handler(ws):
        await ws.recv()
        await ws.send(event("session.started", session_id="s_1",
                            audio={"encoding": "pcm16", "sample_rate": 16000}))
        all_sent = asyncio.Event()

        async def read_audio():
            received = 0
            async for message in ws:
                received += len(message) if isinstance(message, bytes) else 0
                if received >= ALL_AUDIO_BYTES:
                    all_sent.set()

        reader = asyncio.create_task(read_audio())
        try:
            await plan(ws, all_sent)
            await ws.wait_closed()  # stays open: the client decides when the call is over
        finally:
            reader.cancel()
    return await serve(handler, "127.0.0.1", 0)


def url(server) -> str:
    return f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/call"


async def call_through(plan, tmp_path):
    """``voicebot call`` of 100 ms of audio at real-time pace against a gateway playing ``plan``."""
    async with await scripted_gateway(plan) as server:
        return await asyncio.wait_for(call(url(server), "tok", wav=short_wav(tmp_path), timeout=10), 15)


@pytest.mark.parametrize("reports", ["before the trailing silence is all sent", "after all audio is sent"])
async def test_a_turn_that_reports_ends_the_call_whether_the_audio_is_all_sent_or_not(tmp_path, reports):
    async def plan(ws, all_sent):
        if reports.startswith("after"):
            await all_sent.wait()
            await asyncio.sleep(0.3)
        for message in turn("t_1", "hello"):
            await ws.send(message)

    result = await call_through(plan, tmp_path)
    assert result.replies == ["reply to hello"] and len(result.metrics) == 1


async def test_speech_heard_after_a_finished_turn_keeps_the_call_open_for_its_reply(tmp_path):
    async def plan(ws, all_sent):
        for message in turn("t_1", "first"):
            await ws.send(message)
        await ws.send(event("transcript.partial", turn_id="", text="sec"))
        await all_sent.wait()
        await asyncio.sleep(0.5)  # the second turn reports well after the audio is all sent
        for message in turn("t_2", "second"):
            await ws.send(message)

    result = await call_through(plan, tmp_path)
    assert result.replies == ["reply to first", "reply to second"] and len(result.metrics) == 2


async def test_a_closed_socket_before_any_turn_is_an_error_not_a_hang(tmp_path):
    async def plan(ws, _all_sent):
        await ws.close()

    try:
        await call_through(plan, tmp_path)
    except websockets.ConnectionClosed:
        pass
    else:
        raise AssertionError("a call whose socket closed before any turn must raise")
