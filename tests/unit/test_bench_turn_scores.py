"""make bench-turn-scores finds a speaker's pauses by level and replays a decision on the judges'
verdicts: words that go on wait for the limit, finished words with a confident model end at the
pause, finished words with an unsure one after the shorter wait; a cut ended soon enough that the
reply reaches a caller still in a 700 ms pause is a cut-off."""

from __future__ import annotations

import numpy as np

from bench.turn_scores import RATE, Decision, Item, cut_off, pauses, replay, wait_ms
from voicebot.stt.turn_text import unfinished


def tone(ms: int) -> np.ndarray:
    t = np.arange(RATE * ms // 1000) / RATE
    return (0.5 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)


def gap(ms: int) -> np.ndarray:
    return np.zeros(RATE * ms // 1000, np.float32)


def test_a_pause_is_a_long_enough_silence_between_enough_speech():
    audio = np.concatenate([gap(100), tone(700), gap(250), tone(600), gap(60), tone(700), gap(100)])
    found = pauses(audio)
    assert len(found) == 1  # the 60 ms gap is a consonant's closure, not a pause
    start, end = found[0]
    assert abs(start / RATE - 0.8) < 0.02 and abs((end - start) / RATE - 0.25) < 0.02


def item(kind: str, words: str, score: float) -> Item:
    return Item("piper", words, kind, gap(0), words, {160: score})


def test_the_wait_follows_the_words_and_the_model():
    d = Decision(tail_ms=160, threshold=0.9, short_ms=600)
    assert wait_ms(item("complete", "My name is...", 0.99), d, unfinished) == 1200
    assert wait_ms(item("complete", "Can I bring my dog?", 0.95), d, unfinished) == 160
    assert wait_ms(item("complete", "Can I bring my dog?", 0.4), d, unfinished) == 600


def test_a_cut_ended_before_the_reply_could_wait_out_a_700_ms_pause_is_a_cut_off():
    assert cut_off(160) and cut_off(512) and not cut_off(600)
    d = Decision(tail_ms=160, threshold=0.9, short_ms=600)
    got = replay([item("complete", "Can I bring my dog?", 0.95), item("goes_on", "A table for", 0.99),
                  item("boundary", "We are celebrating.", 0.97)], d, unfinished)
    assert got["cut_off"] == {"goes_on": "0/1", "boundary": "1/1"}
    assert got["complete_wait_p50"] == 160
