from prometheus_client import Counter, Gauge, Histogram

from voicebot.common.metrics import LATENCY_BUCKETS

STAGE_SECONDS = Histogram(
    "voicebot_stage_seconds", "Per-stage latency of a turn, from the end of speech",
    ["stage"], buckets=LATENCY_BUCKETS,
)
TURNS = Counter("voicebot_turns_total", "Turns by outcome", ["outcome"])
PREEMPTIVE = Counter("voicebot_gateway_preemptive_replies_total",
                     "Replies started on the speculative transcript, by outcome (started, committed, "
                     "discarded)", ["outcome"])
PREFILLS = Counter("voicebot_gateway_prefills_total",
                   "The caller's words so far sent to Brain.Prefill, by outcome (started, refused, failed)",
                   ["outcome"])
BARGE_INS = Counter("voicebot_barge_ins_total", "Bot replies interrupted by the person")
BARGE_IN_FALSE_STARTS = Counter(
    "voicebot_barge_in_false_starts_total",
    "Speech during a reply that was not confirmed (noise, a short sound): the reply went on",
)
BARGE_IN_SECONDS = Histogram(
    "voicebot_barge_in_seconds",
    "From SpeechStarted reaching the gateway to: the last reply frame sent (last_audio), "
    "the barge-in confirmed (confirmed), interrupt sent (interrupt)",
    ["step"], buckets=(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 2.0),
)
# One turn until the caller has heard the reply (voicebot/gateway/turn_driver.py).
RESUMED_TURNS = Counter("voicebot_gateway_resumed_turns_total",
                        "Turns answered with the words of a turn whose reply was cancelled unheard")
REPLIES_CANCELLED_UNHEARD = Counter(
    "voicebot_gateway_replies_cancelled_unheard_total",
    "Replies cancelled because the caller went on speaking before hearing any of them")
REPLIES_KEPT_UNHEARD = Counter(
    "voicebot_gateway_replies_kept_unheard_total",
    "Replies that went out although the caller went on speaking before hearing them: another "
    "was cancelled so within GATEWAY_RESUME_MIN_INTERVAL_S")
ACTIVE_SESSIONS = Gauge("voicebot_active_sessions", "Open WebSocket sessions")
CLIENT_ERRORS = Counter("voicebot_gateway_client_errors_total", "Error events sent", ["code"])
STT_STREAMS = Gauge("voicebot_gateway_stt_streams", "STT streams the gateway holds open")
STT_FAILURES = Counter("voicebot_gateway_stt_failures_total",
                       "STT streams that failed or were refused, by gRPC status (RESOURCE_EXHAUSTED: "
                       "the STT's stream cap)", ["code"])
SESSION_REFUSALS = Counter("voicebot_gateway_refused_sessions_total",
                           "WebSocket sessions refused because the gateway is at GATEWAY_MAX_SESSIONS")
FALLBACKS = Counter("voicebot_gateway_fallbacks_total",
                    "Fallback sentences played to the caller, by what failed and where the audio came "
                    "from (tts: cached speech, tone: TTS was never reachable)", ["failed", "source"])
STT_MESSAGES = Counter("voicebot_gateway_stt_audio_messages_total",
                       "Audio messages written to STT streams (frames are merged while idle or backed up)")
STT_FRAMES = Counter("voicebot_gateway_audio_frames_total", "Audio frames received from clients")
LOOP_LAG = Histogram("voicebot_gateway_loop_lag_seconds",
                     "How late the gateway's event loop woke a 50 ms timer (every callback's queueing delay)",
                     buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0))
# Admission and limits (voicebot/gateway/admission.py): what each limit refused.
ADMISSION_REFUSALS = Counter(
    "voicebot_gateway_admission_refusals_total",
    "Sockets refused before they held a session, by reason (unauthorized: bad or missing token or "
    "secret; auth_timeout: a Twilio stream sent no start within GATEWAY_TWILIO_START_TIMEOUT_S; "
    "unauthenticated_full: GATEWAY_MAX_UNAUTHENTICATED sockets were already waiting; user_sessions: "
    "the user holds GATEWAY_MAX_SESSIONS_PER_USER; twilio_calls: GATEWAY_TWILIO_MAX_CALLS)", ["reason"])
UNAUTHENTICATED = Gauge("voicebot_gateway_unauthenticated_sockets",
                        "Twilio sockets waiting for their start message (they hold no session slot)")
TURNS_RATE_LIMITED = Counter("voicebot_gateway_turns_rate_limited_total",
                             "Typed turns refused with rate_limited (GATEWAY_TURN_RATE_PER_S, _TURN_BURST)")
IDLE_CLOSED = Counter("voicebot_gateway_idle_sessions_closed_total",
                      "Sessions closed after GATEWAY_IDLE_TIMEOUT_S with nothing from the client")
LOG_LINES_DROPPED = Counter("voicebot_gateway_log_lines_dropped_total",
                            "Warnings about bad client input not logged (GATEWAY_BAD_MESSAGE_LOGS_PER_S); "
                            "each is still counted in voicebot_gateway_client_errors_total")
# Redis's own memory figures, read by the gateway (alerts VoicebotRedisMemoryHigh/Full): at
# maxmemory Redis refuses writes (noeviction) instead of evicting live sessions.
REDIS_USED_MEMORY = Gauge("voicebot_redis_used_memory_bytes", "Redis used_memory, as last read")
REDIS_MAXMEMORY = Gauge("voicebot_redis_maxmemory_bytes", "Redis maxmemory (0: no limit)")
REDIS_REJECTED_WRITES = Gauge("voicebot_redis_oom_rejections",
                              "Commands Redis refused at maxmemory since it started (errorstat_OOM)")
