"""The async gRPC server bootstrap every service uses.

It adds the standard health service and server reflection, starts the
Prometheus /metrics port, and on SIGTERM/SIGINT drains: health turns
NOT_SERVING (load balancers stop sending), new calls are refused, and
in-flight streams get ``drain_seconds`` to finish before they are cut.

Every call except the health checks must carry the internal token
(``voicebot.common.internal_auth``); others get UNAUTHENTICATED before any
servicer code runs.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from voicebot.common import gc_tuning
from voicebot.common.config import ServiceSettings
from voicebot.common.internal_auth import OPEN_METHODS, InternalAuthError, internal_token, is_authorized

log = logging.getLogger(__name__)

SHUTTING_DOWN = "this replica is shutting down; call again"
# Large enough for a few seconds of 48 kHz audio in one message, small enough
# that a hostile client cannot make us allocate much.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class InternalTokenInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for every call without the internal token, except the open health checks.

    Unknown methods are refused the same way, so a caller without the token cannot even
    learn which methods exist.
    """

    def __init__(self, token: str, open_methods: frozenset[str] = OPEN_METHODS) -> None:
        self._token = token
        self._open = open_methods
        self._deny = grpc.stream_stream_rpc_method_handler(self._refuse)

    async def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method in self._open or is_authorized(
                handler_call_details.invocation_metadata, self._token):
            return await continuation(handler_call_details)
        log.warning("unauthenticated call refused", extra={"method": handler_call_details.method})
        return self._deny

    @staticmethod
    async def _refuse(_requests, context: grpc.aio.ServicerContext) -> None:
        # Raw bytes in (no deserializer): nothing the caller sent is parsed.
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid internal token")


class IdleCalls:
    """Streams opened ahead of their first message (the gateway opens a turn's calls when the
    caller starts speaking: voicebot/gateway/standby.py). A draining server ends them at once with
    UNAVAILABLE: their turn then opens fresh calls, which the load balancer sends to another
    replica, instead of finding its call cut at the end of the grace period (and the drain
    does not wait out the grace period for streams that never started)."""

    def __init__(self) -> None:
        self._waiting: set[asyncio.Task] = set()
        self._draining = False

    async def first(self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        """The call's first message; None when the client half-closed without one."""
        task = asyncio.current_task()
        assert task is not None
        if self._draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        self._waiting.add(task)
        try:
            return await anext(aiter(requests), None)
        except asyncio.CancelledError:
            if not self._draining:
                raise  # the client cancelled it
            task.uncancel()
            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        finally:
            self._waiting.discard(task)

    def drain(self) -> None:
        self._draining = True
        for task in self._waiting:
            task.cancel()


def server_interceptors(token: str | None) -> list[grpc.aio.ServerInterceptor]:
    return [InternalTokenInterceptor(token)] if token else []


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    metrics_port: int
    health: health.aio.HealthServicer
    service_names: list[str] = field(default_factory=list)

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ["", *self.service_names]:
            await self.health.set(name, status)

    async def drain(self, seconds: float) -> None:
        await self.set_serving(False)
        await self.server.stop(grace=seconds)


async def start_server(
    settings: ServiceSettings,
    register: Callable[[grpc.aio.Server], list[str]],
) -> RunningServer:
    """Build, bind and start the server; ``register`` adds servicers and returns their full names."""
    # Read before anything binds: a missing token stops the service at start (InternalAuthError).
    token = internal_token()
    server = grpc.aio.server(
        interceptors=server_interceptors(token),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
    )
    names = register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME],
        server,
    )
    port = server.add_insecure_port(f"{settings.host}:{settings.port}")
    if port == 0:
        raise RuntimeError(f"could not bind gRPC port {settings.host}:{settings.port}")
    metrics_server, _ = start_http_server(settings.metrics_port, addr=settings.host)
    metrics_port = metrics_server.server_port
    await server.start()
    running = RunningServer(server, port, metrics_port, health_servicer, names)
    await running.set_serving(True)
    return running


async def serve_forever(
    service: str,
    settings: ServiceSettings,
    register: Callable[[grpc.aio.Server], list[str]],
    on_stop: Callable[[], Awaitable[None]] | None = None,
    idle_calls: IdleCalls | None = None,
) -> None:
    """Run until SIGTERM/SIGINT, then drain gracefully (``idle_calls`` end at once). Prints one
    READY line for launchers."""
    collector = gc_tuning.configured()  # a bad VOICEBOT_GC stops the service before it serves
    try:
        running = await start_server(settings, register)
    except InternalAuthError as exc:
        raise SystemExit(f"{service}: {exc}") from None
    log.info(
        "serving",
        extra={"grpc_port": running.port, "metrics_port": running.metrics_port},
    )
    gc_tuning.settle(collector)  # start-up is over: nothing it made is walked by a collection again
    # Launchers (make run, tests) wait for this exact line on stdout.
    print(f"READY {service} grpc={running.port} metrics={running.metrics_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("draining", extra={"grace_seconds": settings.drain_seconds})
    if idle_calls is not None:
        idle_calls.drain()
    await running.drain(settings.drain_seconds)
    if on_stop is not None:
        await on_stop()
    log.info("stopped")
