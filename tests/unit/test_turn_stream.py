"""A recognition stream with an end-of-turn model: a fake scorer answers by script, the VAD by loudness.

The scorer is gated, so each test decides when a verdict lands relative to the audio; tests
wait for events, never for time.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np

from tests.fakes.engines import FakeSttEngine, LoudnessVad
from tests.unit.test_stt_stream import loud, quiet
from voicebot.stt.endpointer import EndpointConfig
from voicebot.stt.recognizer import DecodePool, StreamRecognizer
from voicebot.stt.stream import RecognitionStream, StreamOptions
from voicebot.stt.turn_model import TurnModelBusy, Verdict

# Pause after 5 silent frames (160 ms), the timer at 10 (320 ms), the limit at 30 (~1 s).
ENDPOINT = EndpointConfig(threshold=0.5, neg_threshold=0.35, min_speech_frames=2, min_silence_frames=10,
                          max_frames=200, pause_frames=5, max_silence_frames=30, min_turn_speech_frames=6)


class ScriptedScorer:
    """Answers each pause with the next probability (or exception) once the test releases it."""

    def __init__(self, *answers: float | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[np.ndarray] = []
        self.release = asyncio.Event()
        self.release.set()
        self._asked = asyncio.Condition()

    async def score(self, audio: np.ndarray) -> Verdict:
        async with self._asked:
            self.asked.append(audio)
            self._asked.notify_all()
        await self.release.wait()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Verdict(answer, 0.02, 0.0)

    async def wait_asked(self, count: int = 1) -> None:
        async with self._asked:
            await asyncio.wait_for(self._asked.wait_for(lambda: len(self.asked) >= count), 30)


class BusyScorer:
    """A model whose queue is always full."""

    async def score(self, audio: np.ndarray) -> Verdict:
        raise TurnModelBusy("full")


class WordsEngine(FakeSttEngine):
    """Hears the same words in every decode."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def transcribe(self, audio: np.ndarray, language: str, draft: bool = False) -> str:
        super().transcribe(audio, language, draft)
        return self.text


class Harness:
    def __init__(self, scorer: ScriptedScorer | None, threshold: float | None = 0.5, words: str = "",
                 tail_frames: int = 5) -> None:
        # As the server configures it: no model for the stream, no pauses either.
        endpoint = ENDPOINT if threshold is not None else replace(ENDPOINT, pause_frames=0)
        recognizer = StreamRecognizer(LoudnessVad(), endpoint, 16000, pre_roll_ms=0)
        engine = WordsEngine(words) if words else FakeSttEngine()
        self.stream = RecognitionStream(recognizer, DecodePool(engine, 1), StreamOptions(
            language="en", turn_threshold=threshold, turn_text=bool(words), turn_tail_frames=tail_frames),
            scorer)  # type: ignore[arg-type]
        self.events: list = []
        self._reader = asyncio.create_task(self._collect())
        self._changed = asyncio.Condition()

    async def _collect(self) -> None:
        async for event in self.stream.events():
            async with self._changed:
                self.events.append(event)
                self._changed.notify_all()

    def ends(self) -> list[str]:
        return [e.end_of_utterance.reason for e in self.events if e.WhichOneof("event") == "end_of_utterance"]

    async def wait_ends(self, count: int = 1) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.ends()) >= count), 30)

    async def finish(self) -> None:
        await self.stream.finish()
        await asyncio.wait_for(self._reader, 30)
        await self.stream.close()


async def test_finished_ends_the_turn_before_the_timer_would():
    scorer = ScriptedScorer(0.9)
    h = Harness(scorer)
    await h.stream.feed(quiet(3) + loud(20) + quiet(6))  # 6 silent frames: under the timer's 10
    await h.wait_ends()
    assert h.ends() == ["model"]
    assert len(scorer.asked) == 1 and len(scorer.asked[0]) >= 25 * 512  # speech and the pause so far
    await h.finish()
    assert h.ends() == ["model"]  # one utterance, one end


async def test_not_finished_keeps_listening_until_the_limit():
    scorer = ScriptedScorer(0.1)
    h = Harness(scorer)
    await h.stream.feed(quiet(3) + loud(20) + quiet(6))
    await scorer.wait_asked()
    await h.stream.feed(quiet(20))  # 26 silent frames: past the timer, short of the limit
    await asyncio.sleep(0)
    assert h.ends() == []
    await h.stream.feed(quiet(4))
    await h.wait_ends()
    assert h.ends() == ["limit"]
    await h.finish()


async def test_a_thinking_pause_then_more_words_stays_one_utterance():
    scorer = ScriptedScorer(0.1, 0.9)
    h = Harness(scorer)
    await h.stream.feed(quiet(3) + loud(20) + quiet(5))
    await scorer.wait_asked()  # "not finished" at the pause
    await h.stream.feed(quiet(17) + loud(15) + quiet(6))  # a ~700 ms pause inside the sentence
    await h.wait_ends()
    assert h.ends() == ["model"] and len(scorer.asked) == 2
    await h.finish()
    finals = [e for e in h.events if e.WhichOneof("event") == "transcript" and e.transcript.is_final]
    assert len(finals) == 1


async def test_audio_keeps_flowing_while_the_model_thinks_and_a_late_verdict_ends_nothing():
    scorer = ScriptedScorer(0.9, 0.9)
    scorer.release.clear()  # the model is slow
    h = Harness(scorer)
    await h.stream.feed(quiet(3) + loud(20) + quiet(6))
    await scorer.wait_asked()
    # The caller goes on speaking; every frame is taken while the verdict is still out.
    await asyncio.wait_for(h.stream.feed(loud(10)), 5)
    scorer.release.set()  # "finished" for a pause the caller already broke
    await h.stream.feed(quiet(6))
    await h.wait_ends()
    assert h.ends() == ["model"] and len(scorer.asked) == 2
    await h.finish()
    assert h.ends() == ["model"]


async def test_a_failing_model_falls_back_to_the_timer():
    scorer = ScriptedScorer(RuntimeError("onnx failed"))
    h = Harness(scorer)
    await h.stream.feed(quiet(3) + loud(20) + quiet(6))
    await scorer.wait_asked()
    await asyncio.sleep(0.05)
    assert h.ends() == []
    await h.stream.feed(quiet(4))  # the timer's 10th silent frame
    await h.wait_ends()
    assert h.ends() == ["silence"]
    await h.finish()


async def test_a_language_without_a_model_uses_the_timer():
    scorer = ScriptedScorer()
    h = Harness(scorer, threshold=None)
    await h.stream.feed(quiet(3) + loud(20) + quiet(12))
    await h.wait_ends()
    assert h.ends() == ["silence"] and scorer.asked == []
    await h.finish()


async def test_words_that_go_on_hold_the_turn_the_audio_model_calls_finished():
    scorer = ScriptedScorer(0.95)
    h = Harness(scorer, words="My name is...")
    await h.stream.feed(quiet(3) + loud(20) + quiet(6))
    await scorer.wait_asked()
    await h.stream.feed(quiet(20))
    await asyncio.sleep(0.05)
    assert h.ends() == []
    await h.stream.feed(quiet(4))
    await h.wait_ends()
    assert h.ends() == ["limit"]
    await h.finish()
    assert h.stream.verdicts == {} or all(v.words_unfinished for v in h.stream.verdicts.values())


async def test_finished_words_and_audio_end_the_turn_and_words_alone_can_too():
    h = Harness(ScriptedScorer(0.9), words="A table for two, please.")
    await h.stream.feed(quiet(3) + loud(20) + quiet(6))
    await h.wait_ends()
    assert h.ends() == ["model"]
    await h.finish()
    text_only = Harness(None, words="Can I bring my dog?")
    await text_only.stream.feed(quiet(3) + loud(20) + quiet(6))
    await text_only.wait_ends()
    assert text_only.ends() == ["model"]
    await text_only.finish()


async def test_finished_words_end_a_pause_the_model_is_unsure_of_at_the_shorter_limit():
    """A complete question in a voice the model does not know: it is unsure (0.05), the words
    read as finished, so the turn ends after the words' limit (16 frames), not the full 30."""
    h = Harness(ScriptedScorer(0.05), words="What kind of food do you serve?")
    h.stream._recognizer._endpointer.config = replace(ENDPOINT, words_done_silence_frames=16)
    await h.stream.feed(quiet(3) + loud(20) + quiet(6))
    await h.stream.feed(quiet(8))  # 14 silent frames: short of the words' limit
    await asyncio.sleep(0.05)
    assert h.ends() == []
    await h.stream.feed(quiet(4))
    await h.wait_ends()
    assert h.ends() == ["words"]
    await h.finish()
    held = Harness(ScriptedScorer(0.05), words="Could we come on Friday,")
    held.stream._recognizer._endpointer.config = replace(ENDPOINT, words_done_silence_frames=16)
    await held.stream.feed(quiet(3) + loud(20) + quiet(6))
    await held.stream.feed(quiet(20))  # past the words' limit: these words go on
    await asyncio.sleep(0.05)
    assert held.ends() == []
    await held.stream.feed(quiet(4))
    await held.wait_ends()
    assert held.ends() == ["limit"]
    await held.finish()


async def test_the_model_hears_the_same_tail_of_silence_however_long_the_pause_when_asked():
    """Its score rises with the silence it hears: a fixed tail makes the verdict the same for a
    pause judged at once and for one judged late (here the tail is 2 frames, the pause 5)."""
    scorer = ScriptedScorer(0.1)
    h = Harness(scorer, tail_frames=2)
    await h.stream.feed(quiet(3) + loud(20) + quiet(6))
    await scorer.wait_asked()
    audio = scorer.asked[0]
    assert len(audio) == 22 * 512  # the utterance's 20 speech frames, and 2 of its silence
    assert np.abs(audio[-2 * 512:]).max() < np.abs(audio[:512]).max()  # it ends on the tail
    await h.finish()


async def test_with_the_model_busy_the_words_decide_and_without_words_the_timer():
    finished = Harness(BusyScorer(), words="What kind of food do you serve?")  # type: ignore[arg-type]
    finished.stream._recognizer._endpointer.config = replace(ENDPOINT, words_done_silence_frames=16)
    await finished.stream.feed(quiet(3) + loud(20) + quiet(6))
    await finished.stream.feed(quiet(12))
    await finished.wait_ends()
    assert finished.ends() == ["words"]
    await finished.finish()
    going_on = Harness(BusyScorer(), words="My name is...")  # type: ignore[arg-type]
    going_on.stream._recognizer._endpointer.config = replace(ENDPOINT, words_done_silence_frames=16)
    await going_on.stream.feed(quiet(3) + loud(20) + quiet(26))
    await asyncio.sleep(0.05)
    assert going_on.ends() == []
    await going_on.stream.feed(quiet(4))
    await going_on.wait_ends()
    assert going_on.ends() == ["limit"]
    await going_on.finish()
    no_words = Harness(BusyScorer())  # type: ignore[arg-type]
    await no_words.stream.feed(quiet(3) + loud(20) + quiet(12))
    await no_words.wait_ends()
    assert no_words.ends() == ["silence"]
    await no_words.finish()
