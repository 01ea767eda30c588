from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from voicebot.common.config import ServiceSettings


class TtsSettings(ServiceSettings):
    """TTS_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="TTS_", extra="ignore")

    port: int = 50053
    metrics_port: int = 9103
    # Piper voice .onnx; empty means the packaged en_US-joe-medium.
    voice_path: str = ""
    voice_config_path: str = ""
    # Voices of their own per language, "LANGUAGE=KIND:VOICE,..." (voicebot/tts/voices.py):
    # "ko=espeak:ko", "ko=piper:/voices/ko.onnx", "ko=default". Empty: Korean is spoken by
    # espeak-ng's Korean when espeak-ng is installed; any language without a voice gets the one above.
    voices: str = ""
    # Concurrent phrase renders across all calls (the worker pool's size).
    workers: int = 2
    # ONNX threads per render; 0 means cores // workers, so the pool uses each core once.
    threads: int = 0
    # A phrase's audio exists whole once rendered, and the gateway paces it to the caller itself
    # (voicebot/gateway/playout.py): smaller chunks only add gRPC messages, and each message costs
    # CPU on both sides.
    chunk_ms: int = 1000
    # A clause longer than this is cut at a comma so speech starts sooner.
    max_clause_chars: int = 120
    # A sentence is rendered in pieces at its commas when both sides have at least
    # this many phonemes (~1 s of speech), so its first audio comes sooner; 0 renders whole sentences.
    # espeak-ng voices count half as many characters.
    min_phrase_phonemes: int = 24
    # The reply's first piece starts at its first comma once it holds this many characters, or
    # after this many words when no comma comes, without waiting for the full stop (0: off).
    # 3, so "Yes," and "Sorry," are spoken while the rest of the sentence is still being made: many
    # replies open that way, and their first audio comes sooner; the join falls on the comma's own
    # pause.
    first_clause_chars: int = 3
    first_clause_words: int = 8
    # With no comma: the first piece may end before a word that opens a phrase ("from", "at",
    # "because", ...) once this many words precede it, rather than at first_clause_words (0: off).
    # Without it, replies like "I'm located five blocks away from the train station." wait for
    # their eighth word or their full stop before any audio.
    first_clause_min_words: int = 5
    max_text_chars: int = 4000
