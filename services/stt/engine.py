"""STT engines: the interface, the real faster-whisper engine, and a fallback adapter."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineCapabilities:
    multilingual: bool
    # Languages it accepts; None means "whatever the model knows".
    languages: frozenset[str] | None = None


class SttEngine(ABC):
    """Transcribe one utterance of 16 kHz float32 audio.

    ``transcribe`` blocks (it is model work); callers run it in a worker pool.
    """

    capabilities: EngineCapabilities

    @abstractmethod
    def transcribe(self, audio: np.ndarray, language: str) -> str: ...

    def supports_language(self, language: str) -> bool:
        caps = self.capabilities
        if not caps.multilingual:
            return language == "en"
        return caps.languages is None or language in caps.languages


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
        self.capabilities = EngineCapabilities(
            multilingual=multilingual,
            languages=frozenset(_LANGUAGE_CODES) if multilingual else frozenset({"en"}),
        )

    def transcribe(self, audio: np.ndarray, language: str) -> str:
        segments, _info = self._model.transcribe(
            audio,
            language=language,
            beam_size=self._beam_size,
            vad_filter=False,  # our endpointer already cut the utterance
            condition_on_previous_text=False,
            without_timestamps=True,
        )
        return " ".join(segment.text.strip() for segment in segments).strip()
