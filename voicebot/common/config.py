"""Configuration from environment variables, one prefix per service.

Every service subclasses ``ServiceSettings`` with its own ``env_prefix``
(``STT_``, ``BRAIN_``, ``TTS_``, ``GATEWAY_``); the README lists every field.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    """Fields every gRPC service shares."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 0
    # Prometheus /metrics HTTP port; 0 picks a free one (logged at start).
    metrics_port: int = 0
    log_level: str = "INFO"
    log_json: bool = True
    # On SIGTERM, in-flight streams get this long to finish before they are cut.
    drain_seconds: float = 10.0
