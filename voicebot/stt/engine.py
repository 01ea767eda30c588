"""STT engines: the interface and the real faster-whisper engine."""

from __future__ import annotations

import functools
import logging
import math
import re
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

WINDOW_FRAMES = 3000  # Whisper's 30 s window, in 10 ms mel frames
MIDDLE_WINDOW_FRAMES = 1000  # the first retry after a short window looped (wider_windows)
FRAMES_PER_SECOND = 100


@dataclass(frozen=True)
class EngineCapabilities:
    multilingual: bool
    # Languages it accepts; None means "whatever the model knows".
    languages: frozenset[str] | None = None


class DraftDiscarded(Exception):
    """A draft decode looked degenerate and was dropped instead of being redone."""


class SttEngine(ABC):
    """Transcribe one utterance of 16 kHz float32 audio.

    ``transcribe`` blocks (it is model work); callers run it in a worker pool.
    ``draft``: a periodic partial, replaced by the next one within a fraction of a second.
    An engine may then skip costly second passes and raise ``DraftDiscarded``.
    """

    capabilities: EngineCapabilities

    @abstractmethod
    def transcribe(self, audio: np.ndarray, language: str, draft: bool = False) -> str: ...

    def supports_language(self, language: str) -> bool:
        caps = self.capabilities
        if not caps.multilingual:
            return language == "en"
        return caps.languages is None or language in caps.languages


def encoder_frames(audio_frames: int, min_context_s: float) -> int:
    """Mel frames to encode for an utterance of ``audio_frames``.

    Whisper pads every input to 30 s and the encoder's cost follows that
    length, so a 2 s utterance costs as much as a 30 s one. An utterance (at
    most STT_MAX_UTTERANCE_S) needs far less: encode twice its length and at
    least ``min_context_s``. With much less padding the model loses the
    "audio ended here" cue and repeats itself; 0 or >= 30 means the standard
    30 s window.
    """
    if min_context_s <= 0 or min_context_s >= WINDOW_FRAMES / FRAMES_PER_SECOND:
        return WINDOW_FRAMES
    return min(WINDOW_FRAMES, max(int(min_context_s * FRAMES_PER_SECOND), 2 * audio_frames + 100))


def wider_windows(window: int) -> list[int]:
    """The windows to try, in order, after a decode over ``window`` frames looped: first
    MIDDLE_WINDOW_FRAMES, then Whisper's full window. With the packaged base model, an
    utterance whose 5 s window looped ("Do you have vegan desserts?") came out right on 8 and
    10 s windows in a fraction of the full window's time; so the full window is the last
    resort, not the first retry."""
    return [w for w in (MIDDLE_WINDOW_FRAMES, WINDOW_FRAMES) if w > window]


def looks_degenerate(text: str, token_count: int, token_cap: int) -> bool:
    """Signs of a decoding loop: the token cap was hit, the text compresses too
    well, or it is one phrase said over ("Can I come? Can I come?")."""
    if token_count >= token_cap:
        return True
    data = text.encode()
    if len(data) > 40 and len(data) / len(zlib.compress(data)) > 2.4:
        return True
    words = [w.strip(".,!?;:").lower() for w in text.split()]
    return any(
        len(words) % period == 0 and words == words[:period] * (len(words) // period)
        for period in range(1, len(words) // 2 + 1)
    )


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def copies_context(text: str, context: str) -> bool:
    """Whether a transcript is the decoding context read back: all its words, in order, a run
    of the context's, and at least three of them (so "Yes." or "The menu." stay words)."""
    said, given = _words(text), _words(context)
    if len(said) < 3:
        return False
    return any(given[start:start + len(said)] == said for start in range(len(given) - len(said) + 1))


class FasterWhisperEngine(SttEngine):
    def __init__(
        self,
        model_dir: Path,
        multilingual: bool,
        device: str = "cpu",
        compute_type: str = "int8",
        cpu_threads: int = 2,
        workers: int = 1,
        beam_size: int = 1,
        min_context_s: float = 5.0,
        context: str = "",
        context_language: str = "en",
    ) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import _LANGUAGE_CODES

        self._model = WhisperModel(
            str(model_dir),
            device=device,
            compute_type=compute_type,
            cpu_threads=cpu_threads,
            num_workers=workers,
            local_files_only=True,
        )
        self._beam_size = beam_size
        self._min_context_s = min_context_s
        self._context = " ".join(context.split())
        # Only streams in the context's own language read it: an English context before Korean
        # speech (espeak, "메뉴에 채식 요리가 있나요?") left no words at all.
        self._context_language = context_language.lower().split("-")[0]
        self.capabilities = EngineCapabilities(
            multilingual=multilingual,
            languages=frozenset(_LANGUAGE_CODES) if multilingual else frozenset({"en"}),
        )

    def transcribe(self, audio: np.ndarray, language: str, draft: bool = False) -> str:
        # No chunk_length: called that way the feature extractor keeps no state,
        # so concurrent workers can share it.
        features = self._model.feature_extractor(audio)
        frames = features.shape[-1]
        if frames > WINDOW_FRAMES:
            return self._transcribe_long(audio, language)
        window = encoder_frames(frames, self._min_context_s)
        text, degenerate = self._decode(features, window, language, frames)
        if degenerate and window < WINDOW_FRAMES and draft:
            # The wider passes are slow on CPU cores, and the one decode worker is
            # what the speculative decode and the final wait for. Short drafts ("Do you")
            # loop most often; the next partial comes one STT_PARTIAL_INTERVAL_MS later anyway.
            raise DraftDiscarded
        for wider in wider_windows(window):
            if not degenerate:
                break
            log.info("short-window decode looked degenerate; decoding a wider window",
                     extra={"audio_s": round(frames / FRAMES_PER_SECOND, 2),
                            "window_s": wider / FRAMES_PER_SECOND})
            text, degenerate = self._decode(features, wider, language, frames)
        return text

    def _decode(self, features: np.ndarray, window: int, language: str, frames: int) -> tuple[str, bool]:
        """One greedy pass, like faster-whisper's first (temperature 0) try, over ``window`` frames.

        No temperature fallback: on CPU each retry costs a full decode, and
        sampling would make the same audio give different text.
        """
        from faster_whisper.audio import pad_or_trim

        tokenizer, prompt, plain, suppress = self._prompt(language)
        with_context = prompt is not plain  # the context is read only in its own language
        # Generous for any language (Korean needs several tokens a syllable), small enough to stop a loop.
        token_cap = min(self._model.max_length - len(prompt), 16 + math.ceil(30 * frames / FRAMES_PER_SECOND))
        encoded = self._model.encode(pad_or_trim(features, window))
        result = self._model.model.generate(
            encoded, [prompt], beam_size=self._beam_size, max_length=len(prompt) + token_cap,
            suppress_blank=True, suppress_tokens=suppress,
            return_scores=True, return_no_speech_prob=True,
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        text = tokenizer.decode(tokens).strip()
        if not any(ch.isalnum() for ch in text):
            text = ""  # "." or "..." is what Whisper says about noise
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if avg_logprob <= -1.0 and (self._no_speech(encoded, plain) if with_context
                                    else result.no_speech_prob) > 0.6:
            return "", False  # Whisper's own rule for "this was not speech"
        if with_context and copies_context(text, self._context):
            return "", False  # the context read back over noise, not words the caller said
        return text, looks_degenerate(text, len(tokens), token_cap)

    def _no_speech(self, encoded: Any, plain: list[int]) -> float:
        """P(no speech) as the model judges it without the context: with a context before it,
        noise reads as likely speech (a fan's hum 0.78 -> 0.42 with a restaurant context) and
        comes out as the context's kind of sentence ("The restaurant is open."). One decoder
        step on the encoded audio the decode already has."""
        return self._model.model.generate(encoded, [plain], max_length=len(plain) + 1,
                                          return_no_speech_prob=True)[0].no_speech_prob

    @functools.cache  # noqa: B019 (one engine per process; a few languages)
    def _prompt(self, language: str) -> tuple[Any, list[int], list[int], tuple[int, ...]]:
        """Tokenizer, decoder prompt (with the context, when there is one), the prompt without
        it, and suppressed tokens for a language (building them costs ms)."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        tokenizer = Tokenizer(self._model.hf_tokenizer, self._model.model.is_multilingual,
                              task="transcribe", language=language)
        plain = self._model.get_prompt(tokenizer, [], without_timestamps=True)
        prompt = (self._model.get_prompt(tokenizer, [], without_timestamps=True, hotwords=self._context)
                  if self._context and language == self._context_language else plain)
        return tokenizer, prompt, plain, get_suppressed_tokens(tokenizer, [-1])

    def _transcribe_long(self, audio: np.ndarray, language: str) -> str:
        # Only when STT_MAX_UTTERANCE_S is set above 30 s: faster-whisper's own windowing.
        segments, _info = self._model.transcribe(
            audio, language=language, beam_size=self._beam_size, temperature=0.0,
            vad_filter=False, condition_on_previous_text=False, without_timestamps=True,
        )
        return " ".join(segment.text.strip() for segment in segments).strip()
