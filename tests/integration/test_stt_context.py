"""The decoding context (STT_CONTEXT, the profile's ``stt_context``) with the real Whisper base model.

A context makes Whisper expect the business's words, and also makes it hear them in noise:
measured with the restaurant's context, white noise came out as "The restaurant is open."
and a fan's hum read as speech (P(no speech) 0.78 -> 0.42). So noise is judged without the
context, and these clips must give no words with it as without it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.audio import noise, silence, speech
from voicebot.brain.business.profile import load_profile
from voicebot.stt.config import SttSettings
from voicebot.stt.engine import FasterWhisperEngine
from voicebot.stt.models import resolve_whisper_model

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engines():
    model_dir, multilingual = resolve_whisper_model("base", SttSettings().model_cache_dir)
    context = load_profile("restaurant").stt_context
    assert context, "the restaurant profile names what its callers talk about"
    return (FasterWhisperEngine(model_dir, multilingual, cpu_threads=2),
            FasterWhisperEngine(model_dir, multilingual, cpu_threads=2, context=context))


def hum(ms: int, hz: float = 100.0) -> np.ndarray:
    t = np.arange(16000 * ms // 1000) / 16000
    return (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


@pytest.mark.parametrize("clip", ["silence", "quiet noise", "noise", "hum", "burst"])
def test_noise_gives_no_words_with_the_context_as_without_it(engines, clip):
    audio = {"silence": silence(1000), "quiet noise": noise(1000, level=0.01, seed=1),
             "noise": noise(1500, level=0.05, seed=1), "hum": hum(1000),
             "burst": np.concatenate([silence(500), noise(200, level=0.3, seed=1), silence(500)])}[clip]
    plain, with_context = engines
    assert plain.transcribe(audio, "en") == ""
    assert with_context.transcribe(audio, "en") == ""


def test_the_context_is_read_before_the_words_and_speech_still_comes_through(engines):
    plain, with_context = engines
    tokenizer, prompt, without, _ = with_context._prompt("en")
    assert prompt[0] == tokenizer.sot_prev and prompt[-len(without):] == without
    assert "restaurant" in tokenizer.decode(prompt[1:-len(without)])
    assert plain._prompt("en")[1] == without  # no context: Whisper's own prompt
    assert with_context._prompt("ko")[1] == with_context._prompt("ko")[2]  # another language: none
    audio = np.concatenate([silence(300), speech("Is there a dress code?"), silence(500)])
    assert "dress code" in with_context.transcribe(audio, "en").lower()
