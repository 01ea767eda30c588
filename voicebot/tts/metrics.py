from prometheus_client import Counter, Gauge, Histogram

from voicebot.common.metrics import LATENCY_BUCKETS

SYNTH_SECONDS = Histogram(
    "voicebot_tts_synthesis_seconds", "Render time per phrase (any voice)", buckets=LATENCY_BUCKETS
)
PHRASES = Counter("voicebot_tts_phrases_total", "Phrases rendered (a sentence is one or more phrases)")
RENDERS_STOPPED = Counter("voicebot_tts_renders_stopped_total",
                          "Phrase renders given up (skipped or stopped mid-render) because their call ended")
FIRST_AUDIO_SECONDS = Histogram(
    "voicebot_tts_first_audio_seconds",
    "From a sentence being complete to its first audio chunk",
    buckets=LATENCY_BUCKETS,
)
ACTIVE_STREAMS = Gauge("voicebot_tts_active_streams", "Open StreamingSynthesize calls")
SENTENCE_ERRORS = Counter("voicebot_tts_sentence_errors_total", "Sentences that failed")
