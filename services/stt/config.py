from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from voicebot.common.config import ServiceSettings


class SttSettings(ServiceSettings):
    """STT_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="STT_", extra="ignore")

    port: int = 50051
    metrics_port: int = 9101
    # "base" (multilingual, packaged), "tiny.en" (English, packaged) or a CTranslate2 model folder.
    model: str = "base"
    device: str = "cpu"
    compute_type: str = "int8"
    # CTranslate2 threads per decode and concurrent decodes; together they
    # should not exceed the cores the pod has.
    cpu_threads: int = 2
    workers: int = 1
    # Where joined model files are cached (the base model ships in two parts).
    model_cache_dir: str = "~/.cache/voicebot/models"
    default_language: str = "en"
    beam_size: int = 1
    # What callers of this line talk about, in a sentence or a list of words (the profile's
    # ``stt_context``; make run passes it): the decoder reads it before each utterance, so
    # the business's words win over sound-alikes ("vegetarian" over "mediterian"). Noise is
    # still judged without it, and a transcript that only repeats it is dropped. Written in
    # STT_DEFAULT_LANGUAGE: streams in other languages decode without it.
    context: str = Field("", max_length=600)
    # Encode twice the utterance's length, at least this many seconds, instead
    # of Whisper's fixed 30 s window (3-4x less encoder work for short
    # utterances); a final whose decode loops is redone on 10 s, then the full window. 30 (or 0)
    # always uses the full window. 5 s, not 10: the same WER on the bench set
    # (4.0 %), end of utterance -> final 107 vs 228 ms p50 on two cores, and the
    # speculative decode ready before the endpoint in 3 of 11 utterances instead
    # of 0 (make bench-stt --levels 1, both in one session, 2026-12-01).
    min_audio_context_s: float = 5.0
    # Endpointing (Silero VAD on 32 ms frames).
    vad_model_path: str = ""
    vad_threshold: float = 0.5
    vad_neg_threshold: float = 0.35
    min_speech_ms: int = 64
    min_silence_ms: int = 320
    pre_roll_ms: int = 200
    max_utterance_s: float = 15.0
    # Partials (interim_results): re-decode the open utterance after this much
    # new speech, at most one decode in flight per stream. 1200, not 400: on two
    # CPU cores a decode takes ~0.3 s, so at 400 a partial was running at most
    # pauses and the speculative decode (what the reply starts on) queued behind
    # it; partials also took the cores from the LLM. make bench-v2v, 2026-12-01,
    # 400 vs 1200: partial decodes 134 -> 29 a run; endpoint -> final p50 194 ->
    # 74 ms (guard off) and 155 -> 126 (guard on).
    # Barge-in is confirmed by speech length, not partial words (make
    # bench-bargein: 538 ms, 0 of 5 false starts, at both). 400 for a GPU.
    partial_interval_ms: int = 1200
    # A pause this long starts a speculative decode of the utterance so far;
    # when the pause becomes the endpoint, that decode is the final.
    speculative_silence_ms: int = 64
    # Streams one replica accepts; more get RESOURCE_EXHAUSTED (scale out instead).
    max_streams: int = 32
    # Bytes of audio accepted in one request message.
    max_chunk_bytes: int = 192_000
