from __future__ import annotations

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewaySettings(BaseSettings):
    """GATEWAY_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "INFO"
    log_json: bool = True
    # Comma-separated TOKEN=USER_ID pairs. The user id comes only from here. A secret type: its
    # repr (and so any log of the settings) shows stars.
    tokens: SecretStr = SecretStr("")
    stt_addr: str = "127.0.0.1:50051"
    brain_addr: str = "127.0.0.1:50052"
    tts_addr: str = "127.0.0.1:50053"
    # May carry the Redis password (redis://:PASSWORD@host:6379/0).
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    session_ttl_s: int = 24 * 3600
    # Largest binary audio frame (bytes) and text message (characters) accepted.
    max_audio_frame_bytes: int = 32_000
    max_text_chars: int = 2000
    max_message_bytes: int = 64_000
    # Audio frames waiting for STT before the client is told to slow down.
    max_pending_audio_frames: int = 500
    # Rate of the audio the gateway sends (PCM16 mono).
    output_sample_rate: int = 16000
    # How long a turn may wait on the brain before giving up.
    turn_timeout_s: float = 60.0
    # The most unplayed reply audio the client holds: reply audio is paced so that the client
    # is never more than this ahead (rides out network jitter; an interrupt's tail is at most this).
    playback_lead_ms: int = 300
    # The reply's first words go to TTS one by one until the first punctuation mark or this many
    # words, so TTS can start a first piece at a word boundary (match TTS_FIRST_CLAUSE_WORDS,
    # TTS_FIRST_CLAUSE_MIN_WORDS); later text goes in phrases. 0: phrases from the start.
    reply_first_words: int = 8
    # Start the brain on the STT's speculative transcript (a short pause) and commit it when the
    # final has the same words; discarded otherwise (voicebot/gateway/preemptive.py). Off saves the
    # LLM work of the discarded starts at the price of the time between the pause and the endpoint.
    preemptive: bool = True
    # Send each interim transcript to Brain.Prefill while the caller speaks (no reply in the air),
    # so the LLM server has the turn's prompt cached up to the last words (voicebot/gateway/prefill.py).
    # For an LLM with cores (or a GPU) of its own, where the caller's speech is idle time. Off by
    # default: where the LLM shares cores with STT, prefills compete with STT's interim decodes,
    # and a prefill batch still running at the endpoint (llama.cpp cannot stop it) delays the turn.
    prefill_words: bool = False
    # Concurrent sessions this process takes; more are refused (error `overloaded`, close 1013). 0 = no cap.
    max_sessions: int = 200
    # New sessions are refused too while the event loop wakes this late (the process gets less CPU
    # than its calls need; make bench-gateway measures where that starts). 0 = not checked.
    max_loop_lag_ms: float = 0.0
    # New sessions are refused while this process uses more CPU than this (cores, all its threads,
    # over the last 2 s), or would at its current cost per session. 0 = not checked.
    max_cpu_cores: float = 0.0
    # WebSocket Origin allow-list, comma-separated: "self" (same host as the request), "localhost"
    # (http(s)://localhost, 127.0.0.1, [::1], any port), "*" (any), or exact origins
    # (https://app.example.com). A connection without an Origin header (CLI, servers) is allowed.
    allowed_origins: str = "self,localhost"
    # Who the browser page at / says the bot is and what it does (a profile's `name` and
    # `purpose`; make run sets both from the brain's profile). Shown to anyone who opens the page,
    # so nothing secret. Empty: the page says "voicebot".
    agent_name: str = ""
    agent_purpose: str = ""
    # Speech while the bot talks pauses its audio at once; this much stream time since the
    # onset, with the utterance still open, confirms a barge-in (so does a partial
    # transcript with words). It includes the endpointer's closing silence
    # (STT_MIN_SILENCE_MS, 320): keep it above that plus the longest noise to ignore.
    barge_in_min_speech_ms: int = 600
    # A transcript confirms a barge-in only with words over at least this much speech:
    # Whisper hears words in short clicks and coughs.
    barge_in_min_words_ms: int = 200
    # Speech that resumes before the caller heard any of the reply cancels it and joins the same
    # turn, at most once per this many seconds; within it the reply goes out (a caller beside a
    # television would otherwise never hear one).
    resume_min_interval_s: float = 10.0

    # /v1/twilio: the per-deployment secret a Twilio stream must carry (?secret= in its URL or the
    # `secret` custom parameter; Twilio cannot send headers). Empty: the endpoint refuses every call.
    twilio_secret: SecretStr = SecretStr("")
    # The user id phone calls run as (history and sessions are per user; caller ID can be spoofed).
    twilio_user_id: str = "phone"
    # A Twilio stream without the secret in its URL must send `start` (with the secret as its
    # custom parameter) within this long, or it is closed with 4401. Until then it holds no
    # session slot; at most max_unauthenticated such sockets wait at once (more: HTTP 503).
    twilio_start_timeout_s: float = 5.0
    max_unauthenticated: int = 64
    # Concurrent phone calls (the Twilio user's sessions); 0 = only the gateway's cap.
    twilio_max_calls: int = 0

    # ---- admission and limits (voicebot/gateway/admission.py) ----
    # Sessions one user (one token's user id) may hold at once on this process; 0 = no cap.
    max_sessions_per_user: int = 10
    # Typed turns (input.text, the Realtime API's response.create) a session may start: a bucket
    # of turn_burst, refilled at turn_rate_per_s. Over it: error rate_limited, the turn dropped.
    # Speech turns are paced by the speech itself (and STT's decoding) and are not counted.
    turn_rate_per_s: float = 1.0
    turn_burst: int = 5
    # A session from which nothing arrived (no message, no audio frame) for this long while no
    # reply plays is closed (error idle_timeout, close 4408). 0 = never.
    idle_timeout_s: float = 120.0
    # The languages the business speaks (its profile's `languages`, comma-separated; make run
    # passes them): a session asking for another gets an error and goes on in the first.
    languages: str = "en"

    @property
    def language_codes(self) -> list[str]:
        return [code.strip().lower() for code in self.languages.split(",") if code.strip()] or ["en"]
    # Warnings about bad client input (Twilio's, which has no error message) logged per second
    # across the process; the rest are counted (voicebot_gateway_log_lines_dropped_total) only.
    bad_message_logs_per_s: float = 5.0
    # How often the gateway reads Redis's memory use for its metrics (alert VoicebotRedisMemoryHigh);
    # 0 = never.
    redis_memory_poll_s: float = 15.0

    def token_map(self) -> dict[str, str]:
        pairs = {}
        for item in self.tokens.get_secret_value().split(","):
            token, _, user = item.strip().partition("=")
            if token and user:
                pairs[token] = user
        return pairs
