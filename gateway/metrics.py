from prometheus_client import Counter, Gauge, Histogram

from voicebot.common.metrics import LATENCY_BUCKETS

STAGE_SECONDS = Histogram(
    "voicebot_stage_seconds", "Per-stage latency of a turn, from the end of speech",
    ["stage"], buckets=LATENCY_BUCKETS,
)
TURNS = Counter("voicebot_turns_total", "Turns by outcome", ["outcome"])
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
ACTIVE_SESSIONS = Gauge("voicebot_active_sessions", "Open WebSocket sessions")
CLIENT_ERRORS = Counter("voicebot_gateway_client_errors_total", "Error events sent", ["code"])
