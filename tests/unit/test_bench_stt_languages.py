"""bench-stt-languages' scoring: a Korean character error rate over letters and digits only, an
English word error rate as bench-stt counts it, the Korean lines it speaks, and the per-language
summary (bench/stt_languages.py)."""

from __future__ import annotations

import pytest

from bench.stt_languages import (
    Candidate,
    Decoded,
    _listed,
    character_errors,
    characters,
    korean_lines,
    summarize,
    word_errors,
)


def test_characters_are_letters_and_digits_of_any_script_case_folded() -> None:
    assert characters("네, 7시에 OK!  두 명.") == ["네", "7", "시", "에", "o", "k", "두", "명"]


@pytest.mark.parametrize(("reference", "heard", "expected"), [
    ("네, 맞아요.", "네 맞아요", (0, 4)),                       # spaces and punctuation are not characters
    ("네, 맞아요.", "네, 마치요", (2, 4)),                      # 맞 -> 마, 아 -> 치
    ("내일 저녁 7시에", "내일 저녁 일곱 시에", (2, 7)),          # a number heard as a word: 7 -> 일, 곱 added
    ("네", "", (1, 1)),                                        # nothing heard: every character missed
    ("네 명이요.", "1,2,3,4,4,4", (6, 4)),                      # a loop: insertions beyond the reference
])
def test_character_errors_count_edits_over_reference_characters(reference, heard, expected) -> None:
    assert character_errors(reference, heard) == expected


def test_word_errors_read_digits_as_words_like_bench_stt() -> None:
    assert word_errors("A table for two, please.", "a table for 2 please") == (0, 5)
    assert word_errors("A table for two, please.", "a table for you") == (2, 5)


def test_the_korean_lines_are_every_caller_turn_and_question_once_with_names_filled() -> None:
    lines = korean_lines()
    assert len(lines) >= 40
    assert len(set(lines)) == len(lines)
    assert not [line for line in lines if "{" in line or "}" in line]
    assert "거기 저녁에 몇 시에 문 열어요?" in lines  # a known question of restaurant-ko
    assert "와이파이 비밀번호가 뭐예요?" in lines  # an unknown one
    assert "내일 저녁 7시에 두 명 자리 예약하고 싶어요. 이름은 김민준이에요." in lines  # a dialogue turn


def decoded(voice: str, errors: int, units: int, audio_s: float, decode_s: float) -> Decoded:
    return Decoded("ko", voice, "ref", "heard", errors, units, audio_s, decode_s, cpu_s=2 * decode_s)


def test_the_summary_pools_errors_over_utterances_and_time_over_audio() -> None:
    items = [decoded("ko", 1, 10, 2.0, 0.5), decoded("ko", 0, 4, 1.0, 0.1),
             decoded("ko+f3", 6, 6, 1.0, 1.4)]
    summary = summarize(items)
    assert summary["error_rate"] == pytest.approx(7 / 20)  # pooled, not the mean of per-line rates
    assert summary["by_voice"] == {"ko": pytest.approx(1 / 14, abs=1e-4), "ko+f3": 1.0}  # rounded to 4 places
    assert summary["exact"] == 1
    assert summary["rtf"] == pytest.approx(2.0 / 4.0)
    assert summary["cpu_s_per_audio_s"] == pytest.approx(4.0 / 4.0)
    assert summary["decode_ms"] == {"p50": 500, "p95": 1400}


def test_candidates_are_every_combination_listed_with_commas_or_repeated() -> None:
    assert _listed(["int8,float32", " int16 "]) == ["int8", "float32", "int16"]
    assert Candidate("base", "int8", 5).label == "base int8 beam 5"
