"""The brain's turn: one caller's words in, code's reply streamed out.

Per turn:
1. The topic guard starts together with the turn (unless the caller's words are
   a short dialogue act inside an ongoing task: a yes, a no, a number, a name).
   Until it passes, text is held back and tools wait; if it blocks, the turn is
   cancelled, nothing is stored and a fixed sentence is spoken.
2. Code decides everything (``conversation.py``): the answer to a read-back, the
   reading of the words (rules, embeddings, the model under a JSON schema), the
   task's next question, the finder's lookup, the read-back, the confirmed write.
   The model only reads; nothing it writes is spoken or run.
3. A question is answered from the business's knowledge only (``answers.py``).
4. Only a completed turn is written to history (a cancelled one stores nothing),
   and every turn leaves a record of its decision, reading and tools.
5. One turn at a time per session, across replicas: a turn holds the session's lease
   from its read to its store (``session_lease.py``), and a confirmed write holds it
   until its outcome is stored, so a turn spoken over the write starts from that
   outcome and tells it first (``_compose``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from voicebot.brain.actions import Actions, WriteOutcome
from voicebot.brain.answers import Answers, KnowledgeSearch
from voicebot.brain.config import BrainSettings
from voicebot.brain.conversation import Conversation, Decision
from voicebot.brain.dialog import handoff_summary, is_dialogue_act
from voicebot.brain.form import Forms, ReadTool
from voicebot.brain.guard import GuardVerdict, TopicGuard
from voicebot.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable
from voicebot.brain.metrics import (
    GUARD_BLOCKS,
    HANDOFFS,
    KNOWLEDGE_ANSWERS,
    LLM_FALLBACKS,
    LLM_TTFT_SECONDS,
    READINGS,
    URGENT_TURNS,
)
from voicebot.brain.prefill import WordsPrefill, key_of
from voicebot.brain.profile import Profile
from voicebot.brain.reading import IntentPicker, Reader, intent_examples
from voicebot.brain.references import References
from voicebot.brain.refusals import is_refusal
from voicebot.brain.sentence_encoder import SentenceEncoder
from voicebot.brain.session_lease import Lease, SessionBusy
from voicebot.brain.session_store import ReadAhead, SessionHistory, SessionStore, Turn
from voicebot.brain.spoken import SpokenTextCleaner
from voicebot.brain.state import FormState, Outcome, PendingAction, SessionState
from voicebot.brain.tasks import TaskError, build_tasks
from voicebot.brain.toolcalls import ToolCall, new_call_id
from voicebot.brain.tools import Dispatcher, ToolContext, ToolKind, ToolRegistry, ToolResult
from voicebot.brain.urgent import UrgentCheck, UrgentScreen
from voicebot.common.metrics import REDIS_ERRORS
from voicebot.common.speech_text import speakable
from voicebot.common.telemetry import tracer
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)
TRACER = tracer("voicebot.brain")
_END = object()
URGENT = "urgent"  # the gate's verdict "by" for an urgent situation (``Agent._urgent_first``)


class StaleRead(Exception):
    """The session read ahead is older than what Redis holds now (``Agent._confirmed``)."""


@dataclass
class TurnRun:
    """Scratch state of one turn, and its record."""

    request: brain_pb2.RespondRequest
    history: SessionHistory
    started: float
    spoken: list[str] = field(default_factory=list)
    fallback: bool = False
    first_text_at: float | None = None
    record: dict[str, Any] = field(default_factory=dict)
    # Cleared while the topic guard's screen judges the words; set again once it passed them or
    # the guard's LLM call is on its way. The turn's model reading waits for it (``Agent._respond``).
    guard_asked: asyncio.Event = field(default_factory=lambda: _set(asyncio.Event()))
    # The session's lease (session_lease.py): taken with the read, or by ``_confirmed`` for a
    # read made ahead.
    lease: Lease | None = None
    # A write's outcome the caller has not heard yet: this reply says it first (``_compose``).
    preface: str = ""
    # The task that write finished: the caller's words may change it (a new read-back).
    finished: FormState | None = None
    # An urgent situation the profile names, recognised in the words (``urgent.py``): its
    # sentence is the reply, and the state is the one the turn started from.
    urgent: UrgentCheck | None = None
    state_before: SessionState | None = None

    @property
    def state(self) -> SessionState:
        return self.history.state

    def reply(self) -> str:
        return "".join(self.spoken).strip()

    def last_turn(self) -> Turn | None:
        return self.history.turns[-1] if self.history.turns else None


class Agent:
    def __init__(
        self,
        settings: BrainSettings,
        chat: ChatFunction,
        store: SessionStore,
        tools: ToolRegistry | None = None,
        guard: TopicGuard | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        profile: Profile | None = None,
        side_chat: ChatFunction | None = None,
        knowledge: KnowledgeSearch | None = None,
        encoder: SentenceEncoder | None = None,
        today: Callable[[], datetime.date] = datetime.date.today,
    ) -> None:
        self.settings = settings
        self.profile = profile or Profile()
        self.sentences = self.profile.sentences
        self.chat = chat
        # Short side calls, on a slot of their own where the server has slots.
        self.side_chat = side_chat or chat
        self.store = store
        self.references = References(self.profile.references, self.profile.hidden_fields)
        self.tools = tools or ToolRegistry()
        self.dispatcher = Dispatcher(self.tools, sleep)
        self.actions = Actions(self.dispatcher, self.references, self.sentences, store)
        self.guard = guard
        self.clock = clock
        tasks = build_tasks(self.profile, self.tools)
        self.forms = Forms(tasks, self.sentences, self.references, today,
                           {spec.name: spec.errors for spec in self.tools.specs() if spec.errors})
        picker = IntentPicker(encoder, intent_examples(self.profile, tasks)) if encoder else None
        self.reader = Reader(chat, tasks, f"{self.profile.name}, {self.profile.purpose}", picker,
                             settings.reading_timeout_s, settings.llm_model)
        self.answers = Answers(knowledge, self.sentences, lambda: self.conversation.can_help(),
                               knowledge_tools(self.profile, self.tools), self.profile.knowledge.min_score)
        self.conversation = Conversation(self.profile, self.forms, self.reader, self.answers, today)
        self.urgent = urgent_screen(self.profile, encoder, self.side_chat, settings.urgent_timeout_s)
        self.words_prefill = WordsPrefill(self._prime_words, settings.prefill_on_words_max)
        self._background: set[asyncio.Task] = set()

    async def warm_up(self) -> None:
        """Prefill the fixed start of every prompt (instructions and tool definitions) and the
        guard's prompt once at start, so the first caller does not pay a cold prefill
        (seconds on a CPU); the LLM server's prompt cache keeps them."""
        started = time.perf_counter()
        messages = [{"role": "system", "content": self.reader.system_prompt()},
                    {"role": "user", "content": "The caller said: Hello."}]
        warmed = await self._warm("the reading prompt", lambda: self._prime(messages))
        if self.guard is not None:
            warmed = await self._warm("the guard's prompt", self.guard.warm) and warmed
        if warmed:
            log.info("LLM prompt cache warmed", extra={"seconds": round(time.perf_counter() - started, 2)})

    @staticmethod
    async def _warm(what: str, prime: Callable[[], Awaitable[Any]], attempts: int = 3) -> bool:
        """On a few CPU cores the packaged model's prompt start can take longer to prefill than
        the client's first-token timeout; the server finishes and caches it all the same, so the
        next attempt is answered once it is done (and the guard is still warmed after it)."""
        error: Exception | None = None
        for _ in range(attempts):
            try:
                await prime()
                return True
            except (LLMUnavailable, LLMRequestError) as exc:
                error = exc
        log.warning("LLM warm-up failed; the first turn will be slower",
                    extra={"prompt": what, "error": str(error)})
        return False

    # ---- the turn ------------------------------------------------------
    def read_ahead(self, user_id: str, session_id: str) -> ReadAhead:
        """The session read now, for a turn that will start on the same call (``respond``'s
        ``ahead``) once the caller stops speaking."""
        return ReadAhead(self.store, user_id, session_id)

    async def respond(self, request: brain_pb2.RespondRequest, committed: asyncio.Event | None = None,
                      ahead: ReadAhead | None = None) -> AsyncIterator[brain_pb2.RespondEvent]:
        """One turn. ``committed``: a turn started before the endpoint (preemptive) streams its
        text at once, but its tools and writes wait, and nothing is stored, until it is set.
        ``ahead``: the session as read while the caller spoke, used when it is this session's."""
        with self.words_prefill.turn(key_of(request)):  # a prefill never competes with the turn
            try:
                try:
                    async for event in self._respond(request, committed, ahead):
                        yield event
                except StaleRead:
                    # Another connection of the session wrote it after the read ahead. Nothing the
                    # turn made has left the brain and no tool ran: it starts again on a fresh read.
                    async for event in self._respond(request, committed, None):
                        yield event
            except SessionBusy:
                # Raised only before anything of the turn left the brain (taking the lease).
                for event in self._busy(request):
                    yield event

    def _busy(self, request: brain_pb2.RespondRequest) -> Iterator[brain_pb2.RespondEvent]:
        """The session stayed held past ``session_wait_s`` (a write still running): nothing is
        decided on a state that is about to change; the caller is asked to wait."""
        log.warning("session busy past the wait; asking the caller to hold on",
                    extra={"turn_id": request.turn_id, "wait_s": self.settings.session_wait_s})
        text = self.sentences.still_working
        yield brain_pb2.RespondEvent(turn_id=request.turn_id, delta=brain_pb2.TextDelta(text=text))
        yield brain_pb2.RespondEvent(turn_id=request.turn_id, final=brain_pb2.Final(
            text=text, dialog_state="listen", fallback=True))

    async def _respond(self, request: brain_pb2.RespondRequest, committed: asyncio.Event | None,
                       ahead: ReadAhead | None) -> AsyncIterator[brain_pb2.RespondEvent]:
        if committed is None:
            committed = asyncio.Event()
            committed.set()
        try:
            history, unconfirmed, lease = await self._load(request, ahead)
        except (TimeoutError, RedisError) as exc:
            # Without the session's state nothing may be decided (a pending action, a yes): the
            # caller hears the fallback now rather than silence while Redis retries.
            REDIS_ERRORS.labels("brain").inc()
            log.error("session history unavailable; speaking the fallback", extra={"error": repr(exc)})
            yield brain_pb2.RespondEvent(turn_id=request.turn_id, delta=brain_pb2.TextDelta(
                text=self.sentences.fallback))
            yield brain_pb2.RespondEvent(turn_id=request.turn_id, final=brain_pb2.Final(
                text=self.sentences.fallback, dialog_state="listen", fallback=True))
            return
        history.state.start_turn()
        turn = TurnRun(request, history, self.clock(), record={
            "turn_id": request.turn_id, "text": request.text, "llm_calls": [], "tools": []},
            lease=lease)
        self._compose(turn)
        events: asyncio.Queue = asyncio.Queue()
        passed = asyncio.Event()
        guard = None
        if self.urgent is not None:
            turn.state_before = turn.state.model_copy(deep=True)
        if self.guard is not None and not self._skips_guard(turn):
            # The turn's model reading waits for the screen (a few ms; ``guard_screen_first``):
            # when the LLM must judge, the guard's call reaches the LLM server first and the two
            # prefill in one batch, rather than the guard's behind the reading's.
            if self.settings.guard_screen_first:
                turn.guard_asked.clear()
            guard = asyncio.create_task(self.guard.check(request.text, request.language,
                                                         asking=turn.guard_asked.set))
            guard.add_done_callback(lambda _: turn.guard_asked.set())
        elif self.guard is not None:
            turn.record["guard"] = {"allowed": True, "reason": "dialogue act in an ongoing task"}
        if self.urgent is not None:
            # Before anything else: the urgent check's verdict comes first, the guard's after it.
            guard = asyncio.create_task(self._urgent_first(turn, guard))
        if guard is None and not unconfirmed:
            passed.set()
        cleared = asyncio.Event()  # the guard passed and the turn is committed: tools may run
        clearing = asyncio.create_task(self._clear(turn, passed, committed, cleared))
        main = asyncio.create_task(self._main(turn, cleared, events))
        gate = guard
        if unconfirmed:
            # Read ahead: what the turn makes is held and no tool runs until Redis confirms the
            # read is current, as for the guard's verdict. Made after the turn's task, so the
            # model's call goes out first: the check need only be done before the first text.
            gate = asyncio.create_task(self._confirmed(turn, history, guard))
        recorded = False
        try:
            try:
                async for event in self._merge(turn, main, gate, passed, events):
                    yield event
            except StaleRead:
                recorded = True  # nothing of this start happened: ``respond`` runs the turn again
                raise
            await committed.wait()  # a preemptive turn stores nothing before its commit
            if turn.urgent is not None:
                outcome = "urgent"
                final, recorded = await self._finish(turn, outcome)
                if turn.urgent.situation is not None and turn.urgent.situation.handoff:
                    yield self._urgent_handoff(turn)
            elif turn.record.get("guard", {}).get("allowed") is False:
                outcome = "blocked"
                await self._store_blocked(turn)
            else:
                outcome = "fallback" if turn.fallback else "completed"
                final, recorded = await self._finish(turn, outcome)
            if not recorded:
                recorded = True
                await self._store_record(turn, outcome)
            if outcome != "blocked":
                yield final
        finally:
            for task in (main, gate, guard, clearing):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            if turn.lease is not None:  # a write still running keeps it (``_execute``)
                self.store.leases.let_go(turn.lease)
            if not recorded:
                # Cancelled (barge-in) or failed: recorded in the background, the turn is gone.
                self._background_record(turn, "cancelled")

    async def _clear(self, turn: TurnRun, passed: asyncio.Event, committed: asyncio.Event,
                     cleared: asyncio.Event) -> None:
        await committed.wait()
        # How far ahead of its commit the turn started: a preemptive turn's head start on the
        # endpoint (a turn committed at once: ~0).
        turn.record["committed_ms"] = round((self.clock() - turn.started) * 1000)
        await passed.wait()
        cleared.set()

    async def _store_blocked(self, turn: TurnRun) -> None:
        """Nothing the blocked turn made is stored, and its state changes are dropped; but the
        exchange itself is, so a read-back before it no longer counts as "just heard"."""
        request = turn.request
        said = Turn(request.turn_id, request.text, self.sentences.blocked)
        try:
            await self.store.update(request.user_id, request.session_id, lambda h: h.turns.append(said),
                                    lease=turn.lease, release=True)
        except RedisError as exc:
            REDIS_ERRORS.labels("brain").inc()
            log.error("could not store the blocked turn", extra={"error": repr(exc)})
            return

    def _skips_guard(self, turn: TurnRun) -> bool:
        """Short dialogue acts (yes, no, a number, a name, a change with a value) are never
        screened: the model never speaks, so such words cannot steer it anywhere, and a bare "No."
        is never off-topic, in a task or not (a blocked "No." told the caller off)."""
        return is_dialogue_act(turn.request.text)

    async def _confirmed(self, turn: TurnRun, read: SessionHistory,
                         guard: asyncio.Task | None) -> GuardVerdict | None:
        """The guard's verdict (None: no guard asked) once the session's lease is taken and the
        session read ahead is confirmed current, in one step; StaleRead when it is not (or
        Redis cannot say: the fresh read will tell). SessionBusy: held past the wait."""
        request = turn.request
        try:
            turn.lease, current = await self.store.acquire_unchanged(
                request.user_id, request.session_id, read, self.settings.session_wait_s,
                self.settings.history_load_timeout_s)
        except (RedisError, TimeoutError):
            current = False
        if not current:
            raise StaleRead  # the guard's task is cancelled with the turn's others (``_respond``)
        return await guard if guard is not None else None

    async def _load(self, request: brain_pb2.RespondRequest, ahead: ReadAhead | None
                    ) -> tuple[SessionHistory, bool, Lease | None]:
        """The session's history, with what the caller heard of the last reply recorded first;
        whether it is a read made ahead that is yet to be confirmed current; and the session's
        lease, taken in the same step as the read (None for a read made ahead: ``_confirmed``
        takes it off the turn's path). A reply heard whole changes nothing: that is a plain
        read, not a read-modify-write that serialises the whole history to find nothing changed
        (on every turn's path). Each Redis step is bounded by ``history_load_timeout_s``; a
        session held by another turn is waited for up to ``session_wait_s``."""
        read = await ahead.history_for(request.user_id, request.session_id) if ahead else None
        previous = request.previous_reply
        heard = bool(previous.turn_id and previous.interrupted)
        if read is not None and not heard:
            return read, True, None
        user, session, step_s = request.user_id, request.session_id, self.settings.history_load_timeout_s
        if read is not None:
            lease, current = await self.store.acquire_unchanged(user, session, read,
                                                                self.settings.session_wait_s, step_s)
        else:
            lease, read = await self.store.acquire(user, session, self.settings.session_wait_s, step_s)
            current = True
        try:
            async with asyncio.timeout(step_s):  # a timeout scope: no task of its own per turn
                history = read if current else await self.store.load(user, session)
                if heard:
                    history = await self.store.update(user, session, _record_heard(previous),
                                                      read=history, lease=lease)
        except BaseException:
            self.store.leases.let_go(lease)
            raise
        return history, False, lease

    def _compose(self, turn: TurnRun) -> None:
        """What happened to the session's last write, on the state this turn starts from. A write
        stored as running while this turn holds the lease has nobody running it (its replica
        died, or its outcome could not be stored): its outcome is unknown. An outcome the caller
        has not heard (they spoke over the reply that said it, it was cancelled, or it played on
        another socket) is said first in this reply, which becomes the one that says it; the
        task it finished may be changed by this turn's words (a new read-back)."""
        state, turn_id = turn.state, turn.request.turn_id
        if state.running is not None:
            action = state.running
            state.outcome_unknown(f"unknown outcome (not stored): {action.action}")
            state.untold = Outcome(action_id=action.id, say=self.sentences.unknown_outcome, turn_id=turn_id)
        untold = state.untold
        if untold is None:
            return
        if self._heard(turn, untold):
            state.untold = None
            return
        untold.turn_id = turn_id
        turn.preface = untold.say
        turn.record["told"] = untold.action_id
        if untold.form is not None and state.pending is None and state.form is None:
            turn.finished = untold.form

    @staticmethod
    def _heard(turn: TurnRun, untold: Outcome) -> bool:
        """The reply that said it is the one this caller's line reports as its last (a resumed
        line reports none: it may never have played there), and what they heard of it holds
        the whole sentence."""
        if turn.request.previous_reply.turn_id != untold.turn_id:
            return False
        said = next((t for t in reversed(turn.history.turns) if t.turn_id == untold.turn_id), None)
        return said is not None and _said_in(untold.say, said.assistant)

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
        check = await self.urgent.check(turn.request.text)
        turn.record["urgent"] = check.record
        if check.urgent:
            if guard is not None:
                guard.cancel()
            turn.urgent = check
            return GuardVerdict(False, f"urgent: {check.situation.name}", check.ms / 1000, by=URGENT)
        return await guard if guard is not None else None

    def _urgent_reply(self, turn: TurnRun) -> brain_pb2.RespondEvent:
        """The situation's sentence is the whole reply; whatever the turn's own work changed of
        the state is dropped, and nothing read back before it may run on a later yes."""
        assert turn.urgent is not None and turn.urgent.situation is not None
        situation = turn.urgent.situation
        URGENT_TURNS.labels(situation.name).inc()
        log.warning("urgent situation recognised", extra={"turn_id": turn.request.turn_id,
                                                          "situation": situation.name})
        if turn.state_before is not None:
            turn.history.state = turn.state_before
        turn.state.drop_pending()
        text = speakable(situation.say)
        turn.spoken = [text]
        turn.record["decision"] = "urgent"
        return brain_pb2.RespondEvent(turn_id=turn.request.turn_id, delta=brain_pb2.TextDelta(text=text))

    def _urgent_handoff(self, turn: TurnRun) -> brain_pb2.RespondEvent:
        assert turn.urgent is not None and turn.urgent.situation is not None
        reason = f"urgent_{turn.urgent.situation.name}"
        summary = handoff_summary(turn.state, reason)
        turn.state.handed_off()
        HANDOFFS.labels(reason).inc()
        turn.record["handoff"] = {"reason": reason, "summary": summary}
        return brain_pb2.RespondEvent(turn_id=turn.request.turn_id, handoff=brain_pb2.Handoff(
            reason=reason, summary=summary))

    def _blocked(self, turn: TurnRun, verdict: GuardVerdict) -> brain_pb2.RespondEvent:
        GUARD_BLOCKS.inc()
        log.info("turn blocked by the topic guard", extra={"turn_id": turn.request.turn_id,
                                                           "reason": verdict.reason})
        turn.record["reply"] = self.sentences.blocked
        return brain_pb2.RespondEvent(turn_id=turn.request.turn_id, blocked=brain_pb2.Blocked(
            text=self.sentences.blocked, reason="off_topic"))

    async def _finish(self, turn: TurnRun, outcome: str) -> tuple[brain_pb2.RespondEvent, bool]:
        """The turn stored, with its record in the same Redis step; the final event, and whether
        the record was stored (not when the history's write failed: ``_store_record`` tries)."""
        request = turn.request
        reply = turn.reply() or self.sentences.fallback
        turn.record["reply"] = reply
        turn.record["dialog_state"] = turn.state.mode.value
        # Reached only when the turn completed: nothing half-finished is stored.
        stored = Turn(request.turn_id, request.text, reply, refused=is_refusal(reply))
        state = turn.state

        def append(history: SessionHistory) -> None:
            history.turns.append(stored)
            history.state = state

        recorded = False
        try:
            # From the history the turn read, and with the turn's record: one Redis round trip
            # per turn's end, not three.
            await self.store.update(request.user_id, request.session_id, append,
                                    read=turn.history, record=self._record_of(turn, outcome),
                                    lease=turn.lease, release=True)
            recorded = True
        except RedisError as exc:
            # The caller already heard the reply: a lost history write must not turn it into
            # an error. The next turn goes on from the last state Redis kept.
            REDIS_ERRORS.labels("brain").inc()
            turn.record["history_write_failed"] = True
            log.error("could not store the turn in history", extra={"error": repr(exc)})
        return brain_pb2.RespondEvent(turn_id=request.turn_id, final=brain_pb2.Final(
            text=reply, dialog_state=state.mode.value, fallback=turn.fallback)), recorded

    # ---- what code decides -------------------------------------------------
    async def _main(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> None:
        try:
            await self._decide_and_answer(turn, passed, events)
            if not turn.reply() and turn.record.get("guard", {}).get("allowed") is not False:
                await self._say(turn, events, self.sentences.fallback)
            await events.put(_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - re-raised in respond(), not swallowed
            await events.put(exc)

    async def _decide_and_answer(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> None:
        """Code decides (``conversation.py``); this carries it out: a handoff, the confirmed
        action run once, or code's words, after an answer from the business's knowledge."""
        request = turn.request

        async def read(name: str, arguments: dict[str, Any]) -> ToolResult:
            await passed.wait()  # tools wait for the topic guard
            return await self._read_tool(turn, name, arguments, events)

        if turn.preface:
            await self.say(turn, events, turn.preface)
        decision = await self.conversation.decide(turn.state, request.text, request.turn_id,
                                                  turn.last_turn(), read, turn.guard_asked.wait,
                                                  dict(request.session_context), request.previous_reply,
                                                  turn.finished)
        self._record_decision(turn, decision)
        if decision.fallback:
            LLM_FALLBACKS.inc()
            turn.fallback = True
        if decision.handoff:
            await self.handoff(turn, events, decision.handoff, decision.say)
            return
        if decision.run is not None:
            await passed.wait()  # no write before the topic guard has passed the turn
            await self._run_confirmed(turn, decision.run, read, events)
            return
        text = decision.say
        if decision.answer_question:
            answer = await self.answers.answer(decision.answer_question, request.language or "en", read)
            turn.record["answer"] = answer.record
            KNOWLEDGE_ANSWERS.labels("yes" if answer.known else "no").inc()
            said = answer.text if answer.known or not text else self.sentences.unknown_fact
            text = " ".join(filter(None, [said, text]))
            if not answer.known and not decision.say and turn.state.form is None:
                turn.state.understood(False)
        await self.say(turn, events, text)

    def _record_decision(self, turn: TurnRun, decision: Decision) -> None:
        """What code decided and how the words were read; the values themselves stay out of the
        record (personal data): only which fields were read, and by what."""
        turn.record["decision"] = ("handoff" if decision.handoff else "run" if decision.run else
                                   "answer" if decision.answer_question else "say")
        if decision.read is not None:
            READINGS.labels(decision.read.by).inc()
            turn.record["reading"] = {"intent": decision.read.intent, "by": decision.read.by,
                                      "fields": sorted(decision.read.values),
                                      **{k: v for k, v in decision.read.record.items() if k != "reading"}}
        form = turn.state.form
        if form is not None:
            turn.record["form"] = {"task": form.task, "have": sorted(form.values), "asking": form.asking}

    async def _run_confirmed(self, turn: TurnRun, action: PendingAction, read: ReadTool,
                             events: asyncio.Queue) -> None:
        outcome = await self._execute(turn, action)
        if outcome.status == "unknown":
            await self.handoff(turn, events, "unknown_outcome", outcome.say)
        elif outcome.status == "field" and turn.state.form is not None:
            # A value the business did not accept: that field again, the others kept.
            await self.say(turn, events, self.forms.ask_again(turn.state, outcome.field,
                                                                 outcome.note or None))
        elif outcome.status == "refused" and self._finds_again(turn.state):
            # The business said no (the slot was just taken): nothing was done; code looks again
            # and offers what is possible now.
            step = await self.forms.advance(turn.state, turn.request.turn_id, read)
            await self.say(turn, events, f"{outcome.say or self.sentences.not_done} {step.say}")
        elif outcome.status in ("refused", "field"):
            turn.state.form = None
            said = outcome.say or self.sentences.not_done
            await self.say(turn, events, f"{said} {self.sentences.anything_else}")
        else:
            await self.say(turn, events, outcome.say)

    def _finds_again(self, state: SessionState) -> bool:
        """After a refusal, a task with finders looks again (what is free now); one without
        would only propose the same refused action again."""
        form = state.form
        return form is not None and bool(self.forms.tasks[form.task].finders)

    async def _execute(self, turn: TurnRun, action: PendingAction) -> WriteOutcome:
        request, state = turn.request, turn.state
        task = self.forms.tasks.get(action.tool)
        state.take_pending()
        lease = turn.lease
        if lease is not None:
            lease.hold()  # the write keeps the session until its outcome is stored
        write = asyncio.ensure_future(self.actions.run(
            state, action, request.user_id, request.session_id, request.turn_id,
            self.tools.get(action.tool), done=task.done if task else "", lease=lease))
        self._background.add(write)  # it outlives a cancelled turn: held here until it ends
        write.add_done_callback(self._background.discard)
        write.add_done_callback(lambda done: self._write_ended(done, lease))
        # The write finishes and is recorded even if the caller interrupts now (barge-in).
        outcome = await asyncio.shield(write)
        turn.record["tools"].append({"name": action.tool, "confirmed": True, "action": action.action,
                                     "outcome": outcome.result.outcome if outcome.result else outcome.status,
                                     "attempts": outcome.result.attempts if outcome.result else 0})
        return outcome

    def _write_ended(self, write: asyncio.Future, lease: Lease | None) -> None:
        if lease is not None:
            self.store.leases.let_go(lease)
        if not write.cancelled() and write.exception() is not None:
            log.error("a confirmed write failed", exc_info=write.exception())

    async def _read_tool(self, turn: TurnRun, name: str, arguments: dict[str, Any],
                         events: asyncio.Queue) -> ToolResult:
        """A read-only tool code calls for the form (a finder, a lookup); never a write."""
        request = turn.request
        call = ToolCall(new_call_id(), name, json.dumps(arguments))
        tool = self.tools.get(name)
        if tool is None or tool.spec.kind is ToolKind.WRITE:
            return ToolResult(call, "invalid", {"ok": False, "error": f"{name} is not a read-only tool"})
        await events.put(brain_pb2.RespondEvent(turn_id=request.turn_id, tool=brain_pb2.ToolActivity(
            tool=name, status="started")))
        ctx = ToolContext(request.user_id, request.session_id, request.turn_id, {})
        result = await self.dispatcher.run(tool, call, dict(arguments), ctx)
        if tool.spec.only_known and result.outcome == "succeeded":
            result.content["result"] = self.references.only_known(
                result.content.get("result"), tool.spec.only_known, turn.state)
        turn.record["tools"].append({"name": name, "outcome": result.outcome, "attempts": result.attempts})
        await events.put(brain_pb2.RespondEvent(turn_id=request.turn_id, tool=brain_pb2.ToolActivity(
            tool=name, status=result.outcome)))
        return result

    async def handoff(self, turn: TurnRun, events: asyncio.Queue, reason: str, text: str = "") -> None:
        state = turn.state
        summary = handoff_summary(state, reason)
        state.handed_off()
        HANDOFFS.labels(reason).inc()
        turn.record["handoff"] = {"reason": reason, "summary": summary}
        await self.say(turn, events, text or self.sentences.handoff)
        await events.put(brain_pb2.RespondEvent(turn_id=turn.request.turn_id, handoff=brain_pb2.Handoff(
            reason=reason, summary=summary)))


    async def say(self, turn: TurnRun, events: asyncio.Queue, text: str) -> None:
        """Code's own words (confirmations, handoff): spoken like the model's, for the ear."""
        cleaner = SpokenTextCleaner(turn.request.language or "en")
        await self._say(turn, events, cleaner.clean(text) + cleaner.flush(), new_part=True)

    async def _say(self, turn: TurnRun, events: asyncio.Queue, text: str, new_part: bool = False) -> None:
        if new_part and turn.spoken and not turn.spoken[-1].endswith(" "):
            text = " " + text.lstrip()  # a new LLM call's text after an earlier call's sentence
        if turn.first_text_at is None:
            turn.first_text_at = time.perf_counter()
            LLM_TTFT_SECONDS.observe(self.clock() - turn.started)
        turn.spoken.append(text)
        await events.put(brain_pb2.RespondEvent(turn_id=turn.request.turn_id,
                                                delta=brain_pb2.TextDelta(text=text)))

    def _background_record(self, turn: TurnRun, outcome: str) -> None:
        self._in_background(self._store_record(turn, outcome))

    def _in_background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _prime(self, messages: list[dict[str, Any]]) -> None:
        async for _ in self.chat(messages, max_tokens=1):
            pass

    async def _prime_words(self, request: brain_pb2.RespondRequest) -> None:
        """``Brain.Prefill``: the caller's words so far. Knowledge retrieval starts on them, so
        a question finds its passage already searched at the endpoint."""
        self.answers.prefetch(request.text)


    def _record_of(self, turn: TurnRun, outcome: str) -> dict[str, Any]:
        turn.record.update(outcome=outcome, ms=round((self.clock() - turn.started) * 1000))
        return turn.record

    async def _store_record(self, turn: TurnRun, outcome: str) -> None:
        try:
            await self.store.add_record(turn.request.user_id, turn.request.session_id,
                                        self._record_of(turn, outcome))
        except Exception:  # a lost record must not fail a turn
            log.exception("could not store the turn record")


def urgent_screen(profile: Profile, encoder: SentenceEncoder | None, chat: ChatFunction,
                  timeout_s: float = 4.0) -> UrgentScreen | None:
    """The profile's urgent check (None: it names no urgent situation)."""
    if not profile.urgent.situations:
        return None
    if encoder is None:
        raise TaskError("urgent: the sentence encoder is needed to recognise urgent situations")
    return UrgentScreen(profile.urgent, encoder, f"{profile.name}, {profile.purpose}", chat, timeout_s)


def knowledge_tools(profile: Profile, tools: ToolRegistry) -> dict[str, str | None]:
    """The profile's knowledge tools, each with the one string argument the question goes in
    (None: a tool without arguments)."""
    found: dict[str, str | None] = {}
    for name in profile.knowledge.tools:
        tool = tools.get(name)
        if tool is None or tool.spec.kind is ToolKind.WRITE:
            raise TaskError(f"knowledge.tools: {name!r} is not a read-only tool of this profile's servers")
        required = list(tool.spec.parameters.get("required") or [])
        found[name] = required[0] if required else None
    return found


def _record_heard(previous: brain_pb2.SpokenPart) -> Callable[[SessionHistory], None]:
    def record_heard(history: SessionHistory) -> None:
        found = history.mark_spoken(previous.turn_id, previous.text, interrupted=True)
        if not found and previous.user_text:
            # Cut off before it completed, so never stored: keep the question and what was
            # heard of the answer, marked interrupted.
            history.turns.append(Turn(previous.turn_id, previous.user_text, previous.text,
                                      interrupted=True))

    return record_heard


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", speakable(text).lower()).split())


def _said_in(sentence: str, reply: str) -> bool:
    """Whether ``reply`` (what the caller heard of it) holds all of ``sentence``."""
    return _words(sentence) in _words(reply)


def _set(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event


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
