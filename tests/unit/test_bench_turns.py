"""make bench-turns judges a caller cut off by what they heard: the reply to an early final that
reached them, not an early final whose reply was cancelled unheard (a resumed turn)."""

from __future__ import annotations

import numpy as np

from bench.turns import Request, outcome

REQUEST = Request("held_back", "Could we come on Friday, … or maybe Saturday evening?", "piper", 500,
                  np.zeros(10, np.float32))
LAST_VOICED = 10.0


def final(at: float, text: str, turn: str) -> tuple[float, str, dict]:
    return (at, "transcript.final", {"type": "transcript.final", "text": text, "turn_id": turn})


def audio_of(at: float, turn: str) -> list[tuple[float, str, dict | None]]:
    return [(at, "audio.start", {"type": "audio.start", "turn_id": turn}), (at, "audio", None)]


def test_the_reply_to_half_a_sentence_reaching_the_caller_is_a_cut_off():
    got = outcome([final(9.0, "Could we come on Friday.", "t_1"), *audio_of(9.4, "t_1"),
                   final(10.3, "Or maybe Saturday evening?", "t_2"), *audio_of(10.8, "t_2")],
                  LAST_VOICED, REQUEST, "model")
    assert got.cut_off and got.early_final and not got.resumed
    assert got.endpoint_ms == 300.0  # the first final after the caller's last voiced frame


def test_an_early_final_whose_reply_was_cancelled_unheard_is_a_resumed_turn_not_a_cut_off():
    got = outcome([final(9.0, "Could we come on Friday,", "t_1"),
                   final(10.25, "Could we come on Friday, or maybe Saturday evening?", "t_2"),
                   *audio_of(10.7, "t_2")], LAST_VOICED, REQUEST, "model")
    assert not got.cut_off and got.early_final and got.resumed
    assert got.endpoint_ms == 250.0 and got.v2v_ms == 700.0


def test_one_final_after_the_sentence_is_neither():
    got = outcome([final(10.2, "Could we come on Friday, or maybe Saturday evening?", "t_1"),
                   *audio_of(10.6, "t_1")], LAST_VOICED, REQUEST, "model")
    assert not (got.cut_off or got.early_final or got.resumed)
