"""What one hop between two processes costs on this machine (``make bench-gateway`` prints it).

A turn with instant engines is mostly hops: the client's frame to the gateway, a message on the
open STT stream and its endpoint back, a message on the brain's call opened at the onset (and
within it Redis and the LLM's HTTP stream), one on the TTS stream, the audio to the client. On
a shared two-core virtual machine a bare gRPC call between two idle processes takes over a
millisecond (still timed: the calls opened at the onset cost one each), so the figures say how
much of a turn is the machine's floor rather than the gateway's work, and make runs on
different machines comparable. Both ends are processes of their own, started as the services
are (``python -m bench.gateway_hops probe N`` against ``python -m bench.gateway_hops``); every
probe waits ``GAP_S`` first, as a turn's hops come after the processes have idled between
frames. Then a socket round trip and some Python are timed after ``IDLE_S`` with both ends
idle, as one caller's brain, Redis and LLM are between turns: a machine whose guests share
their cores runs a process just woken from such a sleep several times slower, and one caller's
turn follows that factor more than any code.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import grpc

from bench.stats import percentile
from voicebot.common import event_loop
from voicebot.common.grpc_env import grpc_environment

GAP_S = 0.02  # a frame's time: between frames the processes sleep
# Between one caller's turns the brain, Redis and the LLM sleep for a second or more (only the
# gateway and STT hear the caller's frames). On a shared virtual machine a process that slept
# that long can run its first work several times slower than back to back (most likely its
# caches went to other guests), so the probe also times a round trip and some Python after this
# much idle.
IDLE_S = 0.5
IDLE_COUNT = 8
SERVICE = "bench.Echo"
# Some Python of the kind a turn runs (a prompt's JSON, a few objects): ~0.2 ms back to back.
_WORK = {"messages": [{"role": "user", "content": "a table for two please " * 8, "n": n}
                      for n in range(120)]}


def _same(data: bytes) -> bytes:
    return data


async def _serve() -> None:
    async def unary_stream(request: bytes, context):
        yield request

    async def stream_stream(requests, context):
        async for request in requests:
            yield request

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "UnaryStream": grpc.unary_stream_rpc_method_handler(unary_stream, _same, _same),
        "StreamStream": grpc.stream_stream_rpc_method_handler(stream_stream, _same, _same),
    }),))
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(4096):
            writer.write(data)
        writer.close()

    sockets = await asyncio.start_server(echo, "127.0.0.1", 0)
    socket_port = sockets.sockets[0].getsockname()[1]
    print(json.dumps({"grpc": grpc_port, "socket": socket_port}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent goes


async def _timed(probe, count: int) -> list[float]:
    times = []
    for _ in range(count):
        await asyncio.sleep(GAP_S)
        started = time.perf_counter()
        await probe()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _python_work() -> None:
    json.loads(json.dumps(_WORK))


async def _after_idle(socket_round_trip, idle_s: float = IDLE_S,
                      idle_count: int = IDLE_COUNT) -> dict[str, float]:
    """A socket round trip and ``_python_work``, each after ``idle_s`` with both processes idle,
    and the work once more right after it: how much slower a process just woken from a long
    sleep runs here (``cold_work_factor``), each pair timed at the same moment of the machine's
    hour. The round trips and the work alternate, so that neither warms the other."""
    round_trips, cold, warm = [], [], []
    for index in range(2 * idle_count):
        await asyncio.sleep(idle_s)
        if index % 2 == 0:
            started = time.perf_counter()
            await socket_round_trip()
            round_trips.append((time.perf_counter() - started) * 1000)
            continue
        for times in (cold, warm):
            started = time.perf_counter()
            _python_work()
            times.append((time.perf_counter() - started) * 1000)
    cold_ms, warm_ms = percentile(cold, 0.5), percentile(warm, 0.5)
    return {"socket_round_trip_after_idle_ms": percentile(round_trips, 0.5),
            "work_ms": warm_ms, "work_after_idle_ms": cold_ms,
            "cold_work_factor": cold_ms / warm_ms if warm_ms > 0 else 0.0}


async def measure(count: int = 100) -> dict[str, float]:
    """p50 ms of each kind of hop, a round trip each, between two fresh processes started as the
    services are (gRPC's settings, ``voicebot.common.grpc_env``, are read when a process starts,
    so neither end may be this one)."""
    probe = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.gateway_hops", "probe", str(count),
        stdout=asyncio.subprocess.PIPE, env={**os.environ, **grpc_environment(os.environ)})
    out, _ = await probe.communicate()
    if probe.returncode != 0:
        raise RuntimeError(f"the hop probe failed (exit {probe.returncode})")
    return json.loads(out.decode().strip().splitlines()[-1])


async def _print_probe(count: int) -> None:
    print(json.dumps(await _probe(count)), flush=True)


async def _probe(count: int) -> dict[str, float]:
    """``measure``'s child: the client end, against an echo process of its own."""
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.gateway_hops", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    try:
        ports = json.loads(await server.stdout.readline())
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["socket"])

        async def socket_round_trip() -> None:
            writer.write(b"ping")
            await reader.readexactly(4)

        channel = grpc.aio.insecure_channel(f"127.0.0.1:{ports['grpc']}")
        unary_stream = channel.unary_stream(f"/{SERVICE}/UnaryStream", _same, _same)
        stream_stream = channel.stream_stream(f"/{SERVICE}/StreamStream", _same, _same)

        async def call() -> None:
            async for _ in unary_stream(b"text"):
                pass

        outbox: asyncio.Queue[bytes] = asyncio.Queue()

        async def requests():
            while True:
                yield await outbox.get()

        stream = stream_stream(requests())

        async def stream_message() -> None:
            await outbox.put(b"audio")
            await stream.read()

        for probe in (socket_round_trip, call, stream_message):  # warm each path first
            await _timed(probe, 5)
        result = {name: percentile(await _timed(probe, count), 0.5) for name, probe in (
            ("socket_round_trip_ms", socket_round_trip), ("grpc_call_ms", call),
            ("grpc_stream_message_ms", stream_message))}
        result.update(await _after_idle(socket_round_trip,
                                        idle_count=min(IDLE_COUNT, max(2, count // 10))))
        stream.cancel()
        await channel.close()
        writer.close()
    finally:
        server.kill()
        await server.wait()
    # A turn with instant engines crosses, one after the other: the client's frame in and the
    # audio out (one round trip, in two halves), a message on the open STT stream and its
    # endpoint back, the request on the brain's call and its first text back (the call was opened
    # at the speech's onset: voicebot/gateway/standby.py), inside it Redis's read and the LLM's first chunk
    # (two round trips), and the text on the TTS stream (opened at the onset too) and its audio.
    result["turn_floor_ms"] = 3 * result["grpc_stream_message_ms"] + 3 * result["socket_round_trip_ms"]
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        event_loop.run(_print_probe(int(sys.argv[2])), "auto", "")
    else:
        event_loop.run(_serve(), "auto", "")  # uvloop, as the services run
