"""The agent loop: one turn in, a streamed reply out.

Per turn:
1. The topic guard starts together with the main loop. Until it passes, the
   loop may think but its text is held back and its tools wait; if it blocks,
   the loop is cancelled, nothing is stored and a fixed sentence is spoken.
2. The main loop calls the LLM with the context in a fixed order (see
   context.py), streams speakable text, and runs the tools the model asked
   for (structured calls, or calls written as text), read-only ones at once.
3. Code stops the loop: caps on LLM calls, tokens, wall time, and a repeated
   identical call; then one last call without tools answers from what was found.
4. Only a completed turn is written to history (a cancelled one stores
   nothing), and every turn leaves a record of its LLM calls, tools and verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from services.brain.config import BrainSettings
from services.brain.context import build_messages
from services.brain.guard import GuardVerdict, TopicGuard
from services.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable
from services.brain.metrics import (
    GUARD_BLOCKS,
    LLM_CALL_SECONDS,
    LLM_FALLBACKS,
    LLM_TOKENS,
    LLM_TTFT_SECONDS,
    LOOP_STOPS,
)
from services.brain.policy import DialogPolicy, model_view
from services.brain.prompts import system_prompt
from services.brain.session_store import SessionHistory, SessionStore, Turn
from services.brain.spoken import SpokenTextCleaner
from services.brain.toolcalls import StructuredCallAccumulator, TextToolCallFilter, ToolCall
from services.brain.tools import Dispatcher, ToolContext, ToolRegistry, ToolResult
from voicebot.common.telemetry import tracer
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)
TRACER = tracer("voicebot.brain")
_END = object()
ANSWER_NOW = "Tools are no longer available this turn: answer the caller now from what you found."


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
    first_text_at: float | None = None
    record: dict[str, Any] = field(default_factory=dict)

    def reply(self) -> str:
        return "".join(self.spoken).strip()


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
    ) -> None:
        self.settings = settings
        self.chat = chat
        self.store = store
        self.tools = tools or ToolRegistry()
        self.dispatcher = Dispatcher(self.tools, sleep)
        self.guard = guard
        self.limits = limits or LoopLimits(settings.max_llm_calls, settings.max_turn_tokens,
                                           settings.max_turn_seconds)
        self.clock = clock
        self.system = system_prompt(settings.bot_name, settings.domain,
                                    frozenset(spec.name for spec in self.tools.specs()))
        self.policy = DialogPolicy(self)
        self._background: set[asyncio.Task] = set()

    async def warm_up(self) -> None:
        """Prefill the fixed start of every prompt (instructions and tool definitions) and the
        guard's prompt once at start, so the first caller does not pay a cold prefill
        (seconds on a CPU); the LLM server's prompt cache keeps them."""
        started = time.perf_counter()
        messages = build_messages(self.system, [], "Hello.", [], model_view({}))
        try:
            async for _ in self.chat(messages, tools=self.tools.definitions() or None, max_tokens=1):
                pass
            if self.guard is not None:
                await self.guard.check("Hello.")
        except (LLMUnavailable, LLMRequestError) as exc:
            log.warning("LLM warm-up failed; the first turn will be slower", extra={"error": str(exc)})
            return
        log.info("LLM prompt cache warmed", extra={"seconds": round(time.perf_counter() - started, 2)})

    # ---- the turn ------------------------------------------------------
    async def respond(self, request: brain_pb2.RespondRequest) -> AsyncIterator[brain_pb2.RespondEvent]:
        history = await self._load(request)
        turn = TurnRun(request, history, self.clock(), record={
            "turn_id": request.turn_id, "text": request.text, "llm_calls": [], "tools": []})
        events: asyncio.Queue = asyncio.Queue()
        passed = asyncio.Event()
        guard = asyncio.create_task(self.guard.check(request.text)) if self.guard else None
        if guard is None:
            passed.set()
        main = asyncio.create_task(self._main(turn, passed, events))
        recorded = False
        try:
            async for event in self._merge(turn, main, guard, passed, events):
                yield event
            if turn.record.get("guard", {}).get("allowed") is False:
                outcome = "blocked"
            else:
                outcome = "fallback" if turn.fallback else "completed"
                final = await self._finish(turn)
            recorded = True
            await self._store_record(turn, outcome)
            if outcome != "blocked":
                yield final
        finally:
            for task in (main, guard):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            if not recorded:
                # Cancelled (barge-in) or failed: recorded in the background, the turn is gone.
                self._background_record(turn, "cancelled")

    async def _load(self, request: brain_pb2.RespondRequest) -> SessionHistory:
        previous = request.previous_reply
        if previous.turn_id:
            def record_heard(history: SessionHistory) -> None:
                found = history.mark_spoken(previous.turn_id, previous.text, previous.interrupted)
                if not found and previous.interrupted and previous.user_text:
                    # Cut off before it completed, so never stored: keep the question and
                    # what was heard of the answer, marked interrupted.
                    history.turns.append(Turn(previous.turn_id, previous.user_text, previous.text,
                                              interrupted=True))

            return await self.store.update(request.user_id, request.session_id, record_heard)
        return await self.store.load(request.user_id, request.session_id)

    async def _merge(self, turn: TurnRun, main: asyncio.Task, guard: asyncio.Task | None,
                     passed: asyncio.Event, events: asyncio.Queue) -> AsyncIterator[brain_pb2.RespondEvent]:
        """Yield the main loop's events, held back until the guard passes."""
        held: list[brain_pb2.RespondEvent] = []
        ended = False
        getter: asyncio.Task | None = None
        try:
            while not (ended and passed.is_set()):
                waiting: set[asyncio.Task] = set()
                if not ended:
                    getter = getter or asyncio.create_task(events.get())
                    waiting.add(getter)
                if guard is not None and not passed.is_set():
                    waiting.add(guard)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if guard in done and not passed.is_set():
                    verdict = guard.result()
                    turn.record["guard"] = {"allowed": verdict.allowed, "reason": verdict.reason,
                                            "ms": round(verdict.seconds * 1000)}
                    if not verdict.allowed:
                        main.cancel()
                        yield self._blocked(turn, verdict)
                        return
                    passed.set()
                    for event in held:
                        yield event
                    held.clear()
                if getter is not None and getter in done:
                    item, getter = getter.result(), None
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

    def _blocked(self, turn: TurnRun, verdict: GuardVerdict) -> brain_pb2.RespondEvent:
        GUARD_BLOCKS.inc()
        log.info("turn blocked by the topic guard", extra={"turn_id": turn.request.turn_id,
                                                           "reason": verdict.reason})
        turn.record["reply"] = self.settings.blocked_text
        return brain_pb2.RespondEvent(turn_id=turn.request.turn_id, blocked=brain_pb2.Blocked(
            text=self.settings.blocked_text, reason="off_topic"))

    async def _finish(self, turn: TurnRun) -> brain_pb2.RespondEvent:
        request = turn.request
        reply = turn.reply() or self.settings.fallback_text
        turn.record["reply"] = reply
        # Reached only when the turn completed: nothing half-finished is stored.
        state = turn.history.state
        state.pop("note", None)  # a note is for this turn's model calls only
        stored = Turn(request.turn_id, request.text, reply, steps=turn.steps)
        await self.store.append_turn(request.user_id, request.session_id, stored, state=state)
        return brain_pb2.RespondEvent(turn_id=request.turn_id, final=brain_pb2.Final(
            text=reply, dialog_state=state.get("dialog_state", "listen"), fallback=turn.fallback))

    # ---- the main loop -------------------------------------------------
    async def _main(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> None:
        try:
            if not await self.policy.before_loop(turn, passed, events):
                await self._loop(turn, passed, events)
                await self.policy.after_loop(turn, events)
            if not turn.reply():
                await self._say(turn, events, self.settings.fallback_text)
            await events.put(_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - re-raised in respond(), not swallowed
            await events.put(exc)

    async def _loop(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> None:
        for index in range(self.limits.max_llm_calls):
            last = index == self.limits.max_llm_calls - 1 or turn.stop is not None
            use_tools = len(self.tools) > 0 and not last
            state = model_view(turn.history.state)
            if not use_tools and turn.steps:
                state["instruction"] = ANSWER_NOW
            messages = build_messages(self.system, turn.history.turns, turn.request.text, turn.steps,
                                      state, self.settings.recent_turns, self.settings.history_turns)
            outcome = await self._call_llm(turn, messages, use_tools, events)
            if outcome is None or not outcome[1] or last:
                return
            text, calls = outcome
            self._check_caps(turn, calls)
            await passed.wait()  # tools wait for the guard
            results = await self.run_tools(turn, text, calls, events)
            turn.steps += [r.message() for r in results]
        if turn.stop is None:
            turn.stop = "llm_calls"

    async def _call_llm(self, turn: TurnRun, messages: list[dict[str, Any]], use_tools: bool,
                        events: asyncio.Queue) -> tuple[str, list[ToolCall]] | None:
        """One streamed LLM call; returns (its text, its tool calls), or None after a fallback."""
        with TRACER.start_as_current_span("llm.call", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                "gen_ai.request.model": self.settings.llm_model,
                "gen_ai.request.max_tokens": self.settings.llm_max_tokens}) as span:
            outcome = await self._stream_llm(turn, messages, use_tools, events)
            record = turn.record["llm_calls"][-1]
            usage = {"gen_ai.usage.input_tokens": record.get("prompt_tokens"),
                     "gen_ai.usage.output_tokens": record.get("completion_tokens"),
                     "gen_ai.usage.cached_tokens": record.get("cached_tokens")}
            span.set_attributes({k: v for k, v in usage.items() if v is not None})
            span.set_attribute("voicebot.llm.tool_calls", len(outcome[1]) if outcome else 0)
            return outcome

    async def _stream_llm(self, turn: TurnRun, messages: list[dict[str, Any]], use_tools: bool,
                          events: asyncio.Queue) -> tuple[str, list[ToolCall]] | None:
        text_calls = TextToolCallFilter()
        structured = StructuredCallAccumulator()
        cleaner = SpokenTextCleaner(turn.request.language or "en")
        said: list[str] = []
        started = time.perf_counter()
        call_record: dict[str, Any] = {"messages": len(messages), "tools": use_tools}
        turn.record["llm_calls"].append(call_record)
        try:
            async for chunk in self.chat(messages, tools=self.tools.definitions() if use_tools else None):
                structured.add(chunk.tool_calls)
                if chunk.usage:
                    self._usage(turn, chunk.usage, call_record)
                speakable = cleaner.clean(text_calls.push(chunk.text))
                if speakable:
                    call_record.setdefault("ttft_ms", round((time.perf_counter() - started) * 1000))
                    await self._say(turn, events, speakable, new_part=not said)
                    said.append(speakable)
            rest, recovered = text_calls.finish()
            rest = cleaner.clean(rest) + cleaner.flush()
            if rest.strip():
                await self._say(turn, events, rest, new_part=not said)
                said.append(rest)
        except (LLMUnavailable, LLMRequestError) as exc:
            level = logging.ERROR if isinstance(exc, LLMRequestError) else logging.WARNING
            log.log(level, "llm failed; speaking the fallback", extra={"error": str(exc)})
            LLM_FALLBACKS.inc()
            turn.fallback = True
            call_record["error"] = str(exc)
            await self._say(turn, events, self.settings.fallback_text, new_part=True)
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

    async def run_tools(self, turn: TurnRun, text: str, calls: list[ToolCall],
                         events: asyncio.Queue) -> list[ToolResult]:
        turn.steps.append({"role": "assistant", "content": text,
                           "tool_calls": [call.as_message() for call in calls]})
        request = turn.request
        ctx = ToolContext(request.user_id, request.session_id, request.turn_id, turn.history.state)
        if turn.stop == "repeated_call":
            # Not run again; every call still gets a result, so history has no orphan call.
            results = [ToolResult(c, "refused", {"ok": False, "error": "repeated call; not run again"})
                       for c in calls]
        else:
            for call in calls:
                await events.put(brain_pb2.RespondEvent(turn_id=request.turn_id, tool=brain_pb2.ToolActivity(
                    tool=call.name, status="started")))
            # Calls of one step run concurrently (the dispatcher refuses irreversible ones).
            results = list(await asyncio.gather(*(self.dispatcher.execute(c, ctx) for c in calls)))
        for result in results:
            turn.record["tools"].append({"name": result.call.name, "arguments": result.call.arguments,
                                         "outcome": result.outcome, "attempts": result.attempts})
            await events.put(brain_pb2.RespondEvent(turn_id=request.turn_id, tool=brain_pb2.ToolActivity(
                tool=result.call.name, status=result.outcome)))
        return results

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
        task = asyncio.create_task(self._store_record(turn, outcome))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _store_record(self, turn: TurnRun, outcome: str) -> None:
        turn.record.update(outcome=outcome, ms=round((self.clock() - turn.started) * 1000))
        try:
            await self.store.add_record(turn.request.user_id, turn.request.session_id, turn.record)
        except Exception:  # a lost record must not fail a turn
            log.exception("could not store the turn record")


def chunk_usage_seen(call_record: dict[str, Any]) -> bool:
    return "completion_tokens" in call_record
