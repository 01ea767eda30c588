from prometheus_client import Gauge, Histogram

from voicebot.common.metrics import LATENCY_BUCKETS

DECODE_SECONDS = Histogram(
    "voicebot_stt_decode_seconds", "Whisper decode time per request", ["kind"],
    buckets=LATENCY_BUCKETS,
)
ENDPOINT_TO_FINAL_SECONDS = Histogram(
    "voicebot_stt_endpoint_to_final_seconds",
    "From the endpoint decision to the final transcript being sent",
    buckets=LATENCY_BUCKETS,
)
ACTIVE_STREAMS = Gauge("voicebot_stt_active_streams", "Open StreamingRecognize calls")
QUEUE_DEPTH = Gauge("voicebot_stt_queue_depth", "Decode requests waiting or running")
