"""``python -m tests.fakes.idle_echo``: a gRPC service run by the services' own ``serve_forever``,
for tests of its drain. ``bench.Echo/Stream`` waits for its first message the way Brain.Converse
and TTS's stream do (``IdleCalls``), then echoes each message. Prints ``READY echo grpc=PORT``.
"""

from __future__ import annotations

import asyncio

import grpc

from voicebot.common.config import ServiceSettings
from voicebot.common.grpc_server import IdleCalls, serve_forever

SERVICE = "bench.Echo"


def _same(data: bytes) -> bytes:
    return data


async def main() -> None:
    idle = IdleCalls()

    async def stream(requests, context):
        first = await idle.first(requests, context)
        if first is None:
            return
        yield first
        async for request in requests:
            yield request

    def register(server: grpc.aio.Server) -> list[str]:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
            "Stream": grpc.stream_stream_rpc_method_handler(stream, _same, _same)}),))
        return [SERVICE]

    await serve_forever("echo", ServiceSettings(), register, idle_calls=idle)


if __name__ == "__main__":
    asyncio.run(main())
