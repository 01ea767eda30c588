"""Endpointing decisions from scripted VAD probabilities (32 ms frames)."""

from voicebot.stt.endpointer import EndpointConfig, Endpointer, SpeechEnd, SpeechStart

CONFIG = EndpointConfig(threshold=0.5, neg_threshold=0.35, min_speech_frames=2,
                        min_silence_frames=10, max_frames=100)


def run(probs, config=CONFIG, finish=False):
    ep = Endpointer(config)
    events = [e for p in probs for e in ep.push(p)]
    return events + (ep.finish() if finish else [])


def test_speech_then_silence_gives_start_and_end():
    events = run([0.0] * 5 + [0.9] * 20 + [0.0] * 12)
    assert events == [SpeechStart(5), SpeechEnd(25, "silence")]


def test_a_single_loud_frame_is_not_speech():
    assert run([0.0, 0.9, 0.0, 0.9, 0.0] * 4) == []


def test_hysteresis_keeps_speech_through_mid_probabilities():
    # 0.4 is under the start threshold but over the lower one: still speech.
    events = run([0.9] * 5 + [0.4] * 15 + [0.9] * 5 + [0.0] * 10)
    assert events == [SpeechStart(0), SpeechEnd(25, "silence")]


def test_pause_shorter_than_min_silence_does_not_split():
    events = run([0.9] * 10 + [0.0] * 9 + [0.9] * 10 + [0.0] * 10)
    assert [type(e) for e in events] == [SpeechStart, SpeechEnd]


def test_max_length_forces_an_end_and_speech_restarts():
    config = EndpointConfig(min_speech_frames=2, min_silence_frames=10, max_frames=20)
    events = run([0.9] * 45, config)
    assert events[:2] == [SpeechStart(0), SpeechEnd(20, "max_length")]
    assert isinstance(events[2], SpeechStart)


def test_stream_end_closes_an_open_utterance():
    assert run([0.9] * 10, finish=True) == [SpeechStart(0), SpeechEnd(10, "end_of_stream")]
    assert run([0.0] * 10, finish=True) == []
