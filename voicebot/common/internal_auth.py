"""The credential every internal gRPC call carries: a shared token in metadata.

One deployment-wide token (``VOICEBOT_INTERNAL_TOKEN``) travels as
``authorization: Bearer <token>`` on every call between services; each gRPC
server checks it in an interceptor (``voicebot.common.grpc_server``) and
answers anything else with UNAUTHENTICATED. Only ``grpc.health.v1.Health``
stays open, because Kubernetes' gRPC probes cannot send metadata.

Without a token a service refuses to start (and a client refuses to open a
channel), unless ``VOICEBOT_INTERNAL_AUTH=false`` says so explicitly: a
missing Secret must not silently turn authentication off. ``make run`` and
the tests' fixtures generate a token and pass it to every process they start.
On Kubernetes, add mTLS in a service mesh on top (docs/kubernetes.md, Trust).

Two ways to add it on the client side: ``internal_channel`` (client interceptors, any call
on the channel; for tools and tests) and ``TokenStub`` (the metadata passed with each call;
the gateway's hot path). grpc.aio wraps every message of an intercepted streaming call in
extra tasks and awaits; ``make bench-gateway``'s ``interceptor`` variant shows what that costs.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Sequence
from typing import Any

import grpc

from voicebot.common.config import SharedSettings

METADATA_KEY = "authorization"
TOKEN_ENV = "VOICEBOT_INTERNAL_TOKEN"
MIN_TOKEN_CHARS = 16
# Probes (kubelet's grpc probe, docker/healthcheck.py) cannot carry a token.
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})
# A restarted upstream is reconnected within about a second, not gRPC's default 1 s doubling
# up to 120 s (a caller's next turn would fail for that long after the service is back).
RECONNECT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


class InternalAuthError(RuntimeError):
    """The internal token is missing or unusable (a configuration error, said at start)."""


def internal_token(settings: SharedSettings | None = None) -> str | None:
    """The configured token; None when internal auth is explicitly off.

    Raises InternalAuthError when auth is on and the token is empty or too short to be a secret.
    """
    settings = settings or SharedSettings()
    if not settings.internal_auth:
        return None
    token = settings.internal_token.get_secret_value().strip()
    if not token:
        raise InternalAuthError(
            f"{TOKEN_ENV} is empty: set it to a random string shared by all services "
            f"(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`), "
            f"or set VOICEBOT_INTERNAL_AUTH=false on a dev machine")
    if len(token) < MIN_TOKEN_CHARS:
        raise InternalAuthError(f"{TOKEN_ENV} is shorter than {MIN_TOKEN_CHARS} characters")
    return token


def bearer(token: str) -> str:
    return f"Bearer {token}"


def is_authorized(metadata: Iterable[tuple[str, Any]] | None, token: str) -> bool:
    """Whether invocation metadata carries ``authorization: Bearer <token>`` (constant-time compare)."""
    expected = bearer(token).encode()
    for key, value in metadata or ():
        if key.lower() == METADATA_KEY:
            given = value.encode() if isinstance(value, str) else bytes(value)
            return hmac.compare_digest(given, expected)
    return False


def internal_metadata(token: str | None = None) -> tuple[tuple[str, str], ...]:
    """Metadata for one call (sync stubs, or a call made without ``internal_channel``)."""
    token = token if token is not None else internal_token()
    return ((METADATA_KEY, bearer(token)),) if token else ()


def _with_token(metadata: Any, header: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    pairs = [(k, v) for k, v in (metadata or ()) if k.lower() != METADATA_KEY]
    return (*pairs, header)


class _AddsToken:
    """Adds the token to a call's metadata, next to what the caller sent (trace context)."""

    def __init__(self, token: str) -> None:
        self._header = (METADATA_KEY, bearer(token))

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, grpc.aio.Metadata(*_with_token(details.metadata, self._header)),
            details.credentials, details.wait_for_ready)


# One class per call kind: grpc.aio files an interceptor under the first kind it matches only.
class _UnaryUnary(_AddsToken, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(self._details(client_call_details), request)


class _UnaryStream(_AddsToken, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(self._details(client_call_details), request)


class _StreamUnary(_AddsToken, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return await continuation(self._details(client_call_details), request_iterator)


class _StreamStream(_AddsToken, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return await continuation(self._details(client_call_details), request_iterator)


def token_interceptors(token: str) -> list[grpc.aio.ClientInterceptor]:
    return [kind(token) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)]


class TokenStub:
    """A generated stub whose every call carries the token, added to the call's own metadata.

    ``TokenStub(stt_pb2_grpc.SpeechToTextStub(channel), token).StreamingRecognize(requests)``
    is the stub's call with ``authorization`` next to whatever metadata the caller passes
    (trace context). No interceptor: the call's messages go straight to grpc.aio.
    """

    def __init__(self, stub: Any, token: str | None) -> None:
        self._stub = stub
        self._header = (METADATA_KEY, bearer(token)) if token else None

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)
        header = self._header
        if header is None:  # internal auth is off (said explicitly): the stub's own call
            return method

        def call(*args: Any, metadata: Any = None, **kwargs: Any) -> Any:
            return method(*args, metadata=_with_token(metadata, header), **kwargs)

        setattr(self, name, call)  # looked up once per method, not once per call
        return call


def plain_channel(addr: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    """An insecure (plaintext) aio channel with ``RECONNECT_OPTIONS``, and no interceptors:
    its calls carry the token only through ``TokenStub`` (or explicit metadata)."""
    merged = dict(RECONNECT_OPTIONS)
    merged.update(dict(options))
    return grpc.aio.insecure_channel(addr, options=list(merged.items()))


def internal_channel(addr: str, *, token: str | None = None,
                     options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    """An insecure (plaintext) aio channel whose every call carries the internal token.

    ``token`` defaults to ``VOICEBOT_INTERNAL_TOKEN`` (InternalAuthError when it is missing
    and auth is on). ``options`` are added to (and override) ``RECONNECT_OPTIONS``.
    """
    token = token if token is not None else internal_token()
    merged = dict(RECONNECT_OPTIONS)
    merged.update(dict(options))
    interceptors = token_interceptors(token) if token else None
    return grpc.aio.insecure_channel(addr, options=list(merged.items()), interceptors=interceptors)
