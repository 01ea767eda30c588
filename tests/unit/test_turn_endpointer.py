"""The endpointer with an end-of-turn model: pauses, the model's verdicts, the limit (32 ms frames)."""

from voicebot.stt.endpointer import EndpointConfig, Endpointer, Pause, SpeechEnd, SpeechStart

# Pause after 4 silent frames, the fixed timer at 10, the limit at 30; 6 frames of speech make a turn.
CONFIG = EndpointConfig(threshold=0.5, neg_threshold=0.35, min_speech_frames=2, min_silence_frames=10,
                        max_frames=200, pause_frames=4, max_silence_frames=30, min_turn_speech_frames=6)


def push(ep: Endpointer, probs: list[float]) -> list:
    return [e for p in probs for e in ep.push(p)]


def test_a_pause_asks_the_model_once_and_finished_ends_at_once():
    ep = Endpointer(CONFIG)
    events = push(ep, [0.9] * 20 + [0.0] * 4)
    assert events == [SpeechStart(0), Pause(23, 20)]
    assert push(ep, [0.0] * 2) == []  # no second question about the same pause
    assert ep.end_turn(events[-1]) == [SpeechEnd(20, "model")]
    assert not ep.in_speech and push(ep, [0.0] * 40) == []


def test_not_finished_waits_past_the_timer_up_to_the_limit():
    ep = Endpointer(CONFIG)
    events = push(ep, [0.9] * 20 + [0.0] * 29)
    assert events == [SpeechStart(0), Pause(23, 20)]  # the fixed 10 frames no longer end it
    assert push(ep, [0.0]) == [SpeechEnd(20, "limit")]


def test_speech_after_the_pause_makes_its_verdict_moot_and_the_next_pause_asks_again():
    ep = Endpointer(CONFIG)
    first = push(ep, [0.9] * 20 + [0.0] * 8)[-1]
    assert push(ep, [0.9] * 10) == []
    assert ep.end_turn(first) == []  # the caller went on: a late "finished" ends nothing
    second = push(ep, [0.0] * 4)
    assert second == [Pause(41, 38)]
    assert ep.end_turn(second[0]) == [SpeechEnd(38, "model")]


def test_a_short_sound_keeps_the_timer_as_its_limit():
    ep = Endpointer(CONFIG)
    events = push(ep, [0.9] * 3 + [0.0] * 10)
    assert events == [SpeechStart(0), Pause(6, 3), SpeechEnd(3, "silence")]


def test_audio_that_never_stops_ends_at_the_longest_utterance():
    config = EndpointConfig(min_speech_frames=2, min_silence_frames=10, max_frames=50, pause_frames=4,
                            max_silence_frames=30, min_turn_speech_frames=6)
    ep = Endpointer(config)
    events = push(ep, [0.9] * 120)
    assert events[:2] == [SpeechStart(0), SpeechEnd(50, "max_length")]
    assert not any(isinstance(e, Pause) for e in events)


def test_use_timer_puts_the_open_utterance_back_on_the_fixed_silence():
    ep = Endpointer(CONFIG)
    push(ep, [0.9] * 20 + [0.0] * 12)
    assert ep.use_timer() == [SpeechEnd(20, "silence")]  # already past the timer: ends now
    ep2 = Endpointer(CONFIG)
    push(ep2, [0.9] * 20 + [0.0] * 5)
    assert ep2.use_timer() == []
    assert push(ep2, [0.0] * 5) == [SpeechEnd(20, "silence")]
    # The next utterance asks the model again.
    assert push(ep2, [0.9] * 20 + [0.0] * 4)[-1] == Pause(53, 50)


def test_without_a_model_nothing_pauses():
    ep = Endpointer(EndpointConfig(min_speech_frames=2, min_silence_frames=10, max_frames=200))
    assert push(ep, [0.9] * 20 + [0.0] * 10) == [SpeechStart(0), SpeechEnd(20, "silence")]


# The pause's words read as finished (the model unsure): the limit is 16 frames, not 30.
WORDS = EndpointConfig(**{**CONFIG.__dict__, "words_done_silence_frames": 16})


def test_finished_words_with_an_unsure_model_end_the_pause_sooner_than_the_limit():
    ep = Endpointer(WORDS)
    pause = push(ep, [0.9] * 20 + [0.0] * 4)[-1]
    assert ep.words_done(pause) == []  # 4 silent frames so far: it waits for 16
    assert push(ep, [0.0] * 11) == []
    assert push(ep, [0.0]) == [SpeechEnd(20, "words")]


def test_finished_words_told_late_end_the_pause_at_once():
    ep = Endpointer(WORDS)
    pause = push(ep, [0.9] * 20 + [0.0] * 4)[-1]
    push(ep, [0.0] * 14)  # 18 silent frames when the words are judged
    assert ep.words_done(pause) == [SpeechEnd(20, "words")]


def test_speech_after_finished_words_puts_the_next_pause_back_on_the_limit():
    ep = Endpointer(WORDS)
    first = push(ep, [0.9] * 20 + [0.0] * 4)[-1]
    ep.words_done(first)
    assert push(ep, [0.9] * 5 + [0.0] * 20) == [Pause(32, 29)]  # no "words" end at 16 any more
    assert push(ep, [0.0] * 9) == []
    assert push(ep, [0.0]) == [SpeechEnd(29, "limit")]
    assert ep.words_done(first) == []  # a verdict on an old pause ends nothing


def test_without_a_words_limit_finished_words_change_nothing():
    ep = Endpointer(CONFIG)
    pause = push(ep, [0.9] * 20 + [0.0] * 20)[1]
    assert ep.words_done(pause) == []
    assert push(ep, [0.0] * 9) == [] and push(ep, [0.0]) == [SpeechEnd(20, "limit")]
