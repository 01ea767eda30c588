"""The gate between a turn's dialogue and the caller: the urgent check, the topic guard, and the
merged stream of events.

The dialogue's events are held back until the gate passes: the urgent check first (an urgent
situation's sentence is then the whole reply, whatever the guard would say), then the guard's
verdict (a block cancels the turn and speaks a fixed sentence). Events already waiting go out
together (``join_deltas``).
"""


from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

from redis.exceptions import RedisError

from voicebot.brain.decide.decisions import Urgent, name_of
from voicebot.brain.decide.state import SessionState
from voicebot.brain.metrics import (
    GUARD_BLOCKS,
    HANDOFFS,
    URGENT_TURNS,
)
from voicebot.brain.read.dialog import handoff_summary, is_dialogue_act
from voicebot.brain.read.guard import GuardVerdict
from voicebot.brain.read.urgent import UrgentScreen
from voicebot.brain.runtime.session_store import Turn
from voicebot.brain.runtime.turn_run import TurnRun
from voicebot.brain.speak.readback import sentence
from voicebot.common.metrics import REDIS_ERRORS
from voicebot.common.speech_text import speakable
from voicebot.common.telemetry import tracer
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)
TRACER = tracer("voicebot.brain")
_END = object()  # the dialogue's last event
URGENT = "urgent"  # the gate's verdict "by" for an urgent situation (``_urgent_first``)


class TurnGate:
    """The urgent check and the guard's race with the dialogue, for ``SessionRuntime``."""

    sentences: Any
    store: Any
    urgent: UrgentScreen | None
    profile: Any

    def sentences_in(self, language: str) -> Any:
        raise NotImplementedError  # the session runtime's: the business's sentences in a language

    def still_asked_in(self, language: str, state: SessionState) -> str:
        raise NotImplementedError  # the session runtime's: the read-back or question not answered

    def language_of(self, asked: str) -> str:
        """A turn's language: the session's, where the profile names it; else the profile's
        first (the gateway refuses a session's language the profile does not name)."""
        code = (asked or "").lower().replace("_", "-").split("-")[0]
        languages = self.profile.languages
        return code if code in languages else languages[0]

    async def _store_blocked(self, turn: TurnRun) -> None:
        """Nothing the blocked turn made is stored, and its state changes are dropped; but the
        exchange itself is: a read-back said again after the block is the one a yes answers."""
        request = turn.request
        said = Turn(request.turn_id, request.text, turn.record["reply"])  # as ``_blocked`` said it
        read_back = turn.state_before.pending if turn.state_before is not None else None

        def blocked(history: Any) -> None:
            history.turns.append(said)
            pending = history.state.pending
            if read_back is not None and pending is not None and pending.action == read_back.action:
                history.state.read_back(request.turn_id)  # ``_blocked`` read it back again

        try:
            await self.store.update(request.user_id, request.session_id, blocked,
                                    lease=turn.lease, release=True)
        except RedisError as exc:
            REDIS_ERRORS.labels("brain").inc()
            log.error("could not store the blocked turn", extra={"error": repr(exc)})
            return

    def _skips_guard(self, turn: TurnRun) -> bool:
        """Short dialogue acts (yes, no, a number, a name, a change with a value) are never
        screened: the model never speaks, so such words cannot steer it anywhere, and a bare "No."
        is never off-topic, in a task or not (a blocked "No." told the caller off)."""
        return is_dialogue_act(turn.request.text, turn.language)

    async def _merge(self, turn: TurnRun, main: asyncio.Task, guard: asyncio.Task | None,
                     passed: asyncio.Event, events: asyncio.Queue) -> AsyncIterator[brain_pb2.RespondEvent]:
        """Yield the main loop's events, held back until the guard passes (``guard``: its task,
        or ``_confirmed``'s, which also waits for a read made ahead to be confirmed)."""
        held: list[brain_pb2.RespondEvent] = []
        ended = False
        getter: asyncio.Task | None = None
        try:
            while not (ended and passed.is_set()):
                if getter is None and passed.is_set():
                    # Only the queue to wait for: read directly, not through a task and an
                    # ``asyncio.wait`` of their own for every event (CPU on every turn's path).
                    first = await events.get()
                else:
                    waiting: set[asyncio.Task] = set()
                    if not ended:
                        getter = getter or asyncio.create_task(events.get())
                        waiting.add(getter)
                    if guard is not None and not passed.is_set():
                        waiting.add(guard)
                    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                    if guard in done and not passed.is_set():
                        for event in self._verdict_given(turn, guard.result(), main, passed, held):
                            yield event
                        if not passed.is_set():
                            return  # blocked
                    if getter is None or getter not in done:
                        continue
                    first, getter = getter.result(), None
                for item in join_deltas(_with_queued(first, events)):
                    if item is _END:
                        ended = True
                    elif isinstance(item, BaseException):
                        raise item
                    elif passed.is_set():
                        yield item
                    else:
                        held.append(item)
        finally:
            if getter is not None:
                getter.cancel()

    def _verdict_given(self, turn: TurnRun, verdict: GuardVerdict | None, main: asyncio.Task,
                       passed: asyncio.Event, held: list[brain_pb2.RespondEvent]
                       ) -> Iterator[brain_pb2.RespondEvent]:
        """The guard's verdict on a turn whose text it held: the block (and the turn's main loop
        cancelled), or ``passed`` set and the held text released. None: no guard was asked (the
        read made ahead is confirmed)."""
        if verdict is not None and verdict.by == URGENT:
            main.cancel()
            yield self._urgent_reply(turn)
            return
        if verdict is not None:
            turn.record["guard"] = {"allowed": verdict.allowed, "reason": verdict.reason,
                                    "by": verdict.by, "ms": round(verdict.seconds * 1000)}
            if not verdict.allowed:
                main.cancel()
                yield self._blocked(turn, verdict)
                return
        passed.set()
        yield from join_deltas(held)
        held.clear()

    async def _urgent_first(self, turn: TurnRun, guard: asyncio.Task | None) -> GuardVerdict | None:
        """The turn's gate with an urgent check: an urgent situation is the verdict (the guard is
        not waited for); otherwise the guard's verdict, as without one."""
        assert self.urgent is not None
        turn.urgent_checked.clear()
        try:
            check = await self.urgent.check(turn.request.text)
        finally:
            turn.urgent_checked.set()
        turn.record["urgent"] = check.record
        if check.urgent:
            if guard is not None:
                guard.cancel()
            situation = check.situation
            turn.urgent = Urgent(situation.name, situation.say, situation.handoff)
            return GuardVerdict(False, f"urgent: {check.situation.name}", check.ms / 1000, by=URGENT)
        return await guard if guard is not None else None

    def _urgent_reply(self, turn: TurnRun) -> brain_pb2.RespondEvent:
        """The situation's sentence is the whole reply; whatever the turn's own work changed of
        the state is dropped, and nothing read back before it may run on a later yes."""
        urgent = turn.urgent
        assert urgent is not None
        URGENT_TURNS.labels(urgent.situation).inc()
        log.warning("urgent situation recognised", extra={"turn_id": turn.request.turn_id,
                                                          "situation": urgent.situation})
        if turn.state_before is not None:
            turn.history.state = turn.state_before
        turn.state.drop_pending()
        text = speakable(urgent.text, turn.language)
        turn.spoken = [text]
        turn.record["decision"] = name_of(urgent)
        return brain_pb2.RespondEvent(turn_id=turn.request.turn_id, delta=brain_pb2.TextDelta(text=text))

    def _urgent_handoff(self, turn: TurnRun) -> brain_pb2.RespondEvent:
        assert turn.urgent is not None
        reason = f"urgent_{turn.urgent.situation}"
        summary = handoff_summary(turn.state, reason)
        turn.state.handed_off()
        HANDOFFS.labels(reason).inc()
        turn.record["handoff"] = {"reason": reason, "summary": summary}
        return brain_pb2.RespondEvent(turn_id=turn.request.turn_id, handoff=brain_pb2.Handoff(
            reason=reason, summary=summary))

    def _blocked(self, turn: TurnRun, verdict: GuardVerdict) -> brain_pb2.RespondEvent:
        """The guard's fixed sentence, then what the caller was asked and has not answered: the
        read-back (the caller's next yes then answers it) or the form's question."""
        GUARD_BLOCKS.inc()
        log.info("turn blocked by the topic guard", extra={"turn_id": turn.request.turn_id,
                                                           "reason": verdict.reason})
        blocked = self.sentences_in(turn.language).blocked
        before = turn.state_before
        if before is not None and (again := self.still_asked_in(turn.language, before)):
            blocked = speakable(f"{blocked} {sentence(again)}", turn.language)
        turn.record["reply"] = blocked
        return brain_pb2.RespondEvent(turn_id=turn.request.turn_id, blocked=brain_pb2.Blocked(
            text=blocked, reason="off_topic"))


def _with_queued(first: Any, queue: asyncio.Queue) -> list[Any]:
    """``first`` and everything queued behind it (taken without waiting)."""
    items = [first]
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def _is_delta(item: Any) -> bool:
    return isinstance(item, brain_pb2.RespondEvent) and item.WhichOneof("event") == "delta"


def join_deltas(items: list[Any]) -> list[Any]:
    """Text deltas that are already waiting go out as one message (order kept, nothing else
    merged). Nothing waits to be merged: a delta goes out as soon as the stream takes it, and
    the words the model made meanwhile follow together (an instant model's reply was one gRPC
    message per word, brain -> gateway -> TTS)."""
    out: list[Any] = []
    for item in items:
        if out and _is_delta(item) and _is_delta(out[-1]):
            out[-1].delta.text += item.delta.text
        else:
            out.append(item)
    return out
