"""OpenTelemetry tracing shared by every service.

Export (OTLP over gRPC) is on only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set;
otherwise the API's no-op tracer is used and a span costs almost nothing.
The W3C trace context travels in gRPC metadata (``traceparent``), so one turn
is one trace from the gateway through STT, brain and TTS.

Spans carry session and turn ids, never what people said, unless an operator
sets ``VOICEBOT_TRACE_CONTENT=true``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_provider = None


def setup_tracing(service: str) -> None:
    """Install an exporting tracer provider when an OTLP endpoint is configured."""
    global _provider
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or _provider is not None:
        return
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or f"voicebot-{service}"
    _provider = TracerProvider(resource=Resource.create({"service.name": name}))
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(_provider)


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.shutdown()  # flushes what is still queued


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def record_content() -> bool:
    return os.environ.get("VOICEBOT_TRACE_CONTENT", "").lower() in ("1", "true", "yes")


def ids(session_id: str, turn_id: str = "") -> dict[str, Any]:
    attributes = {"voicebot.session_id": session_id}
    if turn_id:
        attributes["voicebot.turn_id"] = turn_id
    return attributes


def outgoing_metadata(ctx: otel_context.Context | None = None) -> tuple[tuple[str, str], ...]:
    """gRPC metadata carrying the current (or given) trace context."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    return tuple(carrier.items())


def incoming_context(metadata: Iterable[tuple[str, Any]] | None) -> otel_context.Context:
    """The caller's trace context from gRPC invocation metadata."""
    carrier = {key: value for key, value in (metadata or ()) if isinstance(value, str)}
    return _PROPAGATOR.extract(carrier)


def trace_id_hex(span: trace.Span | None = None) -> str | None:
    """The trace id of a recording span, for metric exemplars."""
    span = span or trace.get_current_span()
    context = span.get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
