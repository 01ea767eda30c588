from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from voicebot.common.config import ServiceSettings


class TtsSettings(ServiceSettings):
    """TTS_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="TTS_", extra="ignore")

    port: int = 50053
    metrics_port: int = 9103
    # Piper voice .onnx; empty means the packaged en_US-joe-medium.
    voice_path: str = ""
    voice_config_path: str = ""
    # Concurrent sentence syntheses across all calls.
    workers: int = 2
    chunk_ms: int = 100
    # A clause longer than this is cut at a comma so speech starts sooner.
    max_clause_chars: int = 120
    max_text_chars: int = 4000
