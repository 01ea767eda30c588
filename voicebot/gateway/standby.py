"""The brain's and TTS's calls for a turn, opened while the caller is still speaking.

Opening a gRPC call costs more than a message on an open one: HTTP/2 headers, then on the
server a new call accepted, its token checked, its handler started: ``make bench-gateway``
measured a new call at about twice a message on an open stream, on the turn's critical path
(its former ``no-standby`` variant). So when STT says speech started,
the gateway opens the two calls the utterance's turn will need (``Brain.Converse`` and the
TTS stream), each waiting for its first message; at the endpoint only messages move: the
turn's request, committed at once, and its texts.

A standby belongs to one utterance: it carries that utterance's trace context (its ``turn``
span), so an utterance that makes no turn (no words, a false start) cancels it, and the next
utterance opens its own. A turn takes it only while it is young enough for its deadline to
cover a whole turn after it (``MAX_AGE_S``) and both calls are still open (an upstream that
restarted ended them, or one that is draining: ``IdleCalls`` in voicebot/common/grpc_server.py);
otherwise the turn opens fresh calls as before. Cancelled with the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from voicebot.v1 import brain_pb2

# An utterance longer than this gets fresh calls at its endpoint; the standby's deadline is the
# turn's plus this, so a turn on a standby always has at least its whole timeout.
MAX_AGE_S = 60.0


async def _requests_from(source: asyncio.Future[AsyncIterator[Any]], first: Any = None
                         ) -> AsyncIterator[Any]:
    """A call's request iterator whose messages are given later: the call opens now (with
    ``first`` sent at once, when given), and the rest go when ``source`` is set (never, if the
    call is cancelled first)."""
    if first is not None:
        yield first
    async for request in await source:
        yield request


async def committed_turn(request: brain_pb2.RespondRequest) -> AsyncIterator[brain_pb2.ConverseRequest]:
    """The turn at the endpoint on ``Brain.Converse``: started and committed at once, so the
    brain runs it as ``Respond`` would (brain/server.py). The start says so itself, and the
    brain reads nothing more of the call (a measurable share of its CPU a turn); the commit message behind it
    is for a brain older than that field, during a rolling upgrade."""
    yield brain_pb2.ConverseRequest(start=request, committed=True)
    yield brain_pb2.ConverseRequest(commit=brain_pb2.Commit())


class StandbyCalls:
    def __init__(self, upstreams: Any, turn_timeout_s: float, metadata: tuple[tuple[str, str], ...],
                 clock: Callable[[], float] = time.monotonic,
                 read_ahead: brain_pb2.Prepare | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._clock = clock
        self.opened_at = clock()
        self._brain_requests: asyncio.Future[AsyncIterator[Any]] = loop.create_future()
        self._tts_requests: asyncio.Future[AsyncIterator[Any]] = loop.create_future()
        timeout = turn_timeout_s + MAX_AGE_S
        # ``read_ahead``: the brain reads the session now, not at the endpoint (only when no
        # earlier turn can still be writing it: ``Call._history_settled``).
        self.read_ahead = read_ahead is not None
        prepare = brain_pb2.ConverseRequest(prepare=read_ahead) if read_ahead is not None else None
        self.brain = upstreams.brain.Converse(_requests_from(self._brain_requests, prepare),
                                              timeout=timeout, metadata=metadata)
        self.tts = upstreams.tts.StreamingSynthesize(_requests_from(self._tts_requests), timeout=timeout,
                                                     metadata=metadata)

    def usable(self) -> bool:
        """Young enough, and neither upstream has ended its call (a restart, a refusal)."""
        return (self._clock() - self.opened_at < MAX_AGE_S
                and not self.brain.done() and not self.tts.done())

    def start_brain(self, request: brain_pb2.RespondRequest):
        """The turn's brain call: ``request`` goes down the open Converse call, committed."""
        self._brain_requests.set_result(committed_turn(request))
        return self.brain

    def release_brain(self) -> None:
        """The turn got its brain call elsewhere (a preemptive reply): the open one is cancelled."""
        self.brain.cancel()

    def start_tts(self, requests: AsyncIterator[Any]):
        """The turn's TTS call: ``requests`` (config first, then texts) go down the open stream."""
        self._tts_requests.set_result(requests)
        return self.tts

    def cancel(self) -> None:
        """Both calls end (a call that already ended is left as it is)."""
        self.brain.cancel()
        self.tts.cancel()
