"""gRPC channels to STT, brain and TTS, opened once per gateway process.

Every call on them carries the internal token (voicebot.common.internal_auth): the stubs add
it to each call's metadata (``TokenStub``), not client interceptors, through whose wrapper every
streamed message would go (slower in ``make bench-gateway``).
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from voicebot.common.internal_auth import TokenStub, internal_token, plain_channel
from voicebot.v1 import brain_pb2_grpc, stt_pb2_grpc, tts_pb2_grpc


class Upstreams:
    def __init__(self, stt_addr: str, brain_addr: str, tts_addr: str) -> None:
        self.addresses = {"stt": stt_addr, "brain": brain_addr, "tts": tts_addr}
        token = internal_token()  # InternalAuthError at start when it is missing
        self.channels = {name: plain_channel(addr) for name, addr in self.addresses.items()}
        self.stt = TokenStub(stt_pb2_grpc.SpeechToTextStub(self.channels["stt"]), token)
        self.brain = TokenStub(brain_pb2_grpc.BrainStub(self.channels["brain"]), token)
        self.tts = TokenStub(tts_pb2_grpc.TextToSpeechStub(self.channels["tts"]), token)

    async def health(self, timeout: float = 1.0) -> dict[str, bool]:
        async def check(name: str) -> bool:
            stub = health_pb2_grpc.HealthStub(self.channels[name])
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout)
            except grpc.aio.AioRpcError:
                return False
            return reply.status == health_pb2.HealthCheckResponse.SERVING

        names = list(self.channels)
        results = await asyncio.gather(*(check(n) for n in names))
        return dict(zip(names, results, strict=True))

    async def reconnected(self, name: str) -> None:
        """Return when the channel to ``name``, now down, is connected again (it reconnects
        within about a second of the upstream's return, voicebot.common.internal_auth). A
        channel that is up now gives no such moment: this waits until cancelled, and the
        caller's own bound (a backoff delay) applies."""
        channel = self.channels[name]
        state = channel.get_state(try_to_connect=True)
        if state == grpc.ChannelConnectivity.READY:
            await asyncio.Event().wait()
        while state != grpc.ChannelConnectivity.READY:
            await channel.wait_for_state_change(state)
            state = channel.get_state(try_to_connect=True)

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close()
