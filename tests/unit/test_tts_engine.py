"""Phrase splitting, levelling across phrases, and the earliest-deadline-first synthesis pool."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from voicebot.tts.engine import Leveller, split_phonemes
from voicebot.tts.pool import DeadlinePool


def phonemes(text: str) -> list[str]:
    return list(text)


def test_short_sentences_stay_whole():
    assert split_phonemes(phonemes("abcde, fghij."), min_phrase=24) == [phonemes("abcde, fghij.")]


def test_long_sentence_is_cut_after_its_pauses_into_pieces_of_at_least_min_phrase():
    sentence = phonemes("a" * 30 + ", " + "b" * 10 + ", " + "c" * 30 + "; " + "d" * 30 + ".")
    pieces = ["".join(p) for p in split_phonemes(sentence, min_phrase=24)]
    assert pieces == ["a" * 30 + ",", " " + "b" * 10 + ", " + "c" * 30 + ";", " " + "d" * 30 + "."]
    assert "".join(pieces) == "".join(sentence)


def test_a_replys_first_piece_may_be_short_but_not_under_a_tenth_of_the_rest():
    sentence = phonemes("ʃʊɹ, " + "x" * 45 + ".")
    assert ["".join(p) for p in split_phonemes(sentence, 24, first_min=4)] == ["ʃʊɹ,", " " + "x" * 45 + "."]
    long_rest = phonemes("ʃʊɹ, " + "x" * 80 + ".")
    assert len(split_phonemes(long_rest, 24, first_min=4)) == 1  # "Sure," would end before the rest is ready
    assert len(split_phonemes(sentence, 0, first_min=4)) == 1  # splitting switched off


def test_leveller_keeps_relative_loudness_and_never_clips():
    level = Leveller()
    first = level(np.array([0.0, 0.5, -0.25], np.float32))
    quieter = level(np.array([0.25], np.float32))
    louder = level(np.array([0.8], np.float32))
    assert first.tolist() == [0.0, 1.0, -0.5]
    assert quieter.tolist() == [0.5]  # same gain as the first phrase, not pushed to full scale
    assert louder.tolist() == [1.0]  # gain lowered so it does not clip
    assert level(np.zeros(3, np.float32)).tolist() == [0.0, 0.0, 0.0]


async def test_pool_runs_the_earliest_deadline_first():
    pool = DeadlinePool(workers=1)
    gate = threading.Event()
    order: list[str] = []
    try:
        blocker = asyncio.create_task(pool.run(0.0, gate.wait))
        await asyncio.sleep(0.05)  # the only worker is now busy
        later = asyncio.create_task(pool.run(100.0, order.append, "ahead of its listener"))
        await asyncio.sleep(0)
        urgent = asyncio.create_task(pool.run(1.0, order.append, "first audio of a new call"))
        await asyncio.sleep(0.05)
        assert pool.queued() == 2
        gate.set()
        await asyncio.gather(blocker, later, urgent)
        assert order == ["first audio of a new call", "ahead of its listener"]
    finally:
        gate.set()
        pool.shutdown()


async def test_pool_skips_a_cancelled_job_and_reports_errors():
    pool = DeadlinePool(workers=1)
    gate = threading.Event()
    ran: list[str] = []
    try:
        blocker = asyncio.create_task(pool.run(0.0, gate.wait))
        await asyncio.sleep(0.05)
        cancelled = asyncio.create_task(pool.run(1.0, ran.append, "cancelled"))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        gate.set()
        await blocker
        assert await pool.run(2.0, ran.append, "next") is None
        assert ran == ["next"]

        def fail() -> None:
            raise ValueError("piper failed")

        with pytest.raises(ValueError, match="piper failed"):
            await pool.run(3.0, fail)
    finally:
        gate.set()
        pool.shutdown()
