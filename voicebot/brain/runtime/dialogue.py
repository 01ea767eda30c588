"""A turn's stages carried out: read (``read/turn_reading.py``) -> decide (``decide/``) -> act -> speak.

Code decides everything: ``Conversation.decide`` turns the reading and the state into one
decision of a closed set (``decide/decisions.py``), and ``carry_out`` here is the one place each
is carried out: a ``Find`` calls a read-only tool and the form's step is taken again with its
result; ``Run`` runs the confirmed action once, holding the session until its outcome is stored
and outliving a cancelled turn; ``Answer`` answers from the business's knowledge only
(``act/answers.py``); the rest is said. The model only reads; nothing it writes is spoken or
run. The session runtime around the turn (history, lease, guard, urgent check, merging,
storing) is ``turn_runtime.py``.
"""


from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from voicebot.brain.act.actions import Actions, WriteOutcome
from voicebot.brain.act.answerable import ModelAnswerCheck
from voicebot.brain.act.answers import Answers, KnowledgeSearch
from voicebot.brain.act.toolcalls import ToolCall, new_call_id
from voicebot.brain.act.tools import Dispatcher, ToolContext, ToolKind, ToolRegistry, ToolResult
from voicebot.brain.business.profile import Profile
from voicebot.brain.business.references import References
from voicebot.brain.business.tasks import TaskError, build_tasks
from voicebot.brain.config import BrainSettings
from voicebot.brain.decide.conversation import Conversation, TurnFacts
from voicebot.brain.decide.decisions import (
    Answer,
    Decision,
    Fallback,
    Find,
    Handoff,
    Run,
    name_of,
    text_of,
)
from voicebot.brain.decide.form import Forms, Lookups
from voicebot.brain.decide.state import PendingAction, SessionState
from voicebot.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable
from voicebot.brain.metrics import (
    HANDOFFS,
    KNOWLEDGE_ANSWERS,
    LLM_FALLBACKS,
    LLM_TTFT_SECONDS,
    READINGS,
)
from voicebot.brain.read.dialog import handoff_summary
from voicebot.brain.read.reading import IntentPicker, Reader, Reading, intent_examples
from voicebot.brain.read.sentence_encoder import SentenceEncoder
from voicebot.brain.read.turn_reading import TurnReader
from voicebot.brain.read.urgent import UrgentScreen
from voicebot.brain.runtime.session_lease import Lease
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.brain.runtime.turn_gate import _END
from voicebot.brain.runtime.turn_run import TurnRun
from voicebot.brain.speak.spoken import SpokenTextCleaner
from voicebot.common.telemetry import tracer
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)
TRACER = tracer("voicebot.brain")


class Dialogue:
    """A business's dialogue: the turn's stages, carried out for the session runtime
    (``turn_runtime.py``), which owns everything around them."""

    def __init__(
        self,
        settings: BrainSettings,
        chat: ChatFunction,
        store: SessionStore,
        profile: Profile,
        tools: ToolRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        side_chat: ChatFunction | None = None,
        knowledge: KnowledgeSearch | None = None,
        encoder: SentenceEncoder | None = None,
        today: Callable[[], datetime.date] = datetime.date.today,
        business_language: str | None = None,
    ) -> None:
        self.settings = settings
        self.profile = profile
        self.sentences = self.profile.sentences
        self.chat = chat
        # Short side calls, on a slot of their own where the server has slots.
        self.side_chat = side_chat or chat
        self.store = store
        self.references = References(self.profile.references, self.profile.hidden_fields)
        self.tools = tools or ToolRegistry()
        self.dispatcher = Dispatcher(self.tools, sleep)
        language = self.profile.languages[0]  # this dialogue's: the profile is in its language
        # A tool server's own sentences are in the business's first language: said only in it.
        server_words = business_language in (None, language)
        errors = self._error_rules()
        self.actions = Actions(self.dispatcher, self.references, self.sentences, store, language,
                               errors, server_words)
        self.clock = clock
        tasks = build_tasks(self.profile, self.tools)
        self.forms = Forms(tasks, self.sentences, self.references, today, errors, language, server_words)
        picker = IntentPicker(encoder, intent_examples(self.profile, tasks)) if encoder else None
        self.reader = Reader(chat, tasks, f"{self.profile.name}, {self.profile.purpose}", picker,
                             settings.reading_timeout_s, settings.llm_model)
        check = (ModelAnswerCheck(self.side_chat, settings.answer_check_timeout_s)
                 if settings.answer_check == "model" else None)
        self.answers = Answers(knowledge, self.sentences, lambda: self.conversation.can_help(),
                               knowledge_tools(self.profile, self.tools), self.profile.knowledge.min_score,
                               check, settings.answer_check_passages, language)
        self.conversation = Conversation(self.profile, self.forms)
        self.turn_reader = TurnReader(self.reader, self.answers.best_score, self.sentences.anything_else,
                                      today)
        self._background: set[asyncio.Task] = set()

    def still_asked(self, state: SessionState) -> str:
        """The read-back or question the caller has not answered yet ("" if none)."""
        return self.conversation.still_asked(state)

    def _error_rules(self) -> dict[str, dict[str, Any]]:
        """Per tool, what its errors mean, with the sentences in this dialogue's language (the
        profile's ``errors`` maps, translated by ``translations.<language>.tool_errors``)."""
        rules = {spec.name: spec.errors for spec in self.tools.specs() if spec.errors}
        for server in self.profile.mcp_servers:
            rules.update({tool: rule.errors for tool, rule in server.tools.items() if rule.errors})
        return rules

    async def warm_up(self) -> None:
        """Prefill the reading prompt's fixed start once at start, so the first caller does not pay
        a cold prefill (seconds on a CPU); the LLM server's prompt cache keeps it."""
        started = time.perf_counter()
        messages = [{"role": "system", "content": self.reader.system_prompt()},
                    {"role": "user", "content": "The caller said: Hello."}]
        warmed = await self.warm("the reading prompt", lambda: self._prime(messages))
        if warmed:
            log.info("LLM prompt cache warmed", extra={"seconds": round(time.perf_counter() - started, 2)})

    @staticmethod
    async def warm(what: str, prime: Callable[[], Awaitable[Any]], attempts: int = 3) -> bool:
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

    async def run(self, turn: TurnRun, passed: asyncio.Event, events: asyncio.Queue) -> None:
        """One turn: its events onto ``events``, then ``_END`` (an exception instead, if it failed)."""
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
        """Read, decide, act, speak: the words are read (``read/turn_reading.py``), code decides
        one step (``decide/conversation.py``), and this carries it out."""
        if turn.preface:
            await self.say(turn, events, turn.preface)
        facts = TurnFacts(turn.request.turn_id, turn.last_turn(), turn.request.previous_reply,
                          dict(turn.request.session_context))
        reading, decision = await self._read_and_decide(turn, facts)
        self._record_reading(turn, reading)
        await self.carry_out(turn, [decision], facts, passed, events)

    async def _read_and_decide(self, turn: TurnRun, facts: TurnFacts) -> tuple[Reading, Decision]:
        state, text, language = turn.state, turn.request.text, turn.language
        if turn.finished is not None and state.pending is None and state.form is None:
            trial, reading = await self.turn_reader.read_against(state, turn.finished, text,
                                                                 turn.before_model, language)
            changed = self.conversation.change_to_finished(state, trial, reading, facts)
            if changed is not None:
                return reading, changed
        reading = await self.turn_reader.read(state, text, turn.before_model, language)
        return reading, self.conversation.decide(state, reading, facts)

    async def carry_out(self, turn: TurnRun, decisions: list[Decision], facts: TurnFacts,
                        passed: asyncio.Event, events: asyncio.Queue) -> None:
        """The one processor of decisions (``decide/decisions.py``): a ``Find`` is called and the
        form's step taken again with its result; ``Run`` waits for the topic guard, runs the
        action once and carries out what its outcome decides; the rest is said."""
        for decision in decisions:
            decision = await self._found(turn, decision, passed, events)
            self._record_decision(turn, decision)
            match decision:
                case Handoff(reason=reason, text=text):
                    await self.handoff(turn, events, reason, text)
                case Run(action=action):
                    await passed.wait()  # no write before the topic guard has passed the turn
                    outcome = await self._execute(turn, action)
                    follow = self.conversation.after_write(turn.state, outcome, facts)
                    await self.carry_out(turn, follow, facts, passed, events)
                case Answer(question=question, then=then):
                    await self._answer(turn, events, question, then, passed)
                case Fallback(text=text):
                    LLM_FALLBACKS.inc()
                    turn.fallback = True
                    await self.say(turn, events, text)
                case _:
                    await self.say(turn, events, text_of(decision))

    async def _found(self, turn: TurnRun, decision: Decision, passed: asyncio.Event,
                     events: asyncio.Queue) -> Decision:
        """The read-only tools the form's step needs, called until the step is taken."""
        found: Lookups = {}
        while isinstance(decision, Find):
            await passed.wait()  # tools wait for the topic guard
            found[decision.key] = await self._read_tool(turn, decision.tool, decision.args, events)
            decision = self.forms.next_step(turn.state, turn.request.turn_id, found)
        return decision

    async def _answer(self, turn: TurnRun, events: asyncio.Queue, question: str, then: str,
                      passed: asyncio.Event) -> None:
        """A question answered from the business's knowledge only, then code's question again."""
        async def read(name: str, arguments: dict[str, Any]) -> ToolResult:
            await passed.wait()  # a knowledge tool waits for the topic guard too
            return await self._read_tool(turn, name, arguments, events)

        answer = await self.answers.answer(question, turn.request.language or "en", read)
        turn.record["answer"] = answer.record
        KNOWLEDGE_ANSWERS.labels("yes" if answer.known else "no").inc()
        said = answer.text if answer.known or not then else self.sentences.unknown_fact
        if not answer.known and not then and turn.state.form is None:
            turn.state.understood(False)
        await self.say(turn, events, " ".join(filter(None, [said, then])))

    def _record_reading(self, turn: TurnRun, reading: Reading) -> None:
        """How the words were read; the values themselves stay out of the record (personal
        data): only which fields were read, and by what."""
        READINGS.labels(reading.by).inc()
        turn.record["reading"] = {"intent": reading.intent, "by": reading.by,
                                  "fields": sorted(reading.values),
                                  **{k: v for k, v in reading.record.items() if k != "reading"}}

    def _record_decision(self, turn: TurnRun, decision: Decision) -> None:
        turn.record.setdefault("decision", name_of(decision))  # the turn's own decision comes first
        form = turn.state.form
        if form is not None:
            turn.record["form"] = {"task": form.task, "have": sorted(form.values), "asking": form.asking}

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

    async def _prime(self, messages: list[dict[str, Any]]) -> None:
        async for _ in self.chat(messages, max_tokens=1):
            pass

    async def prime_words(self, request: brain_pb2.RespondRequest) -> None:
        """``Brain.Prefill``: the caller's words so far. Knowledge retrieval starts on them, so
        a question finds its passage already searched at the endpoint."""
        self.answers.prefetch(request.text)


def urgent_screen(profile: Profile, encoder: SentenceEncoder | None, chat: ChatFunction,
                  timeout_s: float = 8.0) -> UrgentScreen | None:
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
