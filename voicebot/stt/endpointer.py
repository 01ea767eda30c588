"""Turn per-frame speech probabilities into utterance start/end decisions.

Hysteresis: speech starts after ``min_speech_frames`` frames at or above
``threshold``; once in speech, only frames below the lower ``neg_threshold``
count as silence, and ``min_silence_frames`` of them in a row end the
utterance. A pause shorter than that does not split a sentence. An utterance
that reaches ``max_frames`` is ended (reason "max_length") so a final always
comes, and speech that continues starts a new utterance.

With an end-of-turn model (``pause_frames`` > 0) the fixed silence is replaced: after
``pause_frames`` of silence the endpointer reports a ``Pause``; whoever runs the model calls
``end_turn`` when it says the speaker has finished (reason "model"), and otherwise the
utterance ends after ``max_silence_frames`` (reason "limit"). An utterance with less than
``min_turn_speech_frames`` of speech keeps the fixed silence as its limit, so a cough or a
click never stays open longer than it did without the model. ``use_timer`` puts the open
utterance back on the fixed silence (the model failed). The wait depends on the pause's words
too: ``words_done`` (the decode at the pause reads as a finished sentence, the model unsure)
shortens this pause's limit to ``words_done_silence_frames`` (reason "words"); speech that
comes back undoes it, and the next pause is judged afresh.

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
    # End-of-turn model: 0 = none, the fixed silence (min_silence_frames) ends every utterance.
    pause_frames: int = 0
    max_silence_frames: int = 0
    min_turn_speech_frames: int = 0
    # The limit of a pause whose words read as finished while the model is unsure (0: none).
    words_done_silence_frames: int = 0

    @property
    def turn_model(self) -> bool:
        return self.pause_frames > 0


@dataclass(frozen=True)
class SpeechStart:
    frame: int  # first frame of speech


@dataclass(frozen=True)
class SpeechEnd:
    frame: int  # first frame after the last speech frame
    reason: str  # "silence" | "model" | "words" | "limit" | "max_length" | "end_of_stream"


@dataclass(frozen=True)
class Pause:
    """The open utterance paused long enough to ask the end-of-turn model."""

    frame: int  # the frame that completed the pause
    speech_end: int  # first frame after the last speech frame


class Endpointer:
    def __init__(self, config: EndpointConfig) -> None:
        self.config = config
        self.frame = 0
        self.in_speech = False
        self.start_frame = 0
        self._run = 0  # consecutive speech frames (idle) or silence frames (in speech)
        self._last_speech = 0
        self._timer_only = not config.turn_model  # the fixed silence ends the open utterance
        self._words_done = False  # this pause's words read as finished: its shorter limit holds

    @property
    def last_speech_frame(self) -> int:
        """The newest frame counted as speech (meaningful while ``in_speech``)."""
        return self._last_speech

    @property
    def silence_frames(self) -> int:
        """Silence frames in a row since the last speech frame of the open utterance."""
        return self._run if self.in_speech else 0

    def end_turn(self, pause: Pause) -> list[SpeechEnd]:
        """The model says the speaker finished at ``pause``: end the utterance now, unless
        speech came back since (or it already ended)."""
        if not self.in_speech or self._last_speech + 1 != pause.speech_end or self._run == 0:
            return []
        return [self._end(self._last_speech + 1, "model")]

    def words_done(self, pause: Pause) -> list[SpeechEnd]:
        """The pause's words read as finished (the model was unsure): this pause ends after
        ``words_done_silence_frames``, now if it already lasted that long; nothing if speech came
        back since (or the utterance ended)."""
        frames = self.config.words_done_silence_frames
        if (frames <= 0 or not self.in_speech or self._timer_only
                or self._last_speech + 1 != pause.speech_end or self._run == 0):
            return []
        self._words_done = True
        if self._run >= frames:
            return [self._end(self._last_speech + 1, "words")]
        return []

    def use_timer(self) -> list[SpeechEnd]:
        """The fixed silence ends the open utterance (the model could not answer)."""
        if not self.in_speech:
            return []
        self._timer_only = True
        if self._run >= self.config.min_silence_frames:
            return [self._end(self._last_speech + 1, "silence")]
        return []

    def push(self, probability: float) -> list[SpeechStart | SpeechEnd | Pause]:
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
        self._timer_only = not self.config.turn_model
        return [SpeechStart(self.start_frame)]

    def _push_in_speech(self, index: int, probability: float) -> list[SpeechStart | SpeechEnd | Pause]:
        if probability >= self.config.neg_threshold:
            self._last_speech = index
            self._run = 0
            self._words_done = False  # the pause was not the end: the next one is judged afresh
        else:
            self._run += 1
        limit, reason = self._limit()
        if self._run >= limit:
            return [self._end(self._last_speech + 1, reason)]
        if index + 1 - self.start_frame >= self.config.max_frames:
            # Forced cut: the next speech frame starts a fresh utterance.
            return [self._end(index + 1, "max_length")]
        if not self._timer_only and self._run == self.config.pause_frames:
            return [Pause(index, self._last_speech + 1)]
        return []

    def _limit(self) -> tuple[int, str]:
        """Silence frames that end the open utterance, and the reason that end gets."""
        c = self.config
        if self._timer_only or self._last_speech + 1 - self.start_frame < c.min_turn_speech_frames:
            return c.min_silence_frames, "silence"
        if self._words_done:
            return c.words_done_silence_frames, "words"
        return c.max_silence_frames, "limit"

    def _end(self, frame: int, reason: str) -> SpeechEnd:
        self.in_speech = False
        self._run = 0
        self._words_done = False
        return SpeechEnd(frame, reason)
