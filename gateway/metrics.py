from prometheus_client import Counter, Gauge, Histogram

from voicebot.common.metrics import LATENCY_BUCKETS

STAGE_SECONDS = Histogram(
    "voicebot_stage_seconds", "Per-stage latency of a turn, from the end of speech",
    ["stage"], buckets=LATENCY_BUCKETS,
)
TURNS = Counter("voicebot_turns_total", "Turns by outcome", ["outcome"])
BARGE_INS = Counter("voicebot_barge_ins_total", "Bot replies interrupted by the person")
ACTIVE_SESSIONS = Gauge("voicebot_active_sessions", "Open WebSocket sessions")
CLIENT_ERRORS = Counter("voicebot_gateway_client_errors_total", "Error events sent", ["code"])
