from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from voicebot.common.config import ServiceSettings
from voicebot.stt.turn_model import SMART_TURN_LANGUAGES, SMART_TURN_SHA256


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
    # of Whisper's fixed 30 s window (far less encoder work for short
    # utterances); a final whose decode loops is redone on 10 s, then the full window. 30 (or 0)
    # always uses the full window. 5 s, not 10: the same WER on make bench-stt's set, a final
    # sooner after the end of the utterance, and the speculative decode more often ready before
    # the endpoint.
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
    # new speech, at most one decode in flight per stream. 1200, not 400: on a
    # few CPU cores a decode takes a good part of a second, so at 400 a partial was running
    # at most pauses and the speculative decode (what the reply starts on) queued behind
    # it; partials also took the cores from the LLM (make bench-v2v: fewer partial decodes,
    # a sooner final after the endpoint). Barge-in is confirmed by speech length, not partial
    # words, so it does not depend on this (make bench-bargein). 400 for a GPU.
    partial_interval_ms: int = 1200
    # A pause this long starts a speculative decode of the utterance so far;
    # when the pause becomes the endpoint, that decode is the final.
    speculative_silence_ms: int = 64
    # End of turn: "smart-turn" scores the utterance at each pause of turn_pause_ms with Smart
    # Turn v3 (voicebot/stt/turn_model.py) and ends it at once when the model says finished,
    # else after turn_max_silence_ms; "text" judges the pause's words alone (turn_text.py);
    # "off" (and any language not in turn_languages) keeps the fixed min_silence_ms. The limit
    # must outlast a thinking pause inside a sentence.
    turn_model: str = "smart-turn"
    # Also hold the turn while the decode made at the pause reads as unfinished ("my name is...").
    turn_text: bool = True
    turn_model_path: str = ""  # empty: the ONNX file inside the pipecat-ai package
    turn_model_sha256: str = SMART_TURN_SHA256  # empty: not checked (a model of your own)
    # false: a missing or corrupt model logs a warning and every stream uses the timer.
    turn_model_required: bool = True
    # Both judges of a pause are asked after 160 ms of silence: a comma inside fluent speech
    # pauses about 200 ms, but its decode trails off ("Hello, ...") and holds the turn, and an end
    # there is taken back (the gateway joins speech that resumes before the reply was heard).
    # The model hears 160 ms of silence after the speech, whenever it is asked: its score rises
    # with the silence, on a sentence cut at a thinking pause as on a finished one. It ends the
    # turn at the pause from 0.9, and only when the words read as finished too: on people, piper
    # and espeak-ng alike, sentences cut at a pause where the words could end score as high as
    # finished ones (make bench-turn-scores), so only a confident model is trusted that soon.
    turn_pause_ms: int = 160
    turn_model_tail_ms: int = Field(160, ge=0)
    turn_max_silence_ms: int = 1200
    # The wait depends on the words too: a pause whose decode reads as a finished sentence while
    # the model is unsure ends after this much silence; words that go on keep turn_max_silence_ms.
    # 600: a wrong end here is answered after the caller's thinking pause of up to 700 ms is over
    # (the reply takes 150 ms or more after the endpoint), so the gateway takes it back unheard
    # and the turn goes on (make bench-turn-scores replays each setting). 0: the model alone
    # shortens the wait.
    turn_words_done_silence_ms: int = 600
    turn_threshold: float = Field(0.9, ge=0.0, le=1.0)
    # Per-language thresholds over turn_threshold, JSON: {"de": 0.6}.
    turn_thresholds: dict[str, float] = Field(default_factory=dict)
    turn_languages: str = ",".join(SMART_TURN_LANGUAGES)
    # An utterance with less speech than this keeps min_silence_ms as its limit, so a noise
    # never stays open longer than without the model (the gateway's barge-in counts on it).
    turn_min_speech_ms: int = 400
    turn_workers: int = 1  # threads that run the model (one core each)
    # Pauses waiting for the model at once; a pause that finds them all taken is judged by its
    # words and the limits (voicebot_stt_turn_model_busy_total counts them).
    turn_queue: int = Field(4, ge=1)
    # Streams one replica accepts; more get RESOURCE_EXHAUSTED (scale out instead).
    max_streams: int = 32
    # Bytes of audio accepted in one request message.
    max_chunk_bytes: int = 192_000

    @model_validator(mode="after")
    def _turn_order(self) -> SttSettings:
        if self.turn_model != "off" and not (
                self.turn_pause_ms < self.min_silence_ms <= self.turn_max_silence_ms):
            raise ValueError("STT_TURN_PAUSE_MS < STT_MIN_SILENCE_MS <= STT_TURN_MAX_SILENCE_MS must hold")
        if self.turn_model != "off" and self.turn_model_tail_ms > self.turn_pause_ms:
            raise ValueError("STT_TURN_MODEL_TAIL_MS <= STT_TURN_PAUSE_MS must hold (the model hears "
                             "silence the pause has had)")
        if self.turn_words_done_silence_ms and not (
                self.turn_pause_ms < self.turn_words_done_silence_ms <= self.turn_max_silence_ms):
            raise ValueError("STT_TURN_PAUSE_MS < STT_TURN_WORDS_DONE_SILENCE_MS <= STT_TURN_MAX_SILENCE_MS "
                             "must hold (0: off)")
        return self

    def turn_threshold_for(self, language: str) -> float | None:
        """The model's threshold for ``language``, or None when it has no model (the timer)."""
        if self.turn_model == "off" or language not in {x.strip() for x in self.turn_languages.split(",")}:
            return None
        return self.turn_thresholds.get(language, self.turn_threshold)
