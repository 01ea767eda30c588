"""Prometheus names shared by several services (docs/design.md, Contracts; docs/operations.md)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Resolves 10 ms to 10 s: a voice turn's stages live in this range.
LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
)
STAGES = ("endpoint", "stt", "llm_ttft", "tts_ttfa", "voice_to_voice")

# Defined once here because the brain and the gateway both count it (alert VoicebotRedisErrors).
REDIS_ERRORS = Counter("voicebot_redis_errors_total", "Failed Redis operations", ["service"])

# Every service, once settled (voicebot.common.gc_tuning): each run of Python's cycle collector
# stops every call on the process.
GC_PAUSES = Histogram(
    "voicebot_gc_pause_seconds", "How long each run of the cycle collector stopped this process",
    ["generation"], buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0))
