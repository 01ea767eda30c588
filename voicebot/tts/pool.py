"""A bounded pool of synthesis threads that runs the most urgent phrase first.

Each job carries a deadline: when its audio will be needed. A call that has
produced nothing yet needs its next phrase now; a call that is already
seconds ahead of its listener can wait. A plain FIFO pool would make a new
call's first phrase queue behind every phrase other calls asked for; here it
waits only for the renders already running (at most one per worker).

Cancelling the awaiting coroutine cancels a job that has not started; one
that is running is the job's to stop (the TTS server sets its call's
``RenderStop``, which terminates the ONNX run) or to finish, and its result
is dropped.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlinePool:
    def __init__(self, workers: int, name: str = "tts-synth") -> None:
        self._heap: list[tuple[float, int, Future, Callable[[], Any]]] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for thread in self._threads:
            thread.start()

    async def run(self, deadline: float, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on a worker, earliest deadline first (``time.perf_counter()`` units)."""
        future: Future = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the synthesis pool is shut down")
            heapq.heappush(self._heap, (deadline, next(self._order), future, lambda: fn(*args)))
            self._ready.notify()
        # wrap_future cancels the concurrent future when the awaiting task is cancelled.
        return await asyncio.wrap_future(future)

    def queued(self) -> int:
        with self._ready:
            return len(self._heap)

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._heap and not self._closed:
                    self._ready.wait()
                if self._closed and not self._heap:
                    return
                _deadline, _order, future, job = heapq.heappop(self._heap)
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            try:
                future.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Drop queued jobs and let the workers end after their current phrase."""
        with self._ready:
            self._closed = True
            for _deadline, _order, future, _job in self._heap:
                future.cancel()
            self._heap.clear()
            self._ready.notify_all()
