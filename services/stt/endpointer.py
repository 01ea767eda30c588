"""Turn per-frame speech probabilities into utterance start/end decisions.

Hysteresis: speech starts after ``min_speech_frames`` frames at or above
``threshold``; once in speech, only frames below the lower ``neg_threshold``
count as silence, and ``min_silence_frames`` of them in a row end the
utterance. A pause shorter than that does not split a sentence. An utterance
that reaches ``max_frames`` is ended (reason "max_length") so a final always
comes, and speech that continues starts a new utterance.

Pure logic with no audio or clock, so it is tested with scripted probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EndpointConfig:
    threshold: float = 0.5
    neg_threshold: float = 0.35
    min_speech_frames: int = 2
    min_silence_frames: int = 10
    max_frames: int = 469  # 15 s of 32 ms frames


@dataclass(frozen=True)
class SpeechStart:
    frame: int  # first frame of speech


@dataclass(frozen=True)
class SpeechEnd:
    frame: int  # first frame after the last speech frame
    reason: str  # "silence" | "max_length" | "end_of_stream"


class Endpointer:
    def __init__(self, config: EndpointConfig) -> None:
        self.config = config
        self.frame = 0
        self.in_speech = False
        self.start_frame = 0
        self._run = 0  # consecutive speech frames (idle) or silence frames (in speech)
        self._last_speech = 0

    @property
    def last_speech_frame(self) -> int:
        """The newest frame counted as speech (meaningful while ``in_speech``)."""
        return self._last_speech

    @property
    def silence_frames(self) -> int:
        """Silence frames in a row since the last speech frame of the open utterance."""
        return self._run if self.in_speech else 0

    def push(self, probability: float) -> list[SpeechStart | SpeechEnd]:
        """Feed the next frame's probability; return the decisions it caused."""
        index = self.frame
        self.frame += 1
        if self.in_speech:
            return self._push_in_speech(index, probability)
        return self._push_idle(index, probability)

    def finish(self) -> list[SpeechEnd]:
        """The stream ended: close an open utterance."""
        if not self.in_speech:
            return []
        self.in_speech = False
        return [SpeechEnd(self._last_speech + 1, "end_of_stream")]

    def _push_idle(self, index: int, probability: float) -> list[SpeechStart | SpeechEnd]:
        self._run = self._run + 1 if probability >= self.config.threshold else 0
        if self._run < self.config.min_speech_frames:
            return []
        self.in_speech = True
        self.start_frame = index - self._run + 1
        self._last_speech = index
        self._run = 0
        return [SpeechStart(self.start_frame)]

    def _push_in_speech(self, index: int, probability: float) -> list[SpeechStart | SpeechEnd]:
        if probability >= self.config.neg_threshold:
            self._last_speech = index
            self._run = 0
        else:
            self._run += 1
        if self._run >= self.config.min_silence_frames:
            self.in_speech = False
            self._run = 0
            return [SpeechEnd(self._last_speech + 1, "silence")]
        if index + 1 - self.start_frame >= self.config.max_frames:
            # Forced cut: the next speech frame starts a fresh utterance.
            self.in_speech = False
            self._run = 0
            return [SpeechEnd(index + 1, "max_length")]
        return []
