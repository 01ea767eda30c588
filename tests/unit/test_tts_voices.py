"""A voice per language: TTS_VOICES read and checked, the espeak-ng engine (the real program),
and which engine a stream's language gets. Over gRPC: tests/integration/test_tts_service.py."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

from voicebot.tts.config import TtsSettings
from voicebot.tts.engine import PiperEngine, RenderStop, RenderStopped, packaged_voice
from voicebot.tts.espeak import ESPEAK_RATE, EspeakEngine, EspeakError, wav_samples
from voicebot.tts.voices import Voices, VoicesError, VoiceSpec, build_voices, parse_voices

KOREAN = "내일 저녁 일곱 시에 두 명 예약하고 싶어요."


@pytest.fixture(scope="module")
def korean() -> EspeakEngine:
    return EspeakEngine("ko")


# ---- TTS_VOICES ------------------------------------------------------------------------------

def test_tts_voices_names_a_voice_per_language():
    assert parse_voices("ko=espeak:ko, ja-JP = piper:/voices/ja.onnx,de=default,") == {
        "ko": VoiceSpec("espeak", "ko"), "ja-jp": VoiceSpec("piper", "/voices/ja.onnx"),
        "de": VoiceSpec("default")}
    assert parse_voices("") == {}


@pytest.mark.parametrize(("value", "named"), [
    ("ko", "'ko' is not LANGUAGE=KIND:VOICE"),
    ("=espeak:ko", "'=espeak:ko' is not LANGUAGE=KIND:VOICE"),
    ("korean!=espeak:ko", "is not LANGUAGE=KIND:VOICE"),
    ("ko=festival:ko", "unknown kind 'festival'"),
    ("ko=espeak", "espeak needs a voice"),
    ("ko=piper:", "piper needs a voice"),
    ("ko=default:ko", "default takes no voice"),
    ("ko=espeak:ko,ko=default", "'ko' is given two voices"),
])
def test_a_malformed_tts_voices_is_refused_naming_the_setting_and_the_entry(value, named):
    with pytest.raises(VoicesError) as error:
        parse_voices(value)
    assert str(error.value).startswith("TTS_VOICES: ") and named in str(error.value)


def test_a_voice_that_cannot_speak_fails_the_start_naming_it(tmp_path):
    with pytest.raises(VoicesError, match=r"^TTS_VOICES: ko=espeak:zz: .*does not exist"):
        build_voices(TtsSettings(voices="ko=espeak:zz"))
    missing = tmp_path / "ko.onnx"
    named = re.escape(f"TTS_VOICES: ko=piper:{missing}: {missing} does not exist")
    with pytest.raises(VoicesError, match=f"^{named}"):
        build_voices(TtsSettings(voices=f"ko=piper:{missing}"))


def test_korean_gets_espeak_by_default_and_a_piper_voice_by_setting_alone():
    by_default = build_voices(TtsSettings())
    assert isinstance(by_default.default, PiperEngine)
    assert isinstance(by_default.for_language("ko"), EspeakEngine)
    assert by_default.for_language("en") is by_default.default

    model, _config = packaged_voice()  # a piper voice for Korean: the packaged one stands in
    plugged = build_voices(TtsSettings(voices=f"ko=piper:{model}"))
    assert isinstance(plugged.for_language("ko"), PiperEngine)
    assert plugged.for_language("ko") is not plugged.default
    turned_off = build_voices(TtsSettings(voices="ko=default"))
    assert turned_off.for_language("ko") is turned_off.default


def test_a_language_finds_its_voice_by_its_region_free_code_else_the_default(korean):
    english = EspeakEngine("en-us")
    voices = Voices(english, {"ko": korean})
    assert voices.for_language("ko") is korean
    assert voices.for_language("ko-KR") is korean
    assert voices.for_language("ko_kr") is korean
    assert voices.for_language("de") is english
    assert voices.for_language("") is english
    assert voices.engines() == [english, korean]


# ---- the espeak-ng engine ----------------------------------------------------------------------

def test_korean_is_spoken_with_plausible_duration(korean):
    phrases = korean.split(KOREAN)
    assert phrases == [KOREAN]
    audio = korean.render(phrases[0])
    assert audio.dtype == np.float32 and korean.sample_rate == ESPEAK_RATE
    # Seventeen syllables: seconds of speech, not a click and not a minute.
    assert 1.5 < len(audio) / ESPEAK_RATE < 8
    assert float(np.sqrt(np.mean(audio ** 2))) > 0.02  # not silence
    assert np.array_equal(korean.render(phrases[0]), audio)  # the same phrase, the same audio


def test_a_sentence_is_cut_at_its_ends_and_long_enough_pauses(korean):
    text = ("안녕하세요, 내일 저녁에 두 명 예약하고 싶어요. 네, 좋아요! "
            "창가 자리로 부탁드립니다, 가능하면 조용한 곳으로요.")
    assert korean.split(text) == ["안녕하세요, 내일 저녁에 두 명 예약하고 싶어요.", "네, 좋아요!",
                                  "창가 자리로 부탁드립니다,", "가능하면 조용한 곳으로요."]
    # A reply's first sentence starts with its first clause.
    assert korean.split(text, urgent=True)[:2] == ["안녕하세요,", "내일 저녁에 두 명 예약하고 싶어요."]
    whole = EspeakEngine("ko", min_phrase_chars=0).split(text)
    assert whole[2] == "창가 자리로 부탁드립니다, 가능하면 조용한 곳으로요."


def test_text_reaches_espeak_as_text_never_as_options(korean):
    """The phrase goes on stdin: text that looks like an option or a shell command is spoken."""
    assert len(korean.render("--version; rm -rf / $(echo hi)")) > ESPEAK_RATE


def test_a_stop_before_the_render_starts_no_process(korean):
    stop = RenderStop()
    stop.set()
    with pytest.raises(RenderStopped):
        korean.render(KOREAN, stop)


def test_a_stop_during_the_render_kills_espeak_at_once(korean):
    long_phrase = " ".join([KOREAN] * 600)  # about half an hour of speech: seconds to render
    stop = RenderStop()
    timer = threading.Timer(0.3, stop.set)
    started = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(RenderStopped):
            korean.render(long_phrase, stop)
    finally:
        timer.cancel()
    # The whole render takes several seconds even on a fast machine; the stop lands in 0.3 s.
    assert time.perf_counter() - started < 2.5


def test_a_voice_espeak_does_not_have_fails_when_the_engine_is_made():
    with pytest.raises(EspeakError, match=r"espeak-ng -v xx-nowhere: .*does not exist"):
        EspeakEngine("xx-nowhere")
    with pytest.raises(EspeakError, match="not installed"):
        EspeakEngine("ko", program="espeak-ng-not-on-this-path")


def test_only_a_wav_is_read_as_audio():
    with pytest.raises(EspeakError, match="did not write a WAV"):
        wav_samples(b"Error: something went wrong")


# ---- make run -------------------------------------------------------------------------------

def test_make_run_says_how_to_get_the_korean_voice_when_it_cannot_install_it(tmp_path, monkeypatch, capsys):
    from voicebot.devstack import Stack, ensure_espeak_ng

    stack = Stack(tmp_path / "logs")
    monkeypatch.setenv("PATH", str(tmp_path))  # no espeak-ng here
    monkeypatch.delenv("TTS_VOICES", raising=False)
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # not root: nothing is installed
    ensure_espeak_ng(stack, "en")
    assert capsys.readouterr().out == ""  # English needs no espeak-ng
    ensure_espeak_ng(stack, "en,ko")
    said = capsys.readouterr().out
    assert "espeak-ng is not installed: ko will be spoken by the English voice" in said
    assert "apt-get install espeak-ng" in said
    monkeypatch.setenv("TTS_VOICES", "ja=piper:/voices/ja.onnx")
    ensure_espeak_ng(stack, "en,ko")
    assert "ko will be spoken by the English voice" in capsys.readouterr().out  # still espeak-ng's
    monkeypatch.setenv("TTS_VOICES", "ko=piper:/voices/ko.onnx")
    ensure_espeak_ng(stack, "en,ko")
    assert capsys.readouterr().out == ""  # a voice of its own was set
