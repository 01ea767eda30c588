"""Retrieval started on the speculative (partial) transcript, awaited by the final one's search."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict

from voicebot.brain.business.knowledge_store import KnowledgeIndex
from voicebot.brain.business.passages import Passage

log = logging.getLogger(__name__)

_NOT_WORD = re.compile(r"[^\w\s]")


def normalise(text: str) -> str:
    """What a partial and a final transcript of the same words have in common."""
    return " ".join(_NOT_WORD.sub("", text.casefold()).split())


class Prefetcher(KnowledgeIndex):
    """An index that can start searching on the speculative transcript.

    ``prefetch`` starts a search and keeps its task under the normalised text; ``search`` for
    the same words awaits that task (or takes its result) rather than encoding again. The last
    ``size`` searches are kept. A prefetch that failed or was cancelled is searched again.
    """

    def __init__(self, index: KnowledgeIndex, size: int = 32) -> None:
        self.index = index
        self.size = size
        self._tasks: OrderedDict[tuple[str, int | None], asyncio.Task[list[Passage]]] = OrderedDict()
        self._running: set[asyncio.Task[list[Passage]]] = set()  # evicted ones too, until done

    def prefetch(self, text: str, k: int | None = None) -> None:
        """Starts the search for these words unless it is running or done; returns at once."""
        key = (normalise(text), k)
        if key[0] and key not in self._tasks:
            self._start(key, text, k)
        elif key in self._tasks:
            self._tasks.move_to_end(key)

    async def search(self, text: str, k: int | None = None) -> list[Passage]:
        key = (normalise(text), k)
        if not key[0]:
            return []
        task = self._tasks.get(key)
        if task is not None:
            self._tasks.move_to_end(key)
            found = await self._outcome(task)
            if found is not None:
                return list(found)  # a copy: the kept result is shared by every search for it
        # Shielded: a caller cancelled mid-search (barge-in) leaves the result for the next one.
        return list(await asyncio.shield(self._start(key, text, k)))

    async def aclose(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        self._tasks.clear()
        await self.index.aclose()

    def _start(self, key: tuple[str, int | None], text: str, k: int | None) -> asyncio.Task[list[Passage]]:
        task = asyncio.create_task(self.index.search(text, k), name=f"knowledge search {key[0][:40]!r}")
        self._tasks[key] = task
        self._tasks.move_to_end(key)
        while len(self._tasks) > self.size:
            self._tasks.popitem(last=False)
        self._running.add(task)
        task.add_done_callback(lambda done: self._finished(key, done))
        return task

    def _finished(self, key: tuple[str, int | None], task: asyncio.Task[list[Passage]]) -> None:
        self._running.discard(task)
        failed = task.cancelled() or task.exception() is not None  # retrieved: no "never retrieved"
        if failed and self._tasks.get(key) is task:
            del self._tasks[key]  # the next search for these words starts afresh

    @staticmethod
    async def _outcome(task: asyncio.Task[list[Passage]]) -> list[Passage] | None:
        """The task's passages, or None when it failed or was cancelled (not us)."""
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                return None
            raise  # this search itself was cancelled
        except Exception as exc:  # noqa: BLE001 -- a failed prefetch is only a missed head start
            log.warning("knowledge prefetch failed (%s); searching again", exc)
            return None
