"""Configuration from environment variables, one prefix per service.

Every service subclasses ``ServiceSettings`` with its own ``env_prefix``
(``STT_``, ``BRAIN_``, ``TTS_``, ``GATEWAY_``); docs/configuration.md lists every field (a test
checks it).
"""

from __future__ import annotations

from pydantic import SecretStr
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
    # The event loop (voicebot.common.event_loop): "auto" (uvloop when installed), "uvloop",
    # "asyncio". Read by the services that call event_loop.run (the brain).
    loop: str = "auto"


class SharedSettings(BaseSettings):
    """VOICEBOT_* variables: one value for the whole deployment, read by every service.

    ``internal_token`` is the credential every internal gRPC call carries
    (``authorization: Bearer …``); a service refuses to start without one unless
    ``internal_auth`` is explicitly false (a dev box where nothing else can connect).
    ``redis_password`` is the password of the Redis every service shares (a
    password in a ``*_REDIS_URL`` takes precedence).
    """

    model_config = SettingsConfigDict(env_prefix="VOICEBOT_", extra="ignore")

    internal_token: SecretStr = SecretStr("")
    internal_auth: bool = True
    redis_password: SecretStr = SecretStr("")
    # What people said (transcripts, typed text, replies) and a phone call's custom parameters
    # appear in log lines only with this on, for an operator debugging a call; off, the log
    # formatter redacts those fields (voicebot.common.logs.CONTENT_FIELDS) at every level.
    log_content: bool = False
    # The garbage collector's thresholds once a service has started (voicebot.common.gc_tuning):
    # three integers, or "python" for Python's own (and nothing frozen).
    gc: str = "5000,20,100"
