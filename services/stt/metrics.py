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
