"""A down STT link reopens as soon as its channel is connected again, not after a backoff that grew
while STT restarted (tests/faults found the first utterance after an STT restart lost); a refusal
at the stream cap still waits out its backoff."""

from __future__ import annotations

import asyncio
import time

import grpc

from voicebot.gateway.stt_link import Backoff, SttLink
from voicebot.v1 import stt_pb2

FRAME = bytes(640)


def scripted_stt(code: grpc.StatusCode, up: asyncio.Event, opened: list[float]):
    """Streams fail with ``code`` until ``up`` is set; then they stay open."""

    def open_stream(_requests):
        opened.append(time.monotonic())

        async def events():
            if not up.is_set():
                raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "scripted")
            await asyncio.Event().wait()
            yield

        return events()

    return open_stream


def link(open_stream, reconnected) -> SttLink:
    async def nothing(*_args) -> None:
        return None

    return SttLink(open_stream, stt_pb2.RecognitionConfig(sample_rate=16000), on_event=nothing,
                   on_ended=nothing, on_down=nothing, max_frames=100, max_message_bytes=64_000,
                   backoff=Backoff(first_s=4.0, max_s=4.0), reconnected=reconnected)


async def test_a_down_link_reopens_when_the_channel_is_back():
    up, opened = asyncio.Event(), []
    stt = link(scripted_stt(grpc.StatusCode.UNAVAILABLE, up, opened), reconnected=up.wait)
    stt.send(FRAME, time.perf_counter())
    await asyncio.sleep(0.3)  # failed at once: now in a 2-4 s backoff
    assert len(opened) == 1
    back_at = time.monotonic()
    up.set()  # the channel is connected again
    await asyncio.sleep(0.2)
    assert len(opened) == 2 and opened[-1] - back_at < 0.1
    await stt.close()


async def test_a_refused_stream_waits_out_its_backoff_even_with_the_channel_up():
    up, opened = asyncio.Event(), []
    connected = asyncio.Event()
    connected.set()  # the channel is fine: STT is full, not down
    stt = link(scripted_stt(grpc.StatusCode.RESOURCE_EXHAUSTED, up, opened), reconnected=connected.wait)
    stt.send(FRAME, time.perf_counter())
    await asyncio.sleep(1.0)
    assert len(opened) == 1  # the next one waits 2-4 s
    await stt.close()


async def test_a_slow_refusal_is_still_one_outage(monkeypatch):
    """STT at capacity but slow to say so (loaded): the caller is told once, not per refusal."""
    monkeypatch.setattr("voicebot.gateway.stt_link.HEALTHY_AFTER_S", 0.1)
    told: list[grpc.StatusCode] = []

    def open_stream(_requests):
        async def events():
            await asyncio.sleep(0.15)  # longer than "healthy after"
            raise grpc.aio.AioRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(),
                                       grpc.aio.Metadata(), "at capacity")
            yield

        return events()

    async def down(code: grpc.StatusCode, _detail: str) -> None:
        told.append(code)

    async def nothing(*_args) -> None:
        return None

    stt = SttLink(open_stream, stt_pb2.RecognitionConfig(sample_rate=16000), on_event=nothing,
                  on_ended=nothing, on_down=down, max_frames=100, max_message_bytes=64_000,
                  backoff=Backoff(first_s=0.05, max_s=0.05))
    stt.send(FRAME, time.perf_counter())
    await asyncio.sleep(1.0)  # several refusals
    assert told == [grpc.StatusCode.RESOURCE_EXHAUSTED]
    await stt.close()
