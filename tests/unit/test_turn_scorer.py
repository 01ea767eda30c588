"""The end-of-turn model runs on a thread of its own fed by a bounded queue: a pause that finds
the queue full is refused at once (the stream judges it without the model), a pause that became
moot before its turn is skipped, and the event loop never waits for an inference."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from voicebot.stt.turn_model import TurnModelBusy, TurnScorer


class GatedModel:
    """Answers the audio's first sample as the probability, once the test opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.seen: list[float] = []

    def probability(self, audio: np.ndarray) -> float:
        self.gate.wait(10)
        self.seen.append(float(audio[0]))
        return float(audio[0])


def audio(value: float) -> np.ndarray:
    return np.full(16, value, np.float32)


async def test_a_full_queue_refuses_a_pause_at_once_and_the_queued_ones_are_answered():
    model = GatedModel()
    scorer = TurnScorer(model, workers=1, queue_size=2)  # type: ignore[arg-type]
    running = asyncio.create_task(scorer.score(audio(0.1)))
    await asyncio.sleep(0.05)  # the thread took it and waits at the gate
    queued = [asyncio.create_task(scorer.score(audio(v))) for v in (0.2, 0.3)]
    await asyncio.sleep(0.05)
    with pytest.raises(TurnModelBusy):
        await asyncio.wait_for(scorer.score(audio(0.4)), 1)  # refused without waiting
    model.gate.set()
    verdicts = await asyncio.wait_for(asyncio.gather(running, *queued), 10)
    assert [round(v.probability, 2) for v in verdicts] == [0.1, 0.2, 0.3]
    assert verdicts[2].waited >= verdicts[0].waited  # queued behind the others
    scorer.shutdown()


async def test_a_pause_cancelled_while_queued_is_never_run():
    model = GatedModel()
    scorer = TurnScorer(model, workers=1, queue_size=2)  # type: ignore[arg-type]
    running = asyncio.create_task(scorer.score(audio(0.1)))
    await asyncio.sleep(0.05)
    moot = asyncio.create_task(scorer.score(audio(0.2)))
    await asyncio.sleep(0.05)
    moot.cancel()  # the caller spoke again: this pause's verdict is not wanted
    await asyncio.sleep(0.05)
    model.gate.set()
    await asyncio.wait_for(running, 10)
    after = await asyncio.wait_for(scorer.score(audio(0.3)), 10)
    assert after.probability == pytest.approx(0.3)
    assert model.seen == pytest.approx([0.1, 0.3])
    scorer.shutdown()


async def test_a_failing_inference_reaches_the_stream_that_asked():
    class Broken:
        def probability(self, audio: np.ndarray) -> float:
            raise RuntimeError("onnx failed")

    scorer = TurnScorer(Broken(), workers=1, queue_size=1)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="onnx failed"):
        await asyncio.wait_for(scorer.score(audio(0.1)), 10)
    scorer.shutdown()
