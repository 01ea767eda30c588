"""Prefill while the caller is still speaking.

At the endpoint the LLM server must read every token of the prompt it has not cached yet: the
caller's words, the chat template around them and, with the guard on, the guard's copy of the
same words. On two CPU cores that is the largest part of the time to the first token. The
words are known before the endpoint, though, as interim transcripts: the gateway sends them
here (``Brain.Prefill``), and the LLM server gets the prompt a turn on those words would send,
with ``max_tokens=1``. When the turn comes, its prompt starts with the same tokens up to the
last word or two, and only those are new.

A prefill runs nothing and stores nothing; the latest words of a session replace an earlier
prefill, the session's turn cancels it (it must never delay a real turn), and at most
``max_in_flight`` run at once across sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

from redis.exceptions import RedisError

from voicebot.brain.llm import LLMRequestError, LLMUnavailable
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (user_id, session_id)


def key_of(request: brain_pb2.RespondRequest) -> Key:
    return request.user_id, request.session_id


class WordsPrefill:
    def __init__(self, prime: Callable[[brain_pb2.RespondRequest], Awaitable[None]],
                 max_in_flight: int) -> None:
        self._prime = prime
        self.max_in_flight = max_in_flight
        self._tasks: dict[Key, asyncio.Task] = {}
        self._turns: dict[Key, int] = {}  # sessions with a turn running (a preemptive one counts)

    def start(self, request: brain_pb2.RespondRequest) -> bool:
        """Prefill for these words in the background; False when nothing was started."""
        key = key_of(request)
        if self.max_in_flight <= 0 or key in self._turns:
            return False
        self.cancel(key)  # the newer words replace the older ones
        if len(self._tasks) >= self.max_in_flight:
            return False
        task = asyncio.create_task(self._run(request))
        self._tasks[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))
        return True

    def cancel(self, key: Key) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    @contextlib.contextmanager
    def turn(self, key: Key) -> Iterator[None]:
        """While a turn of the session runs: its prefill is cancelled and no new one starts."""
        self.cancel(key)
        self._turns[key] = self._turns.get(key, 0) + 1
        try:
            yield
        finally:
            self._turns[key] -= 1
            if not self._turns[key]:
                del self._turns[key]

    async def _run(self, request: brain_pb2.RespondRequest) -> None:
        try:
            await self._prime(request)
        except (LLMUnavailable, LLMRequestError, RedisError, TimeoutError) as exc:
            # A failed prefill costs only the time it would have saved.
            log.info("prefill on the caller's words failed", extra={"error": repr(exc)})

    def _forget(self, key: Key, task: asyncio.Task) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
