"""gRPC Brain service: validates the request, then streams the agent's events."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import redis.asyncio as aioredis
from opentelemetry.trace import SpanKind
from redis.exceptions import RedisError

from voicebot.brain.act.toolbox import build_registry
from voicebot.brain.act.tools import ToolRegistry
from voicebot.brain.business.knowledge import KnowledgeIndex
from voicebot.brain.business.profile import Profile, ProfileError, load_profile
from voicebot.brain.business.tasks import TaskError
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.read.sentence_encoder import (
    SentenceEncoder,
)
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import ReadAhead, SessionStore
from voicebot.brain.startup import (
    OtherLanguages,
    guard_screen,
    knowledge_in_languages,
    knowledge_index,
    sentence_encoder,
)
from voicebot.common import event_loop
from voicebot.common.grpc_server import IdleCalls, serve_forever
from voicebot.common.logs import setup_logging
from voicebot.common.metrics import REDIS_ERRORS
from voicebot.common.redis import connect_redis
from voicebot.common.telemetry import (
    ids,
    incoming_context,
    record_content,
    setup_tracing,
    shutdown_tracing,
    tracer,
)
from voicebot.v1 import brain_pb2, brain_pb2_grpc

log = logging.getLogger("brain")
TRACER = tracer("voicebot.brain")
MAX_TEXT_CHARS = 2000
MAX_CONTEXT_ENTRIES = 20
MAX_CONTEXT_CHARS = 200


def validate(request: brain_pb2.RespondRequest, ids_required=("session_id", "turn_id", "user_id")
             ) -> str | None:
    for name in ids_required:
        if not getattr(request, name):
            return f"{name} is required"
    if not request.text.strip():
        return "text is empty"
    if len(request.text) > MAX_TEXT_CHARS:
        return f"text is over {MAX_TEXT_CHARS} characters"
    context = request.session_context
    if len(context) > MAX_CONTEXT_ENTRIES or any(
            len(k) > MAX_CONTEXT_CHARS or len(v) > MAX_CONTEXT_CHARS for k, v in context.items()):
        return f"session_context: at most {MAX_CONTEXT_ENTRIES} entries of {MAX_CONTEXT_CHARS} characters"
    return None


class BrainServicer(brain_pb2_grpc.BrainServicer):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.idle_calls = IdleCalls()  # Converse calls still waiting for their start

    async def Respond(self, request: brain_pb2.RespondRequest, context: grpc.aio.ServicerContext,
                      committed: asyncio.Event | None = None, ahead: ReadAhead | None = None):
        problem = validate(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        parent = incoming_context(context.invocation_metadata())
        attributes = ids(request.session_id, request.turn_id)
        if record_content():  # speech stays out of traces unless an operator opts in
            attributes["voicebot.turn.text"] = request.text
        try:
            with TRACER.start_as_current_span("brain.respond", context=parent, kind=SpanKind.SERVER,
                                              attributes=attributes):
                async for event in self.agent.respond(request, committed, ahead):
                    yield event
        except RedisError as exc:
            REDIS_ERRORS.labels("brain").inc()
            log.error("session store unavailable", extra={"error": repr(exc)})
            await context.abort(grpc.StatusCode.UNAVAILABLE, "session store unavailable")


    async def Prefill(self, request: brain_pb2.RespondRequest,
                      context: grpc.aio.ServicerContext) -> brain_pb2.PrefillResult:
        """The caller's words so far: cached on the LLM server in the background (prefill.py)."""
        problem = validate(request, ids_required=("session_id", "user_id"))
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return brain_pb2.PrefillResult(started=self.agent.words_prefill.start(request))

    async def Converse(self, requests: AsyncIterator[brain_pb2.ConverseRequest],
                       context: grpc.aio.ServicerContext):
        """A turn streamed at once and committed (tools, writes, history) by a later message: a
        preemptive one, or one whose call was opened before its words (voicebot/gateway/standby.py), then
        committed at once; a half-close without a commit discards it, like a cancel. A call opened
        ahead of its words may begin with ``prepare``: the session is read then, off the turn's
        path, and the turn starts from that read (``Agent.read_ahead``)."""
        # The headers go now: a call opened ahead of its turn then gets its first event without
        # them, one message fewer on the turn's path.
        await context.send_initial_metadata(())
        first = await self.idle_calls.first(requests, context)
        ahead = None
        if first is not None and first.WhichOneof("request") == "prepare":
            ahead = await self._read_ahead(first.prepare, context)
            try:
                first = await self.idle_calls.first(requests, context)
            finally:
                if first is None or first.WhichOneof("request") != "start":
                    ahead.cancel()  # no turn came for it (a false start, a drain, a bad message)
        if first is None or first.WhichOneof("request") != "start":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "the first message must be start (or prepare, then start)")
        committed, ended = asyncio.Event(), asyncio.Event()
        if first.committed:
            committed.set()  # started at the endpoint: nothing can discard it, nothing to read
        turn = aiter(self.Respond(first.start, context, committed, ahead))
        # Every step of the turn runs in this one context: the span Respond makes current is
        # attached in one step and detached in another (OpenTelemetry cannot detach a context
        # attached in a different one: "Failed to detach context" on every discarded turn).
        steps = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        # The first step goes before the reader: the caller waits on it. ``anext``'s default
        # marks the turn's end: a StopAsyncIteration caught here held this frame in a cycle
        # (frame, task, exception, traceback), and with it the call's whole state until the
        # collector ran (~25 objects a turn; ~4,500 in each young collection at 200 sessions).
        step = loop.create_task(anext(turn, TURN_OVER), context=steps)
        reader = None if committed.is_set() else asyncio.create_task(
            _read_commit(requests, committed, ended))
        try:
            while True:
                # Once committed nothing can discard the turn (a cancel ends this handler).
                if not committed.is_set() and not await _stepped(step, committed, ended):
                    step.cancel()  # the client gave up on it before committing: drop the turn
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await step
                    return
                event = await step
                if event is TURN_OVER:
                    await _half_closed(requests, reader)
                    return
                yield event
                step = loop.create_task(anext(turn, TURN_OVER), context=steps)
        finally:
            if reader is not None:
                reader.cancel()
            if not step.done():  # cancelled (discarded) while it ran the turn
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                    await step
            with contextlib.suppress(RuntimeError):  # a generator a cancelled step left running
                await loop.create_task(turn.aclose(), context=steps)  # its span ends where it began

    async def _read_ahead(self, prepare: brain_pb2.Prepare,
                          context: grpc.aio.ServicerContext) -> ReadAhead:
        if not prepare.session_id or not prepare.user_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "prepare: session_id and user_id are required")
        return self.agent.read_ahead(prepare.user_id, prepare.session_id)


HALF_CLOSE_WAIT_S = 1.0
TURN_OVER = object()  # what a finished turn's last step gives (see ``Converse``)


async def _read_commit(requests: AsyncIterator[brain_pb2.ConverseRequest], committed: asyncio.Event,
                       ended: asyncio.Event) -> None:
    try:
        async for message in requests:
            if message.WhichOneof("request") == "commit":
                committed.set()
    finally:
        ended.set()


async def _half_closed(requests: AsyncIterator[brain_pb2.ConverseRequest],
                       reader: asyncio.Task | None) -> None:
    """The turn is over: the call ends once the client has half-closed (it does so right after
    its last message), or after ``HALF_CLOSE_WAIT_S``. A server that ends a call its client is
    still writing resets the stream, and grpc.aio's client then reports a write still in
    flight (the commit behind a committed start, or the half-close) as INTERNAL, "Internal error
    from Core", in place of the call's OK (grpc/grpc#36066): the gateway heard the whole reply
    and still counted the turn as failed, whenever the client's next write came right behind its
    start."""
    # The turn is whole whatever the rest of the call does: a read that fails ends the wait.
    with contextlib.suppress(Exception):
        async with asyncio.timeout(HALF_CLOSE_WAIT_S):
            if reader is not None:
                await asyncio.wait({reader})  # it reads to the half-close already
            else:
                async for _ in requests:  # what is left: a commit for older brains, then the end
                    pass


async def _stepped(step: asyncio.Future, committed: asyncio.Event, ended: asyncio.Event) -> bool:
    """True once ``step`` is done; False when the client half-closed without a commit first."""
    discarded = asyncio.ensure_future(_discarded(committed, ended))
    try:
        done, _ = await asyncio.wait({step, discarded}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        discarded.cancel()
    return step in done


async def _discarded(committed: asyncio.Event, ended: asyncio.Event) -> None:
    """Returns once the client half-closed without committing."""
    await ended.wait()
    if committed.is_set():
        await asyncio.Event().wait()  # committed: never discarded


def chat_client(settings: BrainSettings, base_url: str, temperature: float,
                extra_body: dict[str, Any] | None = None) -> OpenAIChatClient:
    return OpenAIChatClient(
        base_url, settings.llm_model, settings.llm_api_key, settings.llm_max_tokens, temperature,
        settings.llm_deadline_s, settings.llm_first_token_timeout_s,
        probe_after_s=settings.llm_probe_after_s, probe_timeout_s=settings.llm_probe_timeout_s,
        extra_body=extra_body, plain_http=settings.llm_http == "plain",
    )


def build_agent(settings: BrainSettings, profile: Profile, tools: ToolRegistry,
                knowledge: KnowledgeIndex | None = None, encoder: SentenceEncoder | None = None,
                others: OtherLanguages | None = None,
                ) -> tuple[Agent, list[OpenAIChatClient], aioredis.Redis]:
    chat = chat_client(settings, settings.llm_base_url, settings.llm_temperature, settings.llm_extra_body)
    clients = [chat]
    guard = None
    if settings.guard_enabled and profile.guard.enabled:
        guard_chat = chat_client(settings, settings.guard_llm_base_url or settings.llm_base_url, 0.0,
                                 settings.guard_extra_body)
        clients.append(guard_chat)
        # The same examples by the other languages' encoder (one, shared): Korean turns are
        # screened by meaning against them.
        other_encoders = dict.fromkeys(others.encoders.values()) if others else {}
        other_screens = tuple(screen for e in other_encoders
                              if (screen := guard_screen(settings, profile, e)) is not None)
        guard = TopicGuard(guard_chat, profile.purpose, profile.guard.timeout_s, profile.guard.allow,
                           profile.guard.block, profile.guard.block_above,
                           guard_screen(settings, profile, encoder), other_screens)
    side_chat = None
    if settings.side_extra_body:
        side_chat = chat_client(settings, settings.llm_base_url, settings.llm_temperature,
                                settings.side_extra_body)
        clients.append(side_chat)
    # Bounded reconnects, the password, health checks.
    redis = connect_redis(settings.redis_url.get_secret_value())
    store = SessionStore(redis, settings.session_ttl_s, lease_s=settings.session_lease_s)
    pinned = settings.today
    agent = Agent(settings, chat, store, tools=tools, guard=guard, profile=profile, side_chat=side_chat,
                  knowledge=knowledge, encoder=encoder,
                  knowledge_in=others.knowledge if others else None,
                  encoders_in=others.encoders if others else None,
                  today=(lambda: pinned) if pinned else datetime.date.today)
    return agent, clients, redis


def startup_profile(settings: BrainSettings) -> Profile:
    """The profile named by BRAIN_PROFILE; a bad one stops the start with the field named."""
    return load_profile(settings.profile) if settings.profile else Profile()


async def run(settings: BrainSettings) -> None:
    profile = startup_profile(settings)
    tools, sources = await build_registry(profile, settings.mcp_connect_wait_s)
    encoder = sentence_encoder(settings, profile)
    knowledge = await knowledge_index(profile, encoder)
    others = await knowledge_in_languages(profile, encoder)
    profile = others.profile
    try:
        agent, clients, redis = build_agent(settings, profile, tools, knowledge, encoder, others)
    except TaskError as exc:
        raise ProfileError(str(exc)) from None
    await redis.ping()  # fail at start, not at the first turn, when Redis is missing
    log.info("profile loaded", extra={"profile": settings.profile or "(generic)", "bot": profile.name,
                                      "tools": [spec.name for spec in tools.specs()]})

    servicer = BrainServicer(agent)

    def register(server: grpc.aio.Server) -> list[str]:
        brain_pb2_grpc.add_BrainServicer_to_server(servicer, server)
        return [brain_pb2.DESCRIPTOR.services_by_name["Brain"].full_name]

    async def on_stop() -> None:
        for client in clients:
            await client.aclose()
        for source in sources:
            await source.aclose()
        await redis.aclose()
        for index in [knowledge, *others.knowledge.values()]:
            if index is not None:
                await index.aclose()
        shutdown_tracing()

    # Before serving: the first caller then finds the prompt prefix cached. Bounded, so an
    # LLM that is slow to come up delays readiness, not forever.
    try:
        await asyncio.wait_for(agent.warm_up(), settings.warm_up_timeout_s)
    except TimeoutError:
        log.warning("LLM warm-up did not finish in time; serving anyway")
    await serve_forever("brain", settings, register, on_stop, servicer.idle_calls)


def main() -> None:
    settings = BrainSettings()
    setup_logging("brain", settings.log_level, settings.log_json)
    setup_tracing("brain")
    try:
        event_loop.run(run(settings), settings.loop, "BRAIN_LOOP")
    except ProfileError as exc:
        log.error("bad profile", extra={"error": str(exc)})
        raise SystemExit(f"brain: {exc}") from None


if __name__ == "__main__":
    main()
