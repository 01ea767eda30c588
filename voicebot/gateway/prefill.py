"""The caller's words so far, sent to ``Brain.Prefill`` while they are still speaking.

Each interim transcript is what the turn will most likely start with; the brain has the LLM
server cache the prompt a turn on those words would send (voicebot/brain/runtime/prefill.py), so at
the endpoint only the last words are new to it. One call in flight per call: words that arrive
meanwhile wait for it, and only the newest of them is sent. It is an optimisation only: a
refused or failed prefill is logged at debug level and the turn goes on as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc

from voicebot.common.telemetry import outgoing_metadata
from voicebot.gateway.metrics import PREFILLS
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)
TIMEOUT_S = 2.0  # the brain answers at once; the work runs in its background


class WordsPrefiller:
    def __init__(self, upstreams) -> None:
        self.upstreams = upstreams  # its brain stub is looked up per call
        self._task: asyncio.Task | None = None
        self._next: brain_pb2.RespondRequest | None = None

    def send(self, request: brain_pb2.RespondRequest) -> None:
        if self._task is not None and not self._task.done():
            self._next = request  # the newest words replace any that were waiting
            return
        self._task = asyncio.create_task(self._run(request))

    async def _run(self, request: brain_pb2.RespondRequest | None) -> None:
        while request is not None:
            try:
                result = await self.upstreams.brain.Prefill(request, timeout=TIMEOUT_S,
                                                            metadata=outgoing_metadata())
                PREFILLS.labels("started" if result.started else "refused").inc()
            except grpc.aio.AioRpcError as exc:
                PREFILLS.labels("failed").inc()
                log.debug("prefill failed", extra={"code": exc.code().name})
            request, self._next = self._next, None

    async def close(self) -> None:
        self._next = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
