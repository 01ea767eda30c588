"""The Whisper engine's pure decisions: how much audio context to encode, and what looks like a loop."""

from types import SimpleNamespace

import numpy as np
import pytest

from voicebot.stt.engine import (
    MIDDLE_WINDOW_FRAMES,
    WINDOW_FRAMES,
    DraftDiscarded,
    FasterWhisperEngine,
    copies_context,
    encoder_frames,
    looks_degenerate,
    wider_windows,
)


def test_short_utterances_get_the_minimum_context_and_long_ones_twice_their_length():
    assert encoder_frames(150, min_context_s=10) == 1000  # 1.5 s of audio: 10 s of context
    assert encoder_frames(800, min_context_s=10) == 1700  # 8 s: twice that, plus a second
    assert encoder_frames(1600, min_context_s=10) == WINDOW_FRAMES  # never more than Whisper's window


def test_zero_or_a_full_window_means_the_standard_30_s():
    assert encoder_frames(150, min_context_s=0) == WINDOW_FRAMES
    assert encoder_frames(150, min_context_s=30) == WINDOW_FRAMES


def test_loops_look_degenerate():
    assert looks_degenerate("Can I bring my dog? Can I bring my dog?", 12, 100)
    assert looks_degenerate("Hi. Hi. Hi.", 6, 100)
    assert looks_degenerate("thank you " * 20, 60, 100)  # compresses too well
    assert looks_degenerate("A table for", 40, 40)  # hit the token cap


def test_ordinary_sentences_do_not():
    assert not looks_degenerate("I would like to book a table for two people tomorrow evening.", 14, 100)
    assert not looks_degenerate("Hello.", 2, 100)
    assert not looks_degenerate("", 0, 30)


def test_a_degenerate_draft_is_dropped_and_only_a_final_gets_the_wider_window_passes():
    engine = object.__new__(FasterWhisperEngine)  # the decode is scripted: no model needed
    engine._min_context_s = 5.0
    engine._model = SimpleNamespace(feature_extractor=lambda audio: np.zeros((80, 100)))
    windows: list[int] = []

    def looping_decode(features, window, language, frames):
        windows.append(window)
        return "do you do you", True

    engine._decode = looping_decode
    with pytest.raises(DraftDiscarded):
        engine.transcribe(np.zeros(16000, dtype=np.float32), "en", draft=True)
    assert windows == [encoder_frames(100, 5.0)]  # no second pass for a draft
    engine.transcribe(np.zeros(16000, dtype=np.float32), "en")
    assert windows[1:] == [encoder_frames(100, 5.0), MIDDLE_WINDOW_FRAMES, WINDOW_FRAMES]


def test_a_loop_the_middle_window_cures_is_not_decoded_a_third_time():
    engine = object.__new__(FasterWhisperEngine)
    engine._min_context_s = 5.0
    engine._model = SimpleNamespace(feature_extractor=lambda audio: np.zeros((80, 140)))
    windows: list[int] = []

    def loops_only_in_the_short_window(features, window, language, frames):
        windows.append(window)
        if window < MIDDLE_WINDOW_FRAMES:
            return "Do you have vegan desserts? Do you have vegan desserts?", True
        return "Do you have vegan desserts?", False

    engine._decode = loops_only_in_the_short_window
    assert engine.transcribe(np.zeros(22400, dtype=np.float32), "en") == "Do you have vegan desserts?"
    assert windows == [encoder_frames(140, 5.0), MIDDLE_WINDOW_FRAMES]


def test_wider_windows_skip_what_is_not_wider():
    assert wider_windows(500) == [MIDDLE_WINDOW_FRAMES, WINDOW_FRAMES]
    assert wider_windows(1200) == [WINDOW_FRAMES]  # a long utterance's window is already wider
    assert wider_windows(WINDOW_FRAMES) == []


RESTAURANT = "A caller asks a restaurant about a table booking, the menu, dietary needs, drinks."


@pytest.mark.parametrize(("heard", "dropped"), [
    ("A caller asks a restaurant about a table booking,", True),  # read back over silence
    ("the menu, dietary needs, drinks.", True),
    ("The menu.", False),  # too short to tell from a caller saying it
    ("Yes.", False),
    ("What's on the menu?", False),  # the caller's own sentence, words not a run of the context's
    ("Do you have a table booking for two?", False),
    ("", False),
])
def test_a_transcript_that_only_reads_back_the_context_is_dropped(heard, dropped):
    assert copies_context(heard, RESTAURANT) is dropped
