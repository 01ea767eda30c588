"""Internal gRPC calls carry the shared token: a real server (voicebot.common.grpc_server) on a
random port refuses every call without it, except the health checks probes need."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.conftest import INTERNAL_TOKEN
from voicebot.common.config import ServiceSettings
from voicebot.common.grpc_server import start_server
from voicebot.common.internal_auth import (
    InternalAuthError,
    TokenStub,
    internal_channel,
    internal_metadata,
    plain_channel,
)
from voicebot.devstack import ROOT

pytestmark = pytest.mark.integration


def _metadata(_request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return json.dumps(sorted(list(m) for m in context.invocation_metadata())).encode()


async def _echo_stream(requests, _context):
    async for request in requests:
        yield request


def register(server: grpc.aio.Server) -> list[str]:
    # Raw bytes in and out: no serializers needed for a test service.
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Probe", {
        "Metadata": grpc.unary_unary_rpc_method_handler(_metadata),
        "Echo": grpc.stream_stream_rpc_method_handler(_echo_stream),
    })])
    return ["test.Probe"]


@pytest.fixture
async def server():
    running = await start_server(ServiceSettings(port=0, metrics_port=0), register)
    yield f"127.0.0.1:{running.port}"
    await running.server.stop(None)


async def unary(channel: grpc.aio.Channel, method: str = "/test.Probe/Metadata", **kwargs) -> bytes:
    return await channel.unary_unary(method)(b"", timeout=10, **kwargs)


async def echo(channel: grpc.aio.Channel) -> list[bytes]:
    call = channel.stream_stream("/test.Probe/Echo")(iter([b"one", b"two"]), timeout=10)
    return [reply async for reply in call]


async def test_a_call_with_the_token_reaches_the_service_with_its_other_metadata(server):
    async with internal_channel(server) as channel:
        trace = ("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01")
        seen = json.loads(await unary(channel, metadata=(trace,)))
        assert await echo(channel) == [b"one", b"two"]
    pairs = dict(seen)
    assert pairs["authorization"] == f"Bearer {INTERNAL_TOKEN}"
    assert pairs["traceparent"].startswith("00-111")  # the caller's metadata is kept


class ProbeStub:
    """What grpc_tools would generate for test.Probe (raw bytes in and out)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.Metadata = channel.unary_unary("/test.Probe/Metadata")
        self.Echo = channel.stream_stream("/test.Probe/Echo")


async def test_a_token_stub_adds_the_token_to_each_call_next_to_its_own_metadata(server):
    trace = ("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    async with plain_channel(server) as channel:
        stub = TokenStub(ProbeStub(channel), INTERNAL_TOKEN)
        seen = dict(json.loads(await stub.Metadata(b"", timeout=10, metadata=(trace,))))
        bare = dict(json.loads(await stub.Metadata(b"", timeout=10)))
        replies = [r async for r in stub.Echo(iter([b"one", b"two"]), timeout=10)]
        # The channel itself adds nothing: the same call without the stub is refused.
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await ProbeStub(channel).Metadata(b"", timeout=10)
    assert seen["authorization"] == bare["authorization"] == f"Bearer {INTERNAL_TOKEN}"
    assert seen["traceparent"].startswith("00-111")
    assert replies == [b"one", b"two"]
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_token_stub_replaces_an_authorization_the_caller_passed(server):
    async with plain_channel(server) as channel:
        stub = TokenStub(ProbeStub(channel), INTERNAL_TOKEN)
        seen = json.loads(await stub.Metadata(b"", timeout=10,
                                              metadata=(("authorization", "Bearer forged-token-1234"),)))
    assert [v for k, v in seen if k == "authorization"] == [f"Bearer {INTERNAL_TOKEN}"]


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer not-the-token-at-all"),),
                                      (("authorization", INTERNAL_TOKEN),)],  # no "Bearer "
                         ids=["none", "wrong", "not-bearer"])
async def test_calls_without_the_token_are_unauthenticated(server, metadata):
    async with grpc.aio.insecure_channel(server) as channel:
        for call in (unary(channel, metadata=metadata),
                     unary(channel, "/no.Such/Method", metadata=metadata),  # not even UNIMPLEMENTED
                     echo_without(channel, metadata)):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await call
            assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "internal token" in error.value.details()


async def echo_without(channel: grpc.aio.Channel, metadata) -> list[bytes]:
    """A stream that writes nothing: it is refused on its metadata alone. (A message still being
    written when the server refuses ends the call INTERNAL on the client side, "Failed
    execute_batch", instead of with the server's status: a race, seen once on a loaded machine.)"""
    call = channel.stream_stream("/test.Probe/Echo")(timeout=10, metadata=metadata)
    return [reply async for reply in call]


async def test_reflection_needs_the_token_and_health_does_not(server):
    async with grpc.aio.insecure_channel(server) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        listing = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as error:  # refused before any write (echo_without)
            [r async for r in listing]
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        authorized = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10,
            metadata=internal_metadata())
        [answer] = [r async for r in authorized]
        assert "test.Probe" in {s.name for s in answer.list_services_response.service}


@pytest.mark.parametrize("token", ["", "too-short"])
async def test_a_server_does_not_start_without_a_usable_token(monkeypatch, token):
    monkeypatch.setenv("VOICEBOT_INTERNAL_TOKEN", token)
    with pytest.raises(InternalAuthError, match="VOICEBOT_INTERNAL_TOKEN"):
        await start_server(ServiceSettings(port=0, metrics_port=0), register)
    with pytest.raises(InternalAuthError):
        internal_channel("127.0.0.1:1")


async def test_auth_is_off_only_when_said_so(monkeypatch):
    monkeypatch.setenv("VOICEBOT_INTERNAL_TOKEN", "")
    monkeypatch.setenv("VOICEBOT_INTERNAL_AUTH", "false")
    running = await start_server(ServiceSettings(port=0, metrics_port=0), register)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            assert json.loads(await unary(channel)) is not None
    finally:
        await running.server.stop(None)


def test_a_service_without_the_token_exits_with_a_clear_message():
    env = {k: v for k, v in os.environ.items() if k != "VOICEBOT_INTERNAL_TOKEN"}
    env.update({"GATEWAY_TOKENS": "tok=user", "GATEWAY_PORT": "0"})
    result = subprocess.run([sys.executable, "-m", "voicebot.gateway.app"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "VOICEBOT_INTERNAL_TOKEN is empty" in result.stderr
    assert "Traceback" not in result.stderr
