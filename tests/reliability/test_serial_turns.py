"""One turn at a time per session (issue 53, item 1): a confirmed write and whatever the caller
does while it runs compose.

The brain's real ``Agent`` on the real redis-server, as two replicas (two agents, each with its
own ``SessionStore``, so a lease one holds is polled by the other as across processes), and a
write tool that waits on the test's gate: every interleaving is one the test chose, on a
loaded machine as on an idle one. The gateway's moves are the brain requests they make:

- a barge-in cancels the running turn's call and starts the next turn with what the caller
  heard of the cut reply (``previous_reply``, interrupted);
- a Realtime ``response.cancel`` cancels the call, and the next turn says nothing was heard;
- a second socket that resumed the session starts its turn on any replica while the first
  socket's turn still runs; its line reports no previous reply.

Each scenario checks the record of what happened: the writes the tool saw (by idempotency key
and day), what each completed reply said, and the stored state. The property test runs 200 of
these interleavings drawn from a seeded generator (``SEED``): the same draws on every run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
import uuid
from dataclasses import dataclass, field

import grpc
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.fakes.encoders import BagOfWordsEncoder
from tests.fakes.fake_llm import is_guard
from tests.reliability import RESULTS
from voicebot.brain.act import actions
from voicebot.brain.act.tools import FunctionTool, ToolContext, ToolKind, ToolRegistry, ToolSpec
from voicebot.brain.business.profile import parse_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.brain.server import BrainServicer
from voicebot.common.grpc_server import server_interceptors
from voicebot.common.internal_auth import internal_channel, internal_token
from voicebot.v1 import brain_pb2, brain_pb2_grpc

pytestmark = [pytest.mark.reliability]

PROFILE = {
    "name": "Joe", "purpose": "taking table reservations",
    "tasks": {"book": {"examples": ["book a table", "reserve a table"],
                       "fields": {"day": {"ask": "Which day?"}}}},
}
BOOK = "Book a table for Friday please."
CORRECTION = "Wait, make it Saturday."
READ_BACK = "Shall I go ahead?"
DONE = "Done:"
# A bound that only a hang reaches (a loaded 2-core machine runs each step in milliseconds).
STEP_S = 10.0
SEED = 53
INTERLEAVINGS = 200


class GatedBooking:
    """The write ``book(day)``: each run is recorded as it starts (a write that started may have
    run), then held until the test opens the gate."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str]] = []  # (idempotency key, day)
        self.started = asyncio.Event()
        self.gate = asyncio.Event()

    def reset(self) -> None:
        self.runs.clear()
        self.started.clear()
        self.gate.clear()

    async def book(self, ctx: ToolContext, day: str) -> dict:
        self.runs.append((ctx.idempotency_key, day))
        self.started.set()
        await self.gate.wait()
        return {"booked": day}

    def registry(self) -> ToolRegistry:
        return ToolRegistry([FunctionTool(ToolSpec("book", "Book a table", {
            "type": "object", "properties": {"day": {"type": "string", "description": "YYYY-MM-DD"}},
            "required": ["day"]}, ToolKind.WRITE, accepts_idempotency_key=True), self.book)])


@dataclass
class Said:
    turn_id: str
    text: str
    deltas: list[str] = field(default_factory=list)
    final: str | None = None  # None: the turn never completed
    cancelled: bool = False  # its call was cancelled: nothing it made was played

    @property
    def heard(self) -> str:
        return "".join(self.deltas)


class Line:
    """One caller's session, its turns sent as a gateway sends them."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.turns: list[Said] = []
        self.count = 0

    def start(self, agent: Agent, text: str, previous: brain_pb2.SpokenPart | None = None
              ) -> tuple[Said, asyncio.Task]:
        self.count += 1
        said = Said(f"t{self.count}", text)
        self.turns.append(said)
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=said.turn_id, user_id="alice",
                                           text=text, previous_reply=previous)
        return said, asyncio.create_task(self._run(agent, request, said))

    @staticmethod
    async def _run(agent: Agent, request: brain_pb2.RespondRequest, said: Said) -> None:
        async for event in agent.respond(request):
            kind = event.WhichOneof("event")
            if kind == "delta":
                said.deltas.append(event.delta.text)
            elif kind == "final":
                said.final = event.final.text

    async def say(self, agent: Agent, text: str, previous: brain_pb2.SpokenPart | None = None) -> Said:
        said, task = self.start(agent, text, previous)
        async with asyncio.timeout(STEP_S):
            await task
        return said

    def heard_whole(self, said: Said) -> brain_pb2.SpokenPart:
        """What the gateway reports after a reply that played to its end."""
        return brain_pb2.SpokenPart(turn_id=said.turn_id, text=said.final or "")

    @staticmethod
    def cut(said: Said) -> brain_pb2.SpokenPart:
        """After a barge-in: the caller heard what had been streamed of it."""
        return brain_pb2.SpokenPart(turn_id=said.turn_id, text=said.heard, interrupted=True,
                                    user_text=said.text)

    def completed(self) -> list[Said]:
        """The replies the caller heard."""
        return [t for t in self.turns if t.final is not None and not t.cancelled]


async def cancel(said: Said, task: asyncio.Task) -> None:
    """The gateway cancels the turn's call and moves on: it never plays what the turn made."""
    said.cancelled = True
    task.cancel()
    await asyncio.sleep(0)


def reads_nothing(body):
    """The scripted model: every word these scenarios use is read by the rules."""
    return "ALLOW" if is_guard(body) else '{"intent": "other"}'


@pytest.fixture
async def replicas(redis_url, scripted_llm):
    """Two brain replicas on one Redis, and the gated write they share."""
    scripted_llm.script = reads_nothing
    booking = GatedBooking()
    profile = parse_profile(PROFILE)
    encoder = BagOfWordsEncoder()
    clients, stores = [], []
    agents = []
    for _ in range(2):
        redis = aioredis.Redis.from_url(redis_url)
        settings = BrainSettings(llm_base_url=scripted_llm.base_url, llm_deadline_s=0.5)
        chat = OpenAIChatClient(settings.llm_base_url, "m", deadline_s=0.5)
        store = SessionStore(redis, 60)
        clients.append(chat)
        stores.append(store)
        agents.append(Agent(settings, chat, store, tools=booking.registry(), profile=profile,
                            encoder=encoder))
    yield agents, booking
    for store in stores:
        await store.leases.drain()
        await store.redis.aclose()
    for chat in clients:
        await chat.aclose()


async def read_back(agent: Agent, line: Line) -> Said:
    said = await line.say(agent, BOOK)
    assert said.final is not None and said.final.endswith(READ_BACK), said.final
    return said


async def write_started(booking: GatedBooking) -> None:
    async with asyncio.timeout(STEP_S):
        await booking.started.wait()


async def state_of(agent: Agent, line: Line):
    return (await agent.store.load("alice", line.session)).state


def days(booking: GatedBooking) -> list[str]:
    return sorted(day for _, day in booking.runs)


def told(line: Line) -> list[Said]:
    """The completed replies that said a write was done."""
    return [t for t in line.completed() if DONE in (t.final or "")]


# ---- scenarios: a turn while the write runs ------------------------------------------------
async def test_a_barge_in_during_the_write_waits_for_it_and_its_reply_starts_with_the_outcome(replicas):
    (agent, _), booking = replicas
    line = Line(uuid.uuid4().hex)
    first = await read_back(agent, line)
    yes, running = line.start(agent, "Yes.", line.heard_whole(first))
    await write_started(booking)
    await cancel(yes, running)  # the caller speaks over it: the gateway cancels the turn's call
    over, turn = line.start(agent, "Yes.", line.cut(yes))
    await asyncio.sleep(0.05)
    assert not turn.done()  # it waits for the write, it does not decide on the old state
    booking.gate.set()
    await finish(turn, running)
    assert len(booking.runs) == 1
    assert over.final is not None and over.final.startswith(DONE)  # the caller is told first
    state = await state_of(agent, line)
    assert state.pending is None and state.running is None and state.last_outcome.startswith("done")
    after = await line.say(agent, "Yes.", line.heard_whole(over))  # a further yes runs nothing
    assert len(booking.runs) == 1 and DONE not in (after.final or "")
    RESULTS["barge-in during a running write"] = {
        "writes": len(booking.runs), "the next reply": over.final, "a further yes": after.final}


async def test_a_correction_spoken_over_the_write_is_a_new_read_back_never_a_second_silent_write(
        replicas):
    (agent, _), booking = replicas
    line = Line(uuid.uuid4().hex)
    first = await read_back(agent, line)
    yes, running = line.start(agent, "Yes.", line.heard_whole(first))
    await write_started(booking)
    await cancel(yes, running)
    over, turn = line.start(agent, CORRECTION, line.cut(yes))
    booking.gate.set()
    await finish(turn, running)
    assert days(booking) == [friday(booking)]  # the write it spoke over, once; nothing else yet
    assert over.final is not None and over.final.startswith(DONE) and over.final.endswith(READ_BACK)
    assert "Saturday" in over.final  # the change, read back
    state = await state_of(agent, line)
    assert state.pending is not None and state.running is None
    await line.say(agent, "Yes.", line.heard_whole(over))  # the caller confirms the new one
    assert len(booking.runs) == 2 and len(set(key for key, _ in booking.runs)) == 2
    RESULTS["a correction during a running write"] = {
        "writes": [day for _, day in booking.runs], "the next reply": over.final}


async def test_a_realtime_cancel_during_the_write_leaves_it_done_once_and_the_next_turn_tells_it(
        replicas):
    (agent, _), booking = replicas
    line = Line(uuid.uuid4().hex)
    first = await read_back(agent, line)
    yes, running = line.start(agent, "Yes.", line.heard_whole(first))
    await write_started(booking)
    await cancel(yes, running)  # response.cancel: the call is cancelled, nothing of it played
    booking.gate.set()
    await finish(running)
    await wait_for_outcome(agent, line)
    state = await state_of(agent, line)
    assert state.running is None and state.untold is not None  # stored once, not yet told
    nothing = brain_pb2.SpokenPart(turn_id=yes.turn_id, text="", interrupted=True, user_text=yes.text)
    later = await line.say(agent, "Where can I park?", nothing)
    assert later.final is not None and later.final.startswith(DONE)
    assert len(booking.runs) == 1
    RESULTS["response.cancel during a running write"] = {"writes": len(booking.runs),
                                                         "the next reply": later.final}


async def test_a_second_socket_on_another_replica_waits_for_the_write_and_hears_its_outcome(replicas):
    (first, second), booking = replicas
    line = Line(uuid.uuid4().hex)
    said = await read_back(first, line)
    yes, running = line.start(first, "Yes.", line.heard_whole(said))
    await write_started(booking)
    resumed, other = line.start(second, "Yes.")  # session.resume on another socket and replica
    await asyncio.sleep(0.05)
    assert not other.done()
    booking.gate.set()
    async with asyncio.timeout(STEP_S):
        await asyncio.gather(running, other)
    assert len(booking.runs) == 1
    assert yes.final is not None and yes.final.startswith(DONE)
    # The resumed line never played the first socket's reply: it is told there too.
    assert resumed.final is not None and resumed.final.startswith(DONE)
    state = await state_of(first, line)
    assert state.pending is None and state.running is None
    assert [t.turn_id for t in (await first.store.load("alice", line.session)).turns] == ["t1", "t2", "t3"]
    RESULTS["a second socket during a running write"] = {"writes": len(booking.runs),
                                                         "the resumed line's reply": resumed.final}


async def test_a_barge_in_through_the_brains_grpc_service_composes_with_the_write(replicas):
    """The same barge-in as the gateway makes it: the turn's ``Converse`` call cancelled over
    gRPC (the brain's handler is cancelled wherever it is), the next turn on a new call."""
    (agent, _), booking = replicas
    server = grpc.aio.server(interceptors=server_interceptors(internal_token()))
    brain_pb2_grpc.add_BrainServicer_to_server(BrainServicer(agent), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    line = Line(uuid.uuid4().hex)
    try:
        first = await read_back(agent, line)
        async with internal_channel(f"127.0.0.1:{port}") as channel:
            stub = brain_pb2_grpc.BrainStub(channel)
            call = stub.Converse(iter([converse(line, "t2", "Yes.", line.heard_whole(first))]))
            await write_started(booking)
            call.cancel()  # the caller spoke over it
            heard = brain_pb2.SpokenPart(turn_id="t2", text="", interrupted=True, user_text="Yes.")
            over = stub.Converse(iter([converse(line, "t3", CORRECTION, heard)]))
            booking.gate.set()
            async with asyncio.timeout(STEP_S):
                events = [event async for event in over]
    finally:
        await server.stop(grace=None)
    reply = events[-1].final.text
    assert days(booking) == [friday(booking)]
    assert reply.startswith(DONE) and reply.endswith(READ_BACK) and "Saturday" in reply
    state = await state_of(agent, line)
    assert state.running is None and state.pending is not None and state.untold is not None
    RESULTS["a barge-in over gRPC during a running write"] = {"writes": len(booking.runs),
                                                             "the next reply": reply}


def converse(line: Line, turn_id: str, text: str, previous: brain_pb2.SpokenPart
             ) -> brain_pb2.ConverseRequest:
    return brain_pb2.ConverseRequest(committed=True, start=brain_pb2.RespondRequest(
        session_id=line.session, turn_id=turn_id, user_id="alice", text=text, previous_reply=previous))


async def test_a_turn_that_cannot_wait_any_longer_decides_nothing_and_asks_the_caller_to_hold_on(
        replicas):
    (agent, _), booking = replicas
    agent.settings.session_wait_s = 0.2
    line = Line(uuid.uuid4().hex)
    first = await read_back(agent, line)
    _, running = line.start(agent, "Yes.", line.heard_whole(first))
    await write_started(booking)
    over = await line.say(agent, CORRECTION)
    assert over.final == agent.sentences.still_working
    booking.gate.set()
    async with asyncio.timeout(STEP_S):
        await running
    assert len(booking.runs) == 1 and (await state_of(agent, line)).pending is None


async def test_a_write_whose_outcome_could_not_be_stored_is_never_pending_again(replicas, monkeypatch):
    """Redis goes away after the write was stored as running: the caller still hears the
    outcome, and the next turn finds the write neither pending nor done but unknown."""
    (agent, _), booking = replicas
    monkeypatch.setattr(actions, "OUTCOME_RETRIES_S", (0.0,))
    line = Line(uuid.uuid4().hex)
    first = await read_back(agent, line)
    booking.gate.set()
    stores, real = 0, agent.store.update

    async def away_after_the_first(*args, **kwargs):
        nonlocal stores
        stores += 1
        if stores > 1:
            raise RedisConnectionError("Redis went away")
        return await real(*args, **kwargs)

    monkeypatch.setattr(agent.store, "update", away_after_the_first)
    yes = await line.say(agent, "Yes.", line.heard_whole(first))
    monkeypatch.setattr(agent.store, "update", real)
    assert yes.final is not None and yes.final.startswith(DONE)  # not "something went wrong"
    state = await state_of(agent, line)
    assert state.pending is None and state.running is not None  # as stored before it ran
    again = await line.say(agent, "Yes.", line.heard_whole(yes))
    assert len(booking.runs) == 1
    assert again.final is not None and again.final.startswith(agent.sentences.unknown_outcome)
    state = await state_of(agent, line)
    assert state.running is None and state.pending is None


async def finish(*tasks: asyncio.Task) -> None:
    async with asyncio.timeout(STEP_S):
        await asyncio.gather(*tasks, return_exceptions=True)


async def wait_for_outcome(agent: Agent, line: Line) -> None:
    """Until the write's outcome is stored (the lease given back by the write)."""
    deadline = time.monotonic() + STEP_S
    while (await state_of(agent, line)).running is not None or not (await state_of(agent, line)).untold:
        assert time.monotonic() < deadline, "the write's outcome was never stored"
        await asyncio.sleep(0.01)


def friday(booking: GatedBooking) -> str:
    return booking.runs[0][1]


# ---- the property: any interleaving composes ---------------------------------------------
KINDS = ("barge_in", "cancel", "resume", "after")
WORDS = ("Yes.", CORRECTION, "No.", "Where can I park?", "Thanks.")


@dataclass
class Drawn:
    kind: str
    words: str
    during_write: bool  # the move came while the write ran (else before it started)
    open_first: bool  # the write was let finish before the next turn started


async def interleave(rng: random.Random, agents: list[Agent], booking: GatedBooking) -> tuple[Drawn, Line]:
    """One caller: a read-back, a yes whose write is held, one move drawn by ``rng`` while it
    is held, the write let finish at a drawn point, then a yes and a thanks."""
    booking.reset()
    line, pick = Line(uuid.uuid4().hex), lambda: rng.choice(agents)
    first = await read_back(pick(), line)
    drawn = Drawn(rng.choice(KINDS), rng.choice(WORDS), rng.random() < 0.75, rng.random() < 0.5)
    yes, running = line.start(pick(), "Yes.", line.heard_whole(first))
    if drawn.during_write:
        await write_started(booking)
    else:
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)
    previous = await _move(drawn, line, yes, running, booking)
    agent = agents[1] if drawn.kind == "resume" else pick()
    over, turn = line.start(agent, drawn.words, previous)
    await asyncio.sleep(rng.choice((0, 0.001, 0.005)))
    booking.gate.set()
    await finish(turn, running)
    after = await line.say(pick(), "Yes.", line.heard_whole(over))
    await line.say(pick(), "Thanks.", line.heard_whole(after))
    return drawn, line


async def _move(drawn: Drawn, line: Line, yes: Said, running: asyncio.Task,
                booking: GatedBooking) -> brain_pb2.SpokenPart | None:
    """The gateway's move while the yes turn runs; what the next turn reports as heard."""
    if drawn.kind in ("barge_in", "cancel"):
        await cancel(yes, running)
    if drawn.kind == "after":
        booking.gate.set()
        async with asyncio.timeout(STEP_S):
            await running
        return line.heard_whole(yes)
    if drawn.open_first:
        booking.gate.set()
    if drawn.kind == "barge_in":
        return line.cut(yes)
    if drawn.kind == "cancel":
        return brain_pb2.SpokenPart(turn_id=yes.turn_id, text="", interrupted=True, user_text=yes.text)
    return None  # resume: a new socket reports no previous reply


def weekday(iso: str) -> str:
    return dt.date.fromisoformat(iso).strftime("%A")


async def violations(agent: Agent, drawn: Drawn, line: Line, booking: GatedBooking) -> list[str]:
    """Everything that went wrong in one interleaving (none is the property)."""
    found = []
    keys, written = [key for key, _ in booking.runs], days(booking)
    if len(set(keys)) != len(keys) or len(set(written)) != len(written):
        found.append(f"duplicate write: {booking.runs}")
    replies = [t.final or "" for t in line.completed()]
    for day in written:
        name = weekday(day)
        if not any(name in r and READ_BACK in r for r in replies):
            found.append(f"{name} written without a read-back the caller heard")
        tellings = [r for r in replies if f"{DONE} book a table with day {name}" in r]
        if not tellings or (drawn.kind != "resume" and len(tellings) > 1):
            found.append(f"{name} told {len(tellings)} times")
    if any(r == agent.sentences.still_working for r in replies):
        found.append("a turn gave up waiting")
    history = await agent.store.load("alice", line.session)
    state = history.state
    if state.running is not None:
        found.append("a write left running")
    if state.pending is not None and f"{line.session}:{state.pending.id}" in keys:
        found.append("a write that ran is pending again (lost)")
    if written and not state.last_outcome.startswith("done"):
        found.append(f"the last outcome is {state.last_outcome!r}")
    ids = [t.turn_id for t in history.turns]
    if len(set(ids)) != len(ids):
        found.append(f"a turn stored twice: {ids}")
    return found


async def test_any_interleaving_of_turns_with_a_running_write_composes(replicas):
    """200 drawn interleavings of a turn, a barge-in, a cancel and a resume with a held write:
    no write twice, none lost (left pending, untold, or told but not stored), the state whole."""
    agents, booking = replicas
    rng = random.Random(SEED)
    started = time.perf_counter()
    failures, kinds, writes = [], dict.fromkeys(KINDS, 0), 0
    for number in range(INTERLEAVINGS):
        drawn, line = await interleave(rng, agents, booking)
        kinds[drawn.kind] += 1
        writes += len(booking.runs)
        failures += [f"#{number} {drawn}: {v}" for v in await violations(agents[0], drawn, line, booking)]
    seconds = time.perf_counter() - started
    RESULTS["200 interleavings with a running write"] = {
        "seed": SEED, "kinds": kinds, "writes": writes, "violations": len(failures),
        "seconds": round(seconds, 1)}
    assert failures == []
