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
    # Reply audio goes out in frames of this length, paced so that the client holds
    # at most playback_lead_ms of unplayed audio (rides out jitter; an interrupt stops it soon).
    output_frame_ms: int = 20
    playback_lead_ms: int = 300
    # Frames go out in messages of up to this much audio; a full message waits until the client
    # holds this much less than the lead, so the most it holds (what may play on after a pause)
    # is unchanged (voicebot/gateway/playout.py). Equal to output_frame_ms: one message per frame.
    output_message_ms: int = 100
    # The brain's deltas are joined into phrases (at punctuation, or this many characters)
    # before they go to TTS and to the client as reply.delta (voicebot/gateway/phrases.py).
    reply_phrase_chars: int = 160
    # ... except the reply's first words, which go on one by one until the first punctuation
    # mark or this many words, so TTS can start a first piece at a word boundary
    # (TTS_FIRST_CLAUSE_WORDS, TTS_FIRST_CLAUSE_MIN_WORDS). 0: phrases from the start.
    reply_first_words: int = 8
    # Start the brain on the STT's speculative transcript (a short pause) and commit it when the
    # final has the same words; held back, and discarded otherwise (voicebot/gateway/preemptive.py).
    preemptive: bool = True
    # Open the brain's and TTS's calls for an utterance's turn when its speech starts, so at the
    # endpoint only messages move (voicebot/gateway/standby.py).
    standby_calls: bool = True
    # On that brain call, have the brain read the session then (``Prepare``) when none of this
    # call's turns can still be writing it; the turn confirms the read before anything leaves
    # (voicebot/brain/session_store.py ``ReadAhead``). Off for a brain older than ``Prepare``.
    session_read_ahead: bool = True
    # Send each interim transcript to Brain.Prefill while the caller speaks (no reply in the air),
    # so the LLM server has the turn's prompt cached up to the last words (voicebot/gateway/prefill.py).
    # Off by default: on two shared cores (make bench-v2v, 2026-12-01) the prefills competed
    # with STT's interim decodes during speech, and a prefill batch still running at the
    # endpoint (llama.cpp cannot stop it mid-batch) delayed the turn: p50 went up, not down. For
    # an LLM with cores (or a GPU) of its own, where the caller's speech time is idle time.
    prefill_words: bool = False
    # Audio frames already waiting for the STT stream go out merged, up to this many bytes.
    stt_max_message_bytes: int = 64_000
    # Ask STT to send a final it already has at the endpoint inside the EndOfUtterance (one
    # message instead of two: a gRPC stream's second message waits for the first to complete).
    # An STT that does not know the field sends the final apart, which works the same.
    stt_final_with_end: bool = True
    # The same on the way out: ask TTS to start each sentence on its first audio chunk instead of
    # a SentenceStarted message before it. A TTS that does not know the field sends it apart.
    tts_sentence_with_audio: bool = True
    # While no utterance is open and no reply is in flight, up to this much audio goes to STT per
    # message (only quiet audio waits: a louder frame ends the hold, stt_hold_until_rms below);
    # otherwise every frame goes at once. 0 = never hold.
    # Since no onset waits on the hold (only audio quieter than -50 dBFS is held), its length costs
    # no latency. 300, not 100: make bench-gateway (variant batch-100) at 200 sessions: 0.36 ->
    # 0.26 STT messages per frame, turn p50 45 -> 29 ms (2026-12-02). 1000, not 300 (with
    # stt_playback_batch_ms and stt_speech_batch_ms below; variant hold-300, --pin, 200 sessions,
    # two runs, 2026-12-03): 0.15-0.24 -> 0.06 STT messages per frame, gateway 0.87-0.91 ->
    # 0.78-0.81 cores, turn p99 579-2738 -> 94-123 ms (the old holds filled the core); make
    # bench-bargein (16 trials) unchanged: confirmed 538.5 / 538.4 ms, client's interrupt 620.1 /
    # 620.7, spoken turn's endpoint 322 / 322.
    stt_idle_batch_ms: int = 1000
    # The same while the bot's reply plays (its first audio was sent; no utterance open): a
    # barge-in's pause waits on it only when the caller's first speech frame is quieter than
    # stt_hold_until_rms (its confirmation and interrupt never do). make bench-bargein, client's
    # first speech frame -> last reply frame, p50/p95 ms: 0 here 75/80, 100 with the gate 0/83,
    # 100 without it 89/99 (2026-12-01, 8 trials each; the p50 flips between 0 and ~75 with the
    # client's playback lead). 0.77 -> 0.49 STT messages per frame in make bench-gateway. At 300
    # (2026-12-02, 8 trials each): 0/0 against 0/69 at 100, interrupt 601/622 against 601/621.
    # At 1000 (2026-12-03, 16 trials each): 0/82 against 0/82 at 300.
    stt_playback_batch_ms: int = 1000
    # While audio is held (the two settings above), a frame at least this loud (RMS of PCM16;
    # 100 is about -50 dBFS, far below speech, above digital silence and a quiet line) ends the
    # hold at once and takes the held audio with it: only quiet audio is merged, and an onset
    # louder than this waits on nothing. So does a frame 12 dB above the line's quietest in the
    # last second (and above RMS 10): a soft voice on a quiet line. 0: a hold ends only when
    # enough audio is waiting.
    stt_hold_until_rms: int = 100
    # While an utterance is open, loud frames may wait up to this long for one STT message; a
    # quiet frame (below stt_hold_until_rms, or within 6 dB of the line's quietest in the last
    # second) sends what waits at once, so the endpoint's silence, a pause for the speculative
    # decode and a false start's end wait on nothing; partials and a barge-in's confirmation
    # may come up to this much later (a barge-in's confirmation is counted in stream time: make
    # bench-bargein measured the same 538 ms at 0, 60 and 120). 0 (or stt_hold_until_rms 0):
    # every frame at once. 120, not 60, with the idle hold's 1000: see stt_idle_batch_ms.
    stt_speech_batch_ms: int = 120
    # permessage-deflate on the WebSocket: off, PCM does not compress and it costs CPU both ways.
    ws_per_message_deflate: bool = False
    # Audio frames handed to the call where the socket reads them, not through the ASGI queue
    # (voicebot/gateway/ws_direct.py: no task switch and no pause of the socket per frame). false: every
    # message through uvicorn's own protocol, as before (the bench's variant `asgi-frames`).
    ws_direct_frames: bool = True
    # Messages that go out together (a reply's audio.start and its first frame; a protocol's
    # several messages for one event) in one write to the socket, not one each, where the
    # server's protocol is the gateway's own (voicebot/gateway/ws_direct.py). false: one write each (the
    # bench's variant `writes-apart`).
    ws_send_together: bool = True
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
    # The internal token added to upstream calls by grpc.aio client interceptors (as before)
    # instead of with each call's metadata: slower, every streamed message goes through the
    # interceptor's wrapper (the bench's ``interceptor`` variant). For comparison only.
    grpc_client_interceptors: bool = False
    # The event loop: "uvloop" when it is installed, else asyncio's; "asyncio" forces asyncio's.
    loop: str = "auto"
    # Speech while the bot talks pauses its audio at once; this much stream time since the
    # onset, with the utterance still open, confirms a barge-in (so does a partial
    # transcript with words). It includes the endpointer's closing silence
    # (STT_MIN_SILENCE_MS, 320): keep it above that plus the longest noise to ignore.
    barge_in_min_speech_ms: int = 600
    # A transcript confirms a barge-in only with words over at least this much speech:
    # Whisper hears words in short clicks and coughs.
    barge_in_min_words_ms: int = 200

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
