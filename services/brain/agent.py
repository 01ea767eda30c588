"""The agent loop: one turn in, a streamed reply out.

Per turn:
1. The topic guard starts together with the turn (unless the caller's words are
   a short dialogue act inside an ongoing task: a yes, a no, a number, a name).
   Until it passes, text is held back and tools wait; if it blocks, the turn is
   cancelled, nothing is stored and a fixed sentence is spoken.
2. The dialog policy decides first (policy.py): code answers, runs the pending
   action the caller just confirmed, or lets the model answer with a note. A
   domain hook may propose a write by rule before the model is asked.
3. The model loop calls the LLM with the context in a fixed order (context.py),
   streams speakable text, and runs read-only tools. A call to a write tool never
   runs: it becomes the one pending action, the loop ends and code reads it back.
4. Code stops the loop: caps on LLM calls, tokens, wall time, and a repeated
   identical call; then one last call without tools answers from what was found.
5. Only a completed turn is written to history (a cancelled one stores nothing),
   and every turn leaves a record of its LLM calls, tools and verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from services.brain.actions import Actions, WriteOutcome
from services.brain.change_fields import UNCHANGED, parse_fields, response_format
from services.brain.config import BrainSettings
from services.brain.context import build_messages, state_block, state_text
from services.brain.dialog import (
    CONFIRMATION_SCHEMA,
    Decision,
    classify_confirmation,
    confirmation_prompt,
    handoff_summary,
    is_clarification,
    is_dialogue_act,
)
from services.brain.guard import GuardVerdict, TopicGuard
from services.brain.hooks import DomainHooks, HookContext, HookResult
from services.brain.llm import ChatChunk, ChatFunction, LLMRequestError, LLMUnavailable
from services.brain.metrics import (
    GUARD_BLOCKS,
    HANDOFFS,
    LLM_CALL_SECONDS,
    LLM_FALLBACKS,
    LLM_TOKENS,
    LLM_TTFT_SECONDS,
    LOOP_STOPS,
    READ_BACKS_MIMICKED,
)
from services.brain.mimicry import ReadBackMimicry
from services.brain.policy import Continue, Reply, RunPending, decide, next_model_turn
from services.brain.prefill import WordsPrefill, key_of
from services.brain.profile import Profile
from services.brain.prompts import system_prompt
from services.brain.references import References, UnknownReference
from services.brain.refusals import is_refusal
from services.brain.session_store import ReadAhead, SessionHistory, SessionStore, Turn
from services.brain.spoken import SpokenTextCleaner
from services.brain.state import SessionState
from services.brain.toolcalls import StructuredCallAccumulator, TextToolCallFilter, ToolCall, new_call_id
from services.brain.tools import Dispatcher, ToolContext, ToolKind, ToolRegistry, ToolResult
from voicebot.common.metrics import REDIS_ERRORS
from voicebot.common.telemetry import tracer
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)
TRACER = tracer("voicebot.brain")
_END = object()
ANSWER_NOW = "Tools are no longer available this turn: answer the caller now from what you found."
UNREACHABLE = ("unavailable", "timeout")


class StaleRead(Exception):
    """The session read ahead is older than what Redis holds now (``Agent._confirmed``)."""


@dataclass
class LoopLimits:
    max_llm_calls: int = 4
    max_tokens: int = 600
    max_seconds: float = 20.0


@dataclass
class TurnRun:
    """Scratch state of one turn, and its record."""

    request: brain_pb2.RespondRequest
    history: SessionHistory
    started: float
    steps: list[dict[str, Any]] = field(default_factory=list)
    spoken: list[str] = field(default_factory=list)
    signatures: set[str] = field(default_factory=set)
    tokens: int = 0
    stop: str | None = None
    fallback: bool = False
    note: str = ""  # for this turn's model calls only
    # The caller is changing the pending action: the turn's first model call must be a tool call
    # (a new proposal, or the lookup it needs), never text that reads a change back itself.
    tool_required: bool = False
    context: str | None = None  # the state block of this turn's prompts ("": none; stored with the turn)
    screen_later: bool = False  # a change read by code: screened only if the model loop answers
    proposed: bool = False  # a write became the pending action: code reads it back
    unreachable: bool = False  # a tool server was down: code says it cannot check
    first_text_at: float | None = None
    record: dict[str, Any] = field(default_factory=dict)
    # Cleared while the topic guard's screen judges the words; set again once it passed them or
    # the guard's LLM call is on its way. The turn's model calls wait for it (``Agent._respond``).
    guard_asked: asyncio.Event = field(default_factory=lambda: _set(asyncio.Event()))

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
        limits: LoopLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        profile: Profile | None = None,
        hooks: DomainHooks | None = None,
        side_chat: ChatFunction | None = None,
    ) -> None:
        self.settings = settings
        self.profile = profile or Profile()
        self.sentences = self.profile.sentences
        self.chat = chat
        # Short side calls (the yes/no classifier), on a slot of their own where the server has
        # slots, so the session's cached prompt is not evicted by them.
        self.side_chat = side_chat or chat
        self.store = store
        self.references = References(self.profile.references, self.profile.hidden_fields)
        self.tools = tools or ToolRegistry()
        self.dispatcher = Dispatcher(self.tools, sleep)
        self.actions = Actions(self.dispatcher, self.references, self.sentences, store)
        self.hooks = hooks or DomainHooks()
        self.guard = guard
        self.limits = limits or LoopLimits(settings.max_llm_calls, settings.max_turn_tokens,
                                           settings.max_turn_seconds)
        self.clock = clock
        self.system = system_prompt(self.profile)
        self.empty_state = state_text(SessionState().model_view())
        self.words_prefill = WordsPrefill(self._prime_words, settings.prefill_on_words_max)
        self._background: set[asyncio.Task] = set()

    async def warm_up(self) -> None:
        """Prefill the fixed start of every prompt (instructions and tool definitions) and the
        guard's prompt once at start, so the first caller does not pay a cold prefill
        (seconds on a CPU); the LLM server's prompt cache keeps them."""
        started = time.perf_counter()
        messages = build_messages(self.system, [], "Hello.", [], "")
        warmed = await self._warm("the main prompt", lambda: self._prime(messages))
        if self.guard is not None:
            warmed = await self._warm("the guard's prompt", self.guard.warm) and warmed
        if warmed:
            log.info("LLM prompt cache warmed", extra={"seconds": round(time.perf_counter() - started, 2)})

    @staticmethod
    async def _warm(what: str, prime: Callable[[], Awaitable[Any]], attempts: int = 3) -> bool:
        """The packaged model's ~860-token start takes ~27 s to prefill on two cores, past the
        client's first-token timeout; the server finishes and caches it all the same, so the
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
                async for event in self._respond(request, committed, ahead):
                    yield event
            except StaleRead:
                # Another connection of the session wrote it after the read ahead. Nothing the
                # turn made has left the brain and no tool ran: it starts again on a fresh read.
                async for event in self._respond(request, committed, None):
                    yield event

    async def _respond(self, request: brain_pb2.RespondRequest, committed: asyncio.Event | None,
                       ahead: ReadAhead | None) -> AsyncIterator[brain_pb2.RespondEvent]:
        if committed is None:
            committed = asyncio.Event()
            committed.set()
        try:
            # A timeout scope, not ``wait_for``: no task of its own on every turn's path.
            async with asyncio.timeout(self.settings.history_load_timeout_s):
                history, unconfirmed = await self._load(request, ahead)
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
            "turn_id": request.turn_id, "text": request.text, "llm_calls": [], "tools": []})
        events: asyncio.Queue = asyncio.Queue()
        passed = asyncio.Event()
        guard = None
        turn.screen_later = self.guard is not None and self._change_read_by_code(turn)
        if self.guard is not None and not self._skips_guard(turn) and not turn.screen_later:
            # The reply's first model call waits for the screen (~7 ms; ``guard_screen_first``):
            # when the LLM must judge, the guard's call reaches the LLM server first and the two
            # prefill in one batch. Sent behind the reply's, the guard's prefill waited for it,
            # and the held reply for the verdict: 547 ms after the turn's start against 418 when
            # sent together (p50, make bench-v2v, 2026-12-04), the reply's own first text at 265.
            if self.settings.guard_screen_first:
                turn.guard_asked.clear()
            guard = asyncio.create_task(self.guard.check(request.text, request.language,
                                                         asking=turn.guard_asked.set))
            guard.add_done_callback(lambda _: turn.guard_asked.set())
        else:
            if not unconfirmed:
                passed.set()
            if self.guard is not None:
                turn.record["guard"] = {"allowed": True, "reason": (
                    "a change to the read-back" if turn.screen_later else "dialogue act in an ongoing task")}
        cleared = asyncio.Event()  # the guard passed and the turn is committed: tools may run
        clearing = asyncio.create_task(self._clear(turn, passed, committed, cleared))
        main = asyncio.create_task(self._main(turn, cleared, events))
        gate = guard
        if unconfirmed:
            # Read ahead: what the turn makes is held and no tool runs until Redis confirms the
            # read is current, as for the guard's verdict. Made after the turn's task, so the
            # model's call goes out first: the check need only be done before the first text.
            gate = asyncio.create_task(self._confirmed(request, history, guard))
        recorded = False
        try:
            try:
                async for event in self._merge(turn, main, gate, passed, events):
                    yield event
            except StaleRead:
                recorded = True  # nothing of this start happened: ``respond`` runs the turn again
                raise
            await committed.wait()  # a preemptive turn stores nothing before its commit
            if turn.record.get("guard", {}).get("allowed") is False:
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
            history = await self.store.update(request.user_id, request.session_id,
                                              lambda h: h.turns.append(said))
        except RedisError as exc:
            REDIS_ERRORS.labels("brain").inc()
            log.error("could not store the blocked turn", extra={"error": repr(exc)})
            return
        if self.settings.prefill_after_reply:  # the next prompt carries this exchange too
            self._in_background(self._prefill(history, request))

    def _change_read_by_code(self, turn: TurnRun) -> bool:
        """A change to the pending action, so called by the rules, where the hooks read changes as
        fields: all the turn can say is code's read-back or code's question, unless it falls to
        the model loop, which is screened first (``_screen_late``). Not screening it at the start
        keeps the guard's prefill off the change's own (measured: 0.5-0.8 s of two cores)."""
        return (turn.state.pending is not None and self.hooks.change_fields is not None
                and classify_confirmation(turn.request.text) is Decision.CORRECTION)

    async def _screen_late(self, turn: TurnRun, events: asyncio.Queue) -> bool:
        """The guard for a change that was not screened at the start and goes to the model loop
        after all; False when it blocks (the Blocked event is queued, and nothing is stored)."""
        if not turn.screen_later or self.guard is None:
            return True
        verdict = await self.guard.check(turn.request.text, turn.request.language)
        turn.record["guard"] = {"allowed": verdict.allowed, "reason": verdict.reason,
                                "by": verdict.by, "ms": round(verdict.seconds * 1000), "late": True}
        if not verdict.allowed:
            await events.put(self._blocked(turn, verdict))
        return verdict.allowed

    def _skips_guard(self, turn: TurnRun) -> bool:
        """Short dialogue acts inside an ongoing task are never screened (a bare "No." is not
        off-topic when the bot just asked a question)."""
        state, last = turn.state, turn.last_turn()
        ongoing = state.pending is not None or bool(state.task) or (
            last is not None and last.assistant.rstrip().endswith("?"))
        return ongoing and is_dialogue_act(turn.request.text)

    async def _confirmed(self, request: brain_pb2.RespondRequest, read: SessionHistory,
                         guard: asyncio.Task | None) -> GuardVerdict | None:
        """The guard's verdict (None: no guard asked) once the session read ahead is confirmed
        current; StaleRead when it is not (or Redis cannot say: the fresh read will tell)."""
        try:
            current = await self.store.unchanged_since(request.user_id, request.session_id, read)
        except RedisError:
            current = False
        if not current:
            raise StaleRead  # the guard's task is cancelled with the turn's others (``_respond``)
        return await guard if guard is not None else None

    async def _load(self, request: brain_pb2.RespondRequest, ahead: ReadAhead | None
                    ) -> tuple[SessionHistory, bool]:
        """The session's history, with what the caller heard of the last reply recorded first,
        and whether it is a read made ahead that is yet to be confirmed current. A reply heard
        whole changes nothing: that is a plain read, not a read-modify-write that serialises the
        whole history to find nothing changed (on every turn's path). A read made ahead is used
        when there is one: a write on it is a compare-and-set, which confirms it."""
        read = await ahead.history_for(request.user_id, request.session_id) if ahead else None
        previous = request.previous_reply
        if previous.turn_id and previous.interrupted:
            def record_heard(history: SessionHistory) -> None:
                found = history.mark_spoken(previous.turn_id, previous.text, interrupted=True)
                if not found and previous.user_text:
                    # Cut off before it completed, so never stored: keep the question and
                    # what was heard of the answer, marked interrupted.
                    history.turns.append(Turn(previous.turn_id, previous.user_text, previous.text,
                                              interrupted=True))

            return await self.store.update(request.user_id, request.session_id, record_heard,
                                           read=read), False
        if read is not None:
            return read, True
        return await self.store.load(request.user_id, request.session_id), False

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
        # Reached only when the turn completed: nothing half-finished is stored. The steps of a
        # turn code carried alone (a hook's lookup and proposal, read back by code) are left out:
        # no prompt had them, so no cache needs them, and the next prompt's state block holds
        # what came of them (the pending action, the collected fields, the references with their
        # labels). Stored, they were ~420 tokens the LLM server prefilled after the read-back
        # (10 s on two cores), ahead of the caller's answer to it.
        # Each model call is recorded as sent; one that read a change as fields saw no steps.
        saw_steps = any(call.get("purpose") != "change_fields" for call in turn.record["llm_calls"])
        steps = turn.steps if saw_steps else []
        # No state block either for a change read back from its fields (``turn.context`` is
        # unset): the next prompt breaks off at this turn (11-18 tokens more to prefill after the
        # read-back), but shows the model only the current booking. Stored, the superseded
        # blocks stayed in the history and the packaged model took an older time from them:
        # "move it to the weekend" after "do eight instead" came back at 19:00 (the captured
        # prompt replayed: 20:00 without the older blocks).
        stored = Turn(request.turn_id, request.text, reply, steps=steps, context=turn.context or "",
                      refused=is_refusal(reply))
        state = turn.state

        def append(history: SessionHistory) -> None:
            history.turns.append(stored)
            history.state = state

        recorded = False
        try:
            # From the history the turn read, and with the turn's record: one Redis round trip
            # per turn's end, not three.
            history = await self.store.update(request.user_id, request.session_id, append,
                                              read=turn.history, record=self._record_of(turn, outcome))
            recorded = True
            if self.settings.prefill_after_reply and not turn.fallback:
                self._in_background(self._prefill(history, request))
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
        decision = await decide(turn.state, turn.request.text, turn.request.turn_id, turn.last_turn(),
                                self.sentences, self._classify)
        turn.record["decision"] = type(decision).__name__
        if isinstance(decision, Reply):
            if decision.handoff:
                await self.handoff(turn, events, decision.handoff, decision.text)
            else:
                await self.say(turn, events, decision.text)
            return
        if isinstance(decision, RunPending):
            await passed.wait()  # no write before the topic guard has passed the turn
            outcome = await self._execute(turn, decision)
            if outcome.status != "refused":
                if outcome.status == "unknown":
                    await self.handoff(turn, events, "unknown_outcome", outcome.say)
                else:
                    await self.say(turn, events, outcome.say)
                return
            turn.note = outcome.note  # refused: the model tells the caller and looks for alternatives
        else:
            turn.note = decision.note
            turn.tool_required = decision.correcting is not None
            if await self._hook_proposes(turn, passed, events, decision):
                return
        if not await self._screen_late(turn, events):
            return
        await self._loop(turn, passed, events)
        await self._after_loop(turn, events)

    async def _execute(self, turn: TurnRun, decision: RunPending) -> WriteOutcome:
        request, state = turn.request, turn.state
        action = state.take_pending()
        # The write finishes and is recorded even if the caller interrupts now (barge-in).
        outcome = await asyncio.shield(self.actions.run(
            state, action, request.user_id, request.session_id, request.turn_id,
            self.tools.get(action.tool)))
        turn.record["tools"].append({"name": action.tool, "confirmed": True, "action": action.action,
                                     "outcome": outcome.result.outcome if outcome.result else outcome.status,
                                     "attempts": outcome.result.attempts if outcome.result else 0})
        return outcome

    async def _hook_proposes(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue,
                             decision: Continue) -> bool:
        """A domain hook may carry a common path by rule; its proposal is read back like any other."""

        async def read(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            await passed.wait()  # tools wait for the topic guard
            [result] = await self.run_tools(turn, "", [ToolCall(new_call_id(), name, json.dumps(arguments))],
                                            events, read_only=True)
            turn.steps.append(result.message())
            return json.loads(result.message()["content"])

        ctx = HookContext(turn.request.text, turn.request.language or "en", turn.state.task,
                          frozenset(spec.name for spec in self.tools.specs()), read, decision.correcting)
        result = await self.hooks.before_model(ctx)
        if result is None and decision.correcting is not None and self.hooks.change_fields:
            result = await self._from_change_fields(turn, ctx)
        if turn.unreachable:  # the hook's lookup found the tool server down
            await self.say(turn, events, self.sentences.tool_unavailable)
            return True
        if result is None:
            return False
        if result is UNCHANGED:
            # The model read no change into the words: code asks, rather than read back the same.
            await self.say(turn, events, self.sentences.ask_what_to_change)
            return True
        if result.note:
            turn.note = " ".join(filter(None, [turn.note, result.note]))
            # The hook looked the change up and has something to say about it (no table then):
            # the model tells the caller; a tool call is no longer what must come first.
            turn.tool_required = False
        if result.propose is None:
            return False
        await passed.wait()
        name, arguments = result.propose
        call = ToolCall(new_call_id(), name, json.dumps(arguments))
        [proposal] = await self.run_tools(turn, "", [call], events)
        turn.steps.append(proposal.message())
        if turn.proposed:
            await self.say(turn, events, self.actions.confirm_sentence(turn.state.pending))
            return True
        return False

    async def _from_change_fields(self, turn: TurnRun, ctx: HookContext) -> HookResult | None:
        """The model reads the change as the hook's fields (``change_fields``), over this turn's
        prompt, the tools included (they are part of the cached prefix); the hook proposes from
        them. ``UNCHANGED`` when they are what was read back. The state block is not fixed for
        the turn here: a note the hook adds must still reach the model calls after this one, and
        a turn code reads back from the fields is stored without it (``_finish``)."""
        spec = self.hooks.change_fields
        assert spec is not None
        context = self._state_block(turn.state, turn.note, turn.request, turn.history.turns)
        messages = self._change_messages(turn, context)
        record: dict[str, Any] = {"purpose": "change_fields", "messages": len(messages)}
        turn.record["llm_calls"].append(record)
        parts: list[str] = []
        started = time.perf_counter()
        try:
            # tool_choice "none": the answer is the fields, never a tool call. Under "auto" vLLM's
            # structured output shuts tool calls out, or is dropped by the fix proposed for
            # vllm#39929; under "none" the format holds, and the tools stay in the prompt (also in
            # llama-server's: the cached prefix is the same).
            async for chunk in self.chat(messages, tools=self.tools.definitions() or None,
                                         max_tokens=spec.max_tokens, tool_choice="none",
                                         response_format=response_format(spec)):
                parts.append(chunk.text)
                self._count(turn, chunk, record)
            fields = parse_fields("".join(parts), spec)
        except (LLMUnavailable, LLMRequestError, ValueError) as exc:
            log.info("no usable change fields from the model", extra={"error": str(exc)[:200]})
            record["error"] = str(exc)[:200]
            return None  # the turn goes on without them
        finally:
            LLM_CALL_SECONDS.observe(time.perf_counter() - started)
            record["ms"] = round((time.perf_counter() - started) * 1000)
        record["fields"] = fields
        if all(ctx.task.get(key) == value for key, value in fields.items()):
            return UNCHANGED
        return await self.hooks.from_fields(ctx, fields)

    async def _classify(self, read_back: str, reply: str) -> Decision:
        """Structured-output call, only when the rules could not tell yes from no."""
        parts: list[str] = []
        try:
            async for chunk in self.side_chat(confirmation_prompt(read_back, reply), max_tokens=20,
                                         response_format={"type": "json_schema", "json_schema": {
                                             "name": "confirmation", "schema": CONFIRMATION_SCHEMA}}):
                parts.append(chunk.text)
            return Decision(json.loads("".join(parts))["decision"])
        except (LLMUnavailable, LLMRequestError, ValueError, KeyError, TypeError) as exc:
            log.info("confirmation unclear", extra={"error": repr(exc)})
            return Decision.UNCLEAR

    async def _after_loop(self, turn: TurnRun, events: asyncio.Queue) -> None:
        if turn.proposed:
            await self.say(turn, events, self.actions.confirm_sentence(turn.state.pending))
            return
        if turn.unreachable:
            await self.say(turn, events, self.sentences.tool_unavailable)
            return
        if turn.fallback:
            return  # an LLM outage is not the caller's misunderstanding
        if turn.state.understood(not is_clarification(turn.reply())) >= 2:
            await self.handoff(turn, events, "not_understood")

    async def handoff(self, turn: TurnRun, events: asyncio.Queue, reason: str, text: str = "") -> None:
        state = turn.state
        summary = handoff_summary(state, reason)
        state.handed_off()
        HANDOFFS.labels(reason).inc()
        turn.record["handoff"] = {"reason": reason, "summary": summary}
        await self.say(turn, events, text or self.sentences.handoff)
        await events.put(brain_pb2.RespondEvent(turn_id=turn.request.turn_id, handoff=brain_pb2.Handoff(
            reason=reason, summary=summary)))

    # ---- the model loop -------------------------------------------------
    async def _loop(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> None:
        require = turn.tool_required
        for index in range(self.limits.max_llm_calls):
            last = index == self.limits.max_llm_calls - 1 or turn.stop is not None
            use_tools = len(self.tools) > 0 and not last
            instruction = ANSWER_NOW if not use_tools and turn.steps else ""
            messages = self._prompt(turn, instruction)
            tool_choice, required = None, use_tools and require
            if required:
                messages, tool_choice = self._require_tool_call(messages)
            outcome = await self._call_llm(turn, messages, use_tools, events, tool_choice)
            record = turn.record["llm_calls"][-1]
            record["tool_required"] = required
            mimicked = bool(record.get("mimicked_read_back"))
            if mimicked and use_tools and not required:
                # A read-back of its own, caught unspoken: the model meant to propose, so it is
                # asked again (the same prompt, cached) for the tool call behind it.
                require = True
                continue
            require = False
            if mimicked and not turn.spoken:
                await self._say(turn, events, self.sentences.fallback, new_part=True)
                return
            if outcome is None or not outcome[1] or last:
                return
            text, calls = outcome
            self._check_caps(turn, calls)
            await passed.wait()  # tools wait for the guard
            results = await self.run_tools(turn, text, calls, events)
            turn.steps += [r.message() for r in results]
            if turn.proposed or turn.unreachable:
                return  # code speaks next: the read-back, or "I can't check right now"
        if turn.stop is None:
            turn.stop = "llm_calls"

    def _require_tool_call(self, messages: list[dict[str, Any]]
                           ) -> tuple[list[dict[str, Any]], str | None]:
        """This call must be a tool call: by ``tool_choice``, or where the server does not enforce
        it, by the start of the model's tool-call syntax as the start of its message."""
        prefix = self.settings.llm_tool_call_prefix
        if not prefix:
            return messages, "required"
        return [*messages, {"role": "assistant", "content": prefix}], None

    def _prompt(self, turn: TurnRun, instruction: str = "") -> list[dict[str, Any]]:
        if turn.context is None:  # fixed for the turn and stored with it: later prompts repeat it
            turn.context = self._state_block(turn.state, turn.note, turn.request, turn.history.turns)
        return self._messages(turn, turn.context, instruction)

    def _messages(self, turn: TurnRun, context: str, instruction: str = "") -> list[dict[str, Any]]:
        return build_messages(self.system, turn.history.turns, turn.request.text, turn.steps,
                              context, self.settings.recent_turns, self.settings.history_turns,
                              instruction)

    def _change_messages(self, turn: TurnRun, context: str) -> list[dict[str, Any]]:
        """The prompt that asks for a change's fields: the hook's instruction goes before the
        caller's words, so the prefill after a read-back (``_prefill``) caches it with the state
        block, and at the endpoint only the words are new (~15 tokens instead of ~42 with the
        instruction after them: ~0.4 s of prefill on two cores)."""
        assert self.hooks.change_fields is not None
        return build_messages(self.system, turn.history.turns, turn.request.text, [], context,
                              self.settings.recent_turns, self.settings.history_turns,
                              preface=self.hooks.change_fields.instruction)

    def _change_preface(self, state: SessionState) -> str:
        """The instruction the next model call will most likely carry before the caller's words:
        with an action read back and awaiting a yes, a change to it is asked as fields."""
        spec = self.hooks.change_fields
        return spec.instruction if spec is not None and state.pending is not None else ""

    def _next_block(self, history: SessionHistory, request: brain_pb2.RespondRequest) -> str:
        """The state block the next model call after ``history`` will most likely carry
        (``policy.next_model_turn``: after a read-back, the one of a change to it)."""
        state, note = next_model_turn(history.state)
        return self._state_block(state, note, request, history.turns)

    def _state_block(self, state: SessionState, note: str, request: brain_pb2.RespondRequest,
                     turns: list[Turn]) -> str:
        """The state block a prompt after ``turns`` carries ("" when the model sees it already)."""
        view = state.model_view(note, dict(request.session_context), self.settings.state_references)
        return state_block(state_text(view), self.empty_state, turns, self.settings.recent_turns,
                           self.settings.history_turns)

    async def _call_llm(self, turn: TurnRun, messages: list[dict[str, Any]], use_tools: bool,
                        events: asyncio.Queue, tool_choice: str | None = None
                        ) -> tuple[str, list[ToolCall]] | None:
        """One streamed LLM call; returns (its text, its tool calls), or None after a fallback."""
        with TRACER.start_as_current_span("llm.call", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                "gen_ai.request.model": self.settings.llm_model,
                "gen_ai.request.max_tokens": self.settings.llm_max_tokens}) as span:
            outcome = await self._stream_llm(turn, messages, use_tools, events, tool_choice)
            record = turn.record["llm_calls"][-1]
            usage = {"gen_ai.usage.input_tokens": record.get("prompt_tokens"),
                     "gen_ai.usage.output_tokens": record.get("completion_tokens"),
                     "gen_ai.usage.cached_tokens": record.get("cached_tokens")}
            span.set_attributes({k: v for k, v in usage.items() if v is not None})
            span.set_attribute("voicebot.llm.tool_calls", len(outcome[1]) if outcome else 0)
            return outcome

    async def _stream_llm(self, turn: TurnRun, messages: list[dict[str, Any]], use_tools: bool,
                          events: asyncio.Queue, tool_choice: str | None = None
                          ) -> tuple[str, list[ToolCall]] | None:
        text_calls = TextToolCallFilter()
        structured = StructuredCallAccumulator()
        cleaner = SpokenTextCleaner(turn.request.language or "en")
        mimicry = ReadBackMimicry([self.sentences.confirm, self.sentences.confirm_again])
        said: list[str] = []
        started = time.perf_counter()
        call_record: dict[str, Any] = {"messages": len(messages), "tools": use_tools}
        turn.record["llm_calls"].append(call_record)
        tools = self.tools.definitions() if use_tools else None
        await turn.guard_asked.wait()
        try:
            async for chunk in self.chat(messages, tools=tools, tool_choice=tool_choice):
                structured.add(chunk.tool_calls)
                self._count(turn, chunk, call_record)
                speakable = cleaner.clean(mimicry.push(text_calls.push(chunk.text)))
                if mimicry.caught:
                    READ_BACKS_MIMICKED.inc()
                    call_record["mimicked_read_back"] = True
                    break  # nothing of it is spoken; the rest of it need not be written
                if speakable:
                    call_record.setdefault("ttft_ms", round((time.perf_counter() - started) * 1000))
                    await self._say(turn, events, speakable, new_part=not said)
                    said.append(speakable)
            rest, recovered = text_calls.finish()
            rest = mimicry.push(rest) + mimicry.flush()
            rest = cleaner.clean(rest) + cleaner.flush() if not mimicry.caught else ""
            if rest.strip():
                await self._say(turn, events, rest, new_part=not said)
                said.append(rest)
        except (LLMUnavailable, LLMRequestError) as exc:
            level = logging.ERROR if isinstance(exc, LLMRequestError) else logging.WARNING
            log.log(level, "llm failed; speaking the fallback", extra={"error": str(exc)})
            LLM_FALLBACKS.inc()
            turn.fallback = True
            call_record["error"] = str(exc)
            await self._say(turn, events, self.sentences.fallback, new_part=True)
            return None
        finally:
            LLM_CALL_SECONDS.observe(time.perf_counter() - started)
            call_record["ms"] = round((time.perf_counter() - started) * 1000)
        calls = structured.calls() or recovered
        if not chunk_usage_seen(call_record):
            turn.tokens += max(1, len("".join(said)) // 4) if said else 0
        call_record["tool_calls"] = [c.name for c in calls]
        call_record["text_recovered"] = bool(recovered and not structured.calls())
        return "".join(said), calls

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

    def _check_caps(self, turn: TurnRun, calls: list[ToolCall]) -> None:
        reason = None
        if any(call.signature() in turn.signatures for call in calls):
            reason = "repeated_call"
        elif turn.tokens >= self.limits.max_tokens:
            reason = "tokens"
        elif self.clock() - turn.started >= self.limits.max_seconds:
            reason = "wall_time"
        turn.signatures |= {call.signature() for call in calls}
        if reason and turn.stop is None:
            turn.stop = reason
            LOOP_STOPS.labels(reason).inc()
            turn.record["stop"] = reason

    async def run_tools(self, turn: TurnRun, text: str, calls: list[ToolCall], events: asyncio.Queue,
                        read_only: bool = False) -> list[ToolResult]:
        """Read-only calls run (concurrently); a write call becomes the pending action, never runs."""
        turn.steps.append({"role": "assistant", "content": text,
                           "tool_calls": [call.as_message() for call in calls]})
        request = turn.request
        if turn.stop == "repeated_call":
            # Not run again; every call still gets a result, so history has no orphan call.
            results = [ToolResult(c, "refused", {"ok": False, "error": "repeated call; not run again"})
                       for c in calls]
        else:
            for call in calls:
                await events.put(brain_pb2.RespondEvent(turn_id=request.turn_id, tool=brain_pb2.ToolActivity(
                    tool=call.name, status="started")))
            results = list(await asyncio.gather(*(self._one_tool(turn, call, read_only) for call in calls)))
        for result in results:
            turn.record["tools"].append({"name": result.call.name, "arguments": result.call.arguments,
                                         "outcome": result.outcome, "attempts": result.attempts})
            await events.put(brain_pb2.RespondEvent(turn_id=request.turn_id, tool=brain_pb2.ToolActivity(
                tool=result.call.name, status=result.outcome)))
        return results

    async def _one_tool(self, turn: TurnRun, call: ToolCall, read_only: bool) -> ToolResult:
        checked = self.dispatcher.check(call)
        if isinstance(checked, ToolResult):
            return checked
        tool, args = checked
        state, request = turn.state, turn.request
        try:
            if tool.spec.kind is ToolKind.WRITE:
                if read_only or turn.proposed:
                    return ToolResult(call, "refused", {"ok": False, "error": (
                        "one action at a time: the caller must confirm the first one")}, tool.spec.kind)
                proposal = self.actions.propose(state, tool, call, args, request.turn_id)
                turn.proposed = True
                return proposal
            resolved = self.references.resolve(args, state)
        except UnknownReference as exc:
            return ToolResult(call, "invalid", {"ok": False, "error": str(exc)}, tool.spec.kind)
        ctx = ToolContext(request.user_id, request.session_id, request.turn_id, {})
        result = await self.dispatcher.run(tool, call, resolved, ctx)
        if result.outcome in UNREACHABLE:
            turn.unreachable = True
        if result.outcome == "succeeded":
            value = result.content.get("result")
            if tool.spec.only_known:
                value = self.references.only_known(value, tool.spec.only_known, state)
            result.content["result"] = self.references.present(value, state)
        return result

    def _count(self, turn: TurnRun, chunk: ChatChunk, call_record: dict[str, Any]) -> None:
        """A chunk's token counts into the call's record and the metrics."""
        if chunk.usage:
            self._usage(turn, chunk.usage, call_record)
        if chunk.timings:  # llama.cpp's server says how much of the prompt it had cached
            call_record.update(cached_tokens=chunk.timings.get("cache_n"),
                               prefill_tokens=chunk.timings.get("prompt_n"),
                               prefill_ms=round(chunk.timings.get("prompt_ms") or 0))

    @staticmethod
    def _usage(turn: TurnRun, usage: dict[str, Any], call_record: dict[str, Any]) -> None:
        prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        call_record.update(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)
        turn.tokens += completion
        LLM_TOKENS.labels("input").inc(prompt)
        LLM_TOKENS.labels("output").inc(completion)
        if cached:
            LLM_TOKENS.labels("cached").inc(cached)

    def _background_record(self, turn: TurnRun, outcome: str) -> None:
        self._in_background(self._store_record(turn, outcome))

    def _in_background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _prefill(self, history: SessionHistory, request: brain_pb2.RespondRequest) -> None:
        """While the caller listens, have the LLM server cache the next prompt's prefix (this
        reply included, as the next prompt will carry it), so at the endpoint only the caller's
        words are new.

        That prefix ends with the state block the next model call will most likely send
        (``policy.next_model_turn``: after a read-back, the one of a change to it, ~150 tokens
        with its references, 4-5 s of prefill on two cores that the change no longer waits
        for), then an empty user message: the template closes the message before it and opens
        the caller's next one as the next prompt will, so those tokens are cached too. When
        the next turn's block differs after all, the shared prefix still reaches where it
        differs."""
        messages = build_messages(self.system, history.turns, "", [], self._next_block(history, request),
                                  self.settings.recent_turns, self.settings.history_turns,
                                  preface=self._change_preface(history.state))
        # (The guard's prompt is the same every time: it stays cached in its own slot.)
        try:
            await self._prime(messages)
        except (LLMUnavailable, LLMRequestError) as exc:
            log.info("prefill after the reply failed", extra={"error": str(exc)})

    async def _prime(self, messages: list[dict[str, Any]]) -> None:
        async for _ in self.chat(messages, tools=self.tools.definitions() or None, max_tokens=1):
            pass

    async def _prime_words(self, request: brain_pb2.RespondRequest) -> None:
        """``Brain.Prefill``: the first prompt (and guard check) a turn on these words would
        send, built the way the turn builds it, so the turn's prompt starts with its tokens."""
        history = await asyncio.wait_for(self.store.load(request.user_id, request.session_id),
                                         self.settings.history_load_timeout_s)
        history.state.start_turn()
        turn = TurnRun(request, history, self.clock(), record={})
        # A change gets its own prompt; it is not screened at the start (``_screen_late``).
        if self._change_read_by_code(turn):
            await self._prime(self._change_messages(turn, self._next_block(history, request)))
            return
        primes = [self._prime(self._prompt(turn))]
        if self.guard is not None and not self._skips_guard(turn):
            primes.append(self.guard.prefill(request.text, request.language))
        await asyncio.gather(*primes)

    def _record_of(self, turn: TurnRun, outcome: str) -> dict[str, Any]:
        turn.record.update(outcome=outcome, ms=round((self.clock() - turn.started) * 1000))
        return turn.record

    async def _store_record(self, turn: TurnRun, outcome: str) -> None:
        try:
            await self.store.add_record(turn.request.user_id, turn.request.session_id,
                                        self._record_of(turn, outcome))
        except Exception:  # a lost record must not fail a turn
            log.exception("could not store the turn record")


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


def chunk_usage_seen(call_record: dict[str, Any]) -> bool:
    return "completion_tokens" in call_record
