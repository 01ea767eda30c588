"""An LLM server that fails is heard within 2 s, and never leaves the session in handoff.

Real HTTP throughout: a port nobody listens on (the server is down), a server
that accepts connections and never answers (hung: SIGSTOP looks like this),
the scripted model answering 429 with Retry-After, or thinking slowly while
it still answers the liveness probe. Times are measured with the real clock
and asserted with margin for a loaded machine; the figures are printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import uuid

import pytest
import redis.asyncio as aioredis

from voicebot.brain.business.profile import Profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import LLMUnavailable, OpenAIChatClient
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.devstack import free_port
from voicebot.v1 import brain_pb2

FALLBACK = Profile().sentences.fallback
BOUND_S = 2.0  # the target; asserted with a margin for a loaded 2-core machine
MARGIN_S = 1.0


class HungServer:
    """Accepts TCP connections and never answers: a process that stopped."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def hung():
    server = HungServer()
    yield f"http://127.0.0.1:{server.port}/v1"
    server.close()


def settings_for(url: str) -> BrainSettings:
    return BrainSettings(llm_base_url=url)  # the product's defaults: deadline and probe


def agent_for(url: str, store: SessionStore, guard: bool = False) -> tuple[Agent, list[OpenAIChatClient]]:
    settings = settings_for(url)
    chat = OpenAIChatClient(url, "m", deadline_s=settings.llm_deadline_s,
                            probe_after_s=settings.llm_probe_after_s,
                            probe_timeout_s=settings.llm_probe_timeout_s)
    guard_check = TopicGuard(chat, "answering questions") if guard else None
    return Agent(settings, chat, store, guard=guard_check), [chat]


@pytest.fixture
async def store(redis_url):
    redis = aioredis.Redis.from_url(redis_url)
    yield SessionStore(redis, 60)
    await redis.aclose()


# Words only the model can read (no task, no question form): a turn that needs the LLM.
NEEDS_THE_MODEL = "My cousin says hello to the chef."


async def time_to_first_words(agent: Agent, session: str, text: str = NEEDS_THE_MODEL,
                              turn: str = "t1") -> tuple[float, list[brain_pb2.RespondEvent]]:
    started = time.perf_counter()
    first = None
    events = []
    request = brain_pb2.RespondRequest(session_id=session, turn_id=turn, user_id="alice", text=text)
    async for event in agent.respond(request):
        if event.WhichOneof("event") == "delta" and first is None:
            first = time.perf_counter() - started
        events.append(event)
    return first if first is not None else float("inf"), events


def spoken(events):
    return "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")


@pytest.mark.parametrize("guard", [False, True])
async def test_a_server_that_is_down_is_heard_as_the_fallback_within_two_seconds(store, guard):
    agent, clients = agent_for(f"http://127.0.0.1:{free_port()}/v1", store, guard)
    seconds, events = await time_to_first_words(agent, uuid.uuid4().hex)
    print(f"LLM down (guard {'on' if guard else 'off'}): fallback after {seconds * 1000:.0f} ms")
    assert spoken(events) == FALLBACK and events[-1].final.fallback
    assert seconds < BOUND_S + MARGIN_S
    for chat in clients:
        await chat.aclose()


@pytest.mark.parametrize("guard", [False, True])
async def test_a_server_that_stops_answering_is_heard_as_the_fallback_within_two_seconds(store, hung, guard):
    agent, clients = agent_for(hung, store, guard)
    seconds, events = await time_to_first_words(agent, uuid.uuid4().hex)
    print(f"LLM hung (guard {'on' if guard else 'off'}): fallback after {seconds * 1000:.0f} ms")
    assert spoken(events) == FALLBACK
    assert seconds < BOUND_S + MARGIN_S
    for chat in clients:
        await chat.aclose()


async def test_a_slow_server_that_still_answers_is_waited_for(scripted_llm):
    scripted_llm.delay_s = 2.5  # thinking longer than the probe interval, but alive
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=1.5, probe_after_s=0.5,
                            probe_timeout_s=0.5)
    text = "".join([c.text async for c in chat([{"role": "user", "content": "hi"}])])
    await chat.aclose()
    assert text == "Sure, I can help with that."


async def test_429_is_retried_after_the_time_the_server_asks_for(scripted_llm):
    scripted_llm.fail_next, scripted_llm.fail_status = 1, 429
    scripted_llm.fail_headers = {"Retry-After": "0.3"}
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=1.5)
    started = time.perf_counter()
    text = "".join([c.text async for c in chat([{"role": "user", "content": "hi"}])])
    await chat.aclose()
    assert text == "Sure, I can help with that." and len(scripted_llm.requests) == 2
    assert time.perf_counter() - started >= 0.3


async def test_429_asking_for_longer_than_the_bound_gives_up_at_once(scripted_llm):
    scripted_llm.fail_next, scripted_llm.fail_status = 5, 429
    scripted_llm.fail_headers = {"Retry-After": "30"}
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=1.5)
    started = time.perf_counter()
    with pytest.raises(LLMUnavailable):
        async for _ in chat([{"role": "user", "content": "hi"}]):
            pass
    await chat.aclose()
    assert time.perf_counter() - started < 1.0 and len(scripted_llm.requests) == 1


async def test_an_outage_never_leaves_the_session_in_handoff(store, scripted_llm):
    port = free_port()
    down, clients = agent_for(f"http://127.0.0.1:{port}/v1", store)
    session = uuid.uuid4().hex
    for turn in range(3):  # three fallbacks in a row: not the caller's misunderstanding
        _, events = await time_to_first_words(down, session, turn=f"t{turn}")
        assert [e for e in events if e.WhichOneof("event") == "handoff"] == []
        assert events[-1].final.dialog_state == "listen"
    scripted_llm.script = lambda _b: '{"intent": "other"}'
    back, more = agent_for(scripted_llm.base_url, store)
    _, events = await time_to_first_words(back, session, turn="t9")
    assert spoken(events) != FALLBACK
    assert events[-1].final.dialog_state == "listen" and not events[-1].final.fallback
    for chat in clients + more:
        await chat.aclose()


async def test_a_handoff_is_over_on_the_next_turn(store, scripted_llm):
    agent, clients = agent_for(scripted_llm.base_url, store)
    session = uuid.uuid4().hex
    _, events = await time_to_first_words(agent, session, "I want to talk to a human", "t1")
    assert events[-1].final.dialog_state == "handoff"
    scripted_llm.script = lambda _b: '{"intent": "other"}'
    _, events = await time_to_first_words(agent, session, "Actually, one more question.", "t2")
    assert not any(e.WhichOneof("event") == "handoff" for e in events)
    assert events[-1].final.dialog_state == "listen"
    for chat in clients:
        await chat.aclose()
    await asyncio.sleep(0)


async def test_redis_down_at_a_turns_start_is_heard_as_the_fallback_at_once(scripted_llm):
    from voicebot.common.redis import connect_redis

    redis = connect_redis(f"redis://127.0.0.1:{free_port()}/0")  # retries, as in production
    agent, clients = agent_for(scripted_llm.base_url, SessionStore(redis, 60))
    seconds, events = await time_to_first_words(agent, uuid.uuid4().hex)
    print(f"Redis down at a turn's start: fallback after {seconds * 1000:.0f} ms")
    assert spoken(events) == FALLBACK and events[-1].final.fallback
    assert seconds < agent.settings.history_load_timeout_s + MARGIN_S
    assert scripted_llm.requests == []  # nothing decided without the session's state
    for chat in clients:
        await chat.aclose()
    await redis.aclose()


class ClosesFirstConnection:
    """Reads the first request and closes the connection without an answer, as a server does
    with a keep-alive connection it is timing out; answers every later one."""

    REPLY = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
             b'data: {"choices": [{"delta": {"content": "Hello."}}]}\n\ndata: [DONE]\n\n')

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.recv(65536)
            if self.connections > 1:
                conn.sendall(self.REPLY)
            conn.shutdown(socket.SHUT_WR)  # an orderly close (FIN), after the reply if any
            conn.settimeout(2.0)
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    pass
            conn.close()


async def test_a_connection_the_server_closed_is_sent_again_at_once_without_backoff():
    server = ClosesFirstConnection()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    chat = OpenAIChatClient(f"http://127.0.0.1:{server.port}/v1", "m", deadline_s=2.0, sleep=sleep)
    text = "".join([c.text async for c in chat([{"role": "user", "content": "hi"}])])
    await chat.aclose()
    server.sock.close()
    assert text == "Hello." and server.connections == 2
    assert waits == []  # no backoff: nothing had been processed


async def test_a_turn_cancelled_while_the_model_thinks_is_cancelled_not_a_server_failure(scripted_llm):
    """Barge-in while the first token is awaited: the reading task ends cancelled, and the
    liveness watch stops with it (no probe after it, no cancel left for anyone)."""
    scripted_llm.delay_s = 2.0
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=1.5, probe_after_s=0.2,
                            probe_timeout_s=0.5)

    async def reply() -> str:
        return "".join([c.text async for c in chat([{"role": "user", "content": "hi"}])])

    probes: list[float] = []
    alive = chat._alive

    async def counted_probe() -> bool:
        probes.append(time.perf_counter())
        return await alive()

    chat._alive = counted_probe  # type: ignore[method-assign]
    turn = asyncio.create_task(reply())
    await asyncio.sleep(0.6)  # past the first probes: the server is alive, so it is waited for
    assert probes  # the watch was probing
    probes_before = len(probes)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    assert turn.cancelled()
    await asyncio.sleep(0.5)
    assert len(probes) == probes_before  # no probe after the turn ended
    assert asyncio.current_task().cancelling() == 0
    await chat.aclose()
