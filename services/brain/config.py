from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from voicebot.common.config import ServiceSettings


class BrainSettings(ServiceSettings):
    """BRAIN_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="BRAIN_", extra="ignore")

    port: int = 50052
    metrics_port: int = 9102
    # Any OpenAI-compatible server: vLLM, llama.cpp (llama-cpp-python), Ollama.
    llm_base_url: str = "http://127.0.0.1:8000/v1"
    llm_model: str = "voicebot-llm"
    llm_api_key: str = "not-needed"
    llm_max_tokens: int = 120
    llm_temperature: float = 0.3
    # Retries of connection errors and 5xx stay inside this deadline, then the
    # person hears the fallback sentence.
    llm_deadline_s: float = 8.0
    llm_first_token_timeout_s: float = 20.0
    fallback_text: str = "Sorry, I'm having trouble thinking right now. Could you say that again?"
    blocked_text: str = "Sorry, I can only help with table reservations here."
    # Code-enforced caps per turn; when one hits, one last call without tools answers.
    max_llm_calls: int = 4
    max_turn_tokens: int = 600
    max_turn_seconds: float = 20.0
    # The topic guard: a short parallel classification call. Its own server URL
    # lets it use a second model instance so the main prompt's cache stays warm.
    guard_enabled: bool = True
    guard_llm_base_url: str = ""
    guard_timeout_s: float = 4.0
    # The reservation demo's backend, an MCP server (streamable HTTP), e.g.
    # http://127.0.0.1:8090/mcp. Empty: the bot runs without tools.
    reservations_url: str = ""
    # When day, time, party size and name are all known, code proposes the booking (the
    # model still writes every other reply). Small local models often skip the tool call.
    slot_filling: bool = True
    # At start, prefill the fixed prompt start (and the guard's) before serving.
    warm_up_timeout_s: float = 90.0
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Turns kept in full in the prompt; older ones are dropped from the prompt
    # but stay in Redis until the session expires.
    history_turns: int = 24
    # Turns kept in full (with tool calls); older ones shrink to question and answer.
    recent_turns: int = 4
    session_ttl_s: int = 24 * 3600
    # What this bot is for (used by the prompt and, later, the topic guard).
    domain: str = "taking table reservations for a restaurant"
    bot_name: str = "Joe"
