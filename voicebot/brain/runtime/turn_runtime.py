"""The session runtime of a turn, apart from the dialogue (``dialogue.py``): what makes one turn
safe to run next to others, whatever the dialogue decides.

Per turn:
1. The session's history is read with its lease (``session_lease.py``), or taken from a read
   made ahead while the caller spoke and confirmed current before anything leaves the brain.
2. Before anything else, the profile's urgent situations are checked (``urgent.py``); an urgent
   turn's reply is the situation's sentence, over everything below.
3. The topic guard starts together with the turn (unless the words are a short dialogue act
   inside an ongoing task). Until it passes, text is held back and tools wait; if it blocks,
   the turn is cancelled, nothing is stored and a fixed sentence is spoken.
4. The dialogue's events are merged into one stream (text deltas already waiting go out as
   one message).
5. Only a completed turn is written to history, with its record, in one Redis step; a
   cancelled one stores nothing but its record. A write that finished while the caller spoke
   over it is told first in the next reply (``_compose``).
"""


from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol

from redis.exceptions import RedisError

from voicebot.brain.config import BrainSettings
from voicebot.brain.decide.state import Outcome, SessionState
from voicebot.brain.read.guard import GuardVerdict, TopicGuard
from voicebot.brain.read.refusals import is_refusal
from voicebot.brain.read.urgent import UrgentScreen
from voicebot.brain.runtime.prefill import WordsPrefill, key_of
from voicebot.brain.runtime.session_lease import Lease, SessionBusy
from voicebot.brain.runtime.session_store import ReadAhead, SessionHistory, SessionStore, Turn
from voicebot.brain.runtime.turn_gate import TurnGate
from voicebot.brain.runtime.turn_run import StaleRead, TurnRun
from voicebot.common.metrics import REDIS_ERRORS
from voicebot.common.speech_text import spoken_words
from voicebot.common.telemetry import tracer
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)
TRACER = tracer("voicebot.brain")


class Dialogue(Protocol):
    """What the runtime needs of a dialogue (``dialogue.py``): a turn's work, and the caller's
    words so far while they still speak."""

    async def run(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> None: ...

    async def prime_words(self, request: brain_pb2.RespondRequest) -> None: ...


class SessionRuntime(TurnGate):
    """The runtime of every turn of a session, around a dialogue whose inside it does not know
    (as LiveKit's ``AgentSession`` runs an ``Agent``)."""

    def __init__(self, dialogues: dict[str, Dialogue], settings: BrainSettings, store: SessionStore,
                 profile: Any, guard: TopicGuard | None = None, urgent: UrgentScreen | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # One dialogue per language the business speaks, the first language's first.
        self.dialogues = dialogues
        self.settings, self.store, self.profile = settings, store, profile
        self.sentences = profile.sentences
        self.guard, self.urgent, self.clock = guard, urgent, clock
        self.words_prefill = WordsPrefill(self._prime_words, settings.prefill_on_words_max)
        self._background: set[asyncio.Task] = set()

    def dialogue_in(self, language: str) -> Dialogue:
        return self.dialogues.get(language) or next(iter(self.dialogues.values()))

    def sentences_in(self, language: str) -> Any:
        """The business's sentences in a turn's language."""
        return getattr(self.dialogue_in(language), "sentences", self.sentences)

    def still_asked_in(self, language: str, state: SessionState) -> str:
        """What the caller was asked and has not answered, in a turn's language."""
        return self.dialogue_in(language).still_asked(state)

    async def _main(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> None:
        await self.dialogue_in(turn.language).run(turn, passed, events)

    async def _prime_words(self, request: brain_pb2.RespondRequest) -> None:
        await self.dialogue_in(self.language_of(request.language)).prime_words(request)

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
        text = self.sentences_in(self.language_of(request.language)).still_working
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
            fallback = self.sentences_in(self.language_of(request.language)).fallback
            yield brain_pb2.RespondEvent(turn_id=request.turn_id, delta=brain_pb2.TextDelta(text=fallback))
            yield brain_pb2.RespondEvent(turn_id=request.turn_id, final=brain_pb2.Final(
                text=fallback, dialog_state="listen", fallback=True))
            return
        history.state.start_turn()
        turn = TurnRun(request, history, self.clock(), record={
            "turn_id": request.turn_id, "text": request.text, "llm_calls": [], "tools": []},
            lease=lease, language=self.language_of(request.language))
        self._compose(turn)
        events: asyncio.Queue = asyncio.Queue()
        passed = asyncio.Event()
        guard = None
        if self.urgent is not None or self.guard is not None:  # what a block or an urgent reply keeps
            turn.state_before = turn.state.model_copy(deep=True)
        if self.urgent is not None:
            turn.urgent_checked.clear()  # set once the urgent check is done (``_urgent_first``)
        if self.guard is not None and not self._skips_guard(turn):
            # The turn's model reading waits for the screen (a few ms; ``guard_screen_first``):
            # when the LLM must judge, the guard's call reaches the LLM server first and the two
            # prefill in one batch, rather than the guard's behind the reading's.
            if self.settings.guard_screen_first:
                turn.guard_asked.clear()
            # The guard's LLM call waits for the urgent check's (the turn's reading does too).
            guard = asyncio.create_task(self.guard.check(
                request.text, request.language, asking=turn.guard_asked.set,
                before_model=turn.urgent_checked.wait if self.urgent is not None else None))
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
                if turn.urgent.handoff:
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
            said = self.sentences_in(turn.language).unknown_outcome
            state.untold = Outcome(action_id=action.id, say=said, turn_id=turn_id)
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
        return said is not None and _said_in(untold.say, said.assistant, turn.language)


    async def _finish(self, turn: TurnRun, outcome: str) -> tuple[brain_pb2.RespondEvent, bool]:
        """The turn stored, with its record in the same Redis step; the final event, and whether
        the record was stored (not when the history's write failed: ``_store_record`` tries)."""
        request = turn.request
        reply = turn.reply() or self.sentences_in(turn.language).fallback
        turn.record["reply"] = reply
        turn.record["dialog_state"] = turn.state.mode.value
        # Reached only when the turn completed: nothing half-finished is stored.
        stored = Turn(request.turn_id, request.text, reply, refused=is_refusal(reply, turn.language))
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

    def _background_record(self, turn: TurnRun, outcome: str) -> None:
        self._in_background(self._store_record(turn, outcome))

    def _in_background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _record_of(self, turn: TurnRun, outcome: str) -> dict[str, Any]:
        turn.record.update(outcome=outcome, ms=round((self.clock() - turn.started) * 1000))
        return turn.record

    async def _store_record(self, turn: TurnRun, outcome: str) -> None:
        try:
            await self.store.add_record(turn.request.user_id, turn.request.session_id,
                                        self._record_of(turn, outcome))
        except Exception:  # a lost record must not fail a turn
            log.exception("could not store the turn record")


def _record_heard(previous: brain_pb2.SpokenPart) -> Callable[[SessionHistory], None]:
    def record_heard(history: SessionHistory) -> None:
        found = history.mark_spoken(previous.turn_id, previous.text, interrupted=True)
        if not found and previous.user_text:
            # Cut off before it completed, so never stored: keep the question and what was
            # heard of the answer, marked interrupted.
            history.turns.append(Turn(previous.turn_id, previous.user_text, previous.text,
                                      interrupted=True))

    return record_heard


def _said_in(sentence: str, reply: str, language: str = "en") -> bool:
    """Whether ``reply`` (what the caller heard of it) holds all of ``sentence``."""
    return spoken_words(sentence, language) in spoken_words(reply, language)


