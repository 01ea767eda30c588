"""Preemptive replies: the brain starts on the speculative transcript, before the endpoint.

The STT decodes the utterance at a short pause (``Transcript.speculative``); the final
usually reuses that decode word for word. The gateway starts the brain's turn on it at
once over ``Brain.Converse``: the reply's first tokens are being made while the endpointer
still waits out the silence. Nothing of it reaches the caller or TTS, and the brain runs
no tool and stores nothing, until the final transcript confirms the same words: then the
turn is committed and played as if it had started at the endpoint. Other words, a new
speculative decode, or the caller speaking on: it is discarded (the call is cancelled).
"""

from __future__ import annotations

import asyncio
import re
import time

from voicebot.gateway.metrics import PREEMPTIVE
from voicebot.v1 import brain_pb2


def same_words(a: str, b: str) -> bool:
    def words(text: str) -> list[str]:
        return re.sub(r"[^\w']+", " ", text.lower()).split()

    return words(a) == words(b)


class EarlyReply:
    """One brain turn started before the endpoint; ``commit`` hands its call to the turn."""

    def __init__(self, stub, request: brain_pb2.RespondRequest, utterance: int, timeout_s: float,
                 metadata) -> None:
        self.request = request
        self.utterance = utterance
        self.started_at = time.perf_counter()
        self._commit = asyncio.Event()
        self.call = stub.Converse(self._requests(), timeout=timeout_s, metadata=metadata)
        PREEMPTIVE.labels("started").inc()

    @property
    def turn_id(self) -> str:
        return self.request.turn_id

    async def _requests(self):
        yield brain_pb2.ConverseRequest(start=self.request)
        await self._commit.wait()
        yield brain_pb2.ConverseRequest(commit=brain_pb2.Commit())

    def matches(self, utterance: int, text: str) -> bool:
        return utterance == self.utterance and same_words(text, self.request.text)

    def commit(self):
        """The endpoint heard the same words: the turn runs on this call from here."""
        self._commit.set()
        PREEMPTIVE.labels("committed").inc()
        return self.call

    def discard(self) -> None:
        self.call.cancel()
        PREEMPTIVE.labels("discarded").inc()
