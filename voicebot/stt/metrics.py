from prometheus_client import Counter, Gauge, Histogram

from voicebot.common.metrics import LATENCY_BUCKETS

DECODE_SECONDS = Histogram(
    "voicebot_stt_decode_seconds", "Whisper decode time per request (kind: final, speculative, partial)",
    ["kind"], buckets=LATENCY_BUCKETS,
)
DECODE_WAIT_SECONDS = Histogram(
    "voicebot_stt_decode_wait_seconds", "Time a decode request waited for a worker", ["kind"],
    buckets=LATENCY_BUCKETS,
)
ENDPOINT_TO_FINAL_SECONDS = Histogram(
    "voicebot_stt_endpoint_to_final_seconds",
    "From the endpoint decision to the final transcript being sent",
    buckets=LATENCY_BUCKETS,
)
FINALS_TOTAL = Counter(
    "voicebot_stt_finals_total",
    "Final transcripts by where their text came from: reused (an earlier decode already covered "
    "the utterance), awaited (the covering decode was running), decoded (a fresh decode)",
    ["source"],
)
PARTIALS_TOTAL = Counter("voicebot_stt_partials_total", "Partial transcripts sent")
ACTIVE_STREAMS = Gauge("voicebot_stt_active_streams", "Open StreamingRecognize calls")
QUEUE_DEPTH = Gauge("voicebot_stt_queue_depth", "Decode requests waiting or running")
# The end-of-turn model runs in a few tens of ms on a CPU core: finer buckets than LATENCY_BUCKETS.
TURN_MODEL_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
TURN_MODEL_SECONDS = Histogram(
    "voicebot_stt_turn_model_seconds",
    "End-of-turn model time per pause scored (features and inference, on its own thread)",
    buckets=TURN_MODEL_BUCKETS,
)
TURN_MODEL_WAIT_SECONDS = Histogram(
    "voicebot_stt_turn_model_wait_seconds",
    "Time a pause waited for the end-of-turn model's thread (other streams' pauses ahead of it)",
    buckets=TURN_MODEL_BUCKETS,
)
TURN_MODEL_BUSY_TOTAL = Counter(
    "voicebot_stt_turn_model_busy_total",
    "Pauses judged without the end-of-turn model because its queue (STT_TURN_QUEUE) was full: the "
    "pause's words and the limits decide; steadily above zero, the replica needs STT_TURN_WORKERS or "
    "another replica",
)
ENDPOINTS_TOTAL = Counter(
    "voicebot_stt_endpoints_total",
    "Utterance ends by reason: model (the end-of-turn model said finished at a pause), limit (it said "
    "not finished and the silence reached STT_TURN_MAX_SILENCE_MS), timer (the fixed silence, "
    "STT_MIN_SILENCE_MS: no model for the stream's language, or a short utterance), max_length, "
    "end_of_stream",
    ["reason"],
)
