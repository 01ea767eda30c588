"""What the person heard of an interrupted reply, from the audio sent and the client's playback."""

from gateway.turn import SpokenTracker, TurnTimings


def tracker() -> SpokenTracker:
    t = SpokenTracker(sample_rate=16000)
    t.sentence_started("Tuesday at ten works.")
    t.audio_sent(16000 * 2)  # 1000 ms
    t.sentence_started("Shall I book it for you?")
    t.audio_sent(16000 * 2)  # 1000 ms
    return t


def test_whole_first_sentence_and_part_of_the_second():
    assert tracker().spoken_text(played_ms=1500) == "Tuesday at ten works. Shall I book"


def test_nothing_played_means_nothing_heard():
    assert tracker().spoken_text(played_ms=0) == ""


def test_played_beyond_what_was_sent_is_capped():
    assert tracker().spoken_text(played_ms=99_000) == "Tuesday at ten works. Shall I book it for you?"


def test_stage_timings_are_measured_from_the_end_of_speech():
    t = TurnTimings(speech_end=10.0, end_of_utterance=10.3, final_transcript=10.4, brain_request=10.4,
                    first_delta=10.6, first_tts_text=10.6, first_sentence_ready=10.7, first_audio=10.75)
    assert t.stages_ms() == {"endpoint": 300, "stt": 100, "llm_ttft": 200, "tts_ttfa": 50,
                             "voice_to_voice": 750}
    typed = TurnTimings(brain_request=1.0, first_delta=1.2, first_tts_text=1.2, first_audio=1.5)
    assert typed.stages_ms()["endpoint"] is None and typed.stages_ms()["voice_to_voice"] == 500
