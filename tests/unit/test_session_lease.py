"""A session's lease in a real redis-server: one holder at a time across replicas, a fencing
token that refuses a holder whose lease a later turn took, and no extra round trip on a turn.

Two stores on one Redis stand for two replicas (each has its own leases, so one waits for the
other by polling, as across processes). Bounds are wide: a loaded 2-core machine runs each
Redis step in milliseconds, and the waits asserted are tenths of a second or more.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio as aioredis

from voicebot.brain.runtime.session_lease import LeaseLost, SessionBusy
from voicebot.brain.runtime.session_store import SessionHistory, SessionStore, Turn

STEP_S = 1.0  # each Redis step's bound
WAIT_S = 5.0  # a wait that only a hang reaches


@pytest.fixture
async def replicas(redis_url):
    clients = [aioredis.Redis.from_url(redis_url) for _ in range(2)]
    stores = [SessionStore(client, 60, lease_s=1.0) for client in clients]
    yield stores
    for store in stores:
        await store.leases.drain()
        await store.redis.aclose()


def add(turn_id: str):
    return lambda history: history.turns.append(Turn(turn_id, "q", "a"))


async def test_a_turn_on_another_replica_waits_until_the_holder_gives_the_session_back(replicas):
    first, second = replicas
    session = uuid.uuid4().hex
    lease, _ = await first.acquire("alice", session, WAIT_S, STEP_S)
    waiting = asyncio.create_task(second.acquire("alice", session, WAIT_S, STEP_S))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await first.update("alice", session, add("t1"), lease=lease, release=True)
    async with asyncio.timeout(WAIT_S):
        _, history = await waiting
    assert [t.turn_id for t in history.turns] == ["t1"]  # it starts from what the first stored


async def test_a_turn_on_the_same_replica_is_woken_when_the_session_is_given_back(replicas):
    store, _ = replicas
    session = uuid.uuid4().hex
    lease, _ = await store.acquire("alice", session, WAIT_S, STEP_S)
    waiting = asyncio.create_task(store.acquire("alice", session, WAIT_S, STEP_S))
    await asyncio.sleep(0.2)
    store.leases.let_go(lease)
    async with asyncio.timeout(WAIT_S):
        await waiting


async def test_a_session_held_past_the_wait_is_busy(replicas):
    first, second = replicas
    session = uuid.uuid4().hex
    await first.acquire("alice", session, WAIT_S, STEP_S)
    started = time.monotonic()
    with pytest.raises(SessionBusy):
        await second.acquire("alice", session, 0.2, STEP_S)
    assert 0.2 <= time.monotonic() - started < WAIT_S


async def test_a_holder_renews_its_lease_for_as_long_as_it_holds_it(replicas):
    first, second = replicas
    session = uuid.uuid4().hex
    await first.acquire("alice", session, WAIT_S, STEP_S)  # a lease of 1 s
    await asyncio.sleep(2.0)
    with pytest.raises(SessionBusy):
        await second.acquire("alice", session, 0, STEP_S)


async def test_a_holder_whose_lease_a_later_turn_took_can_no_longer_write(replicas):
    first, second = replicas
    session = uuid.uuid4().hex
    stale, _ = await first.acquire("alice", session, WAIT_S, STEP_S)
    assert stale.renewal is not None
    stale.renewal.cancel()  # a replica paused past its lease's time
    later, _ = await second.acquire("alice", session, WAIT_S, STEP_S)
    with pytest.raises(LeaseLost):
        await first.update("alice", session, add("stale"), lease=stale)
    await second.update("alice", session, add("t2"), lease=later, release=True)
    assert [t.turn_id for t in (await first.load("alice", session)).turns] == ["t2"]


async def test_the_last_write_gives_the_session_back_in_the_same_step(replicas):
    store, _ = replicas
    session = uuid.uuid4().hex
    lease, _ = await store.acquire("alice", session, WAIT_S, STEP_S)
    await store.update("alice", session, add("t1"), lease=lease, release=True)
    assert lease.free.is_set()
    lease_key = store.lease_keys("alice", session)[0]
    assert await store.redis.exists(lease_key) == 0


async def test_a_write_running_for_a_cancelled_turn_keeps_the_session_until_it_is_done(replicas):
    store, other = replicas
    session = uuid.uuid4().hex
    lease, _ = await store.acquire("alice", session, WAIT_S, STEP_S)
    lease.hold()  # the write
    store.leases.let_go(lease)  # the turn is cancelled
    await store.leases.drain()
    with pytest.raises(SessionBusy):
        await other.acquire("alice", session, 0, STEP_S)
    store.leases.let_go(lease)  # the write's outcome is stored
    async with asyncio.timeout(WAIT_S):
        await other.acquire("alice", session, WAIT_S, STEP_S)


async def test_a_read_made_ahead_is_confirmed_in_the_step_that_takes_the_lease(replicas):
    store, _ = replicas
    session = uuid.uuid4().hex
    nothing = await store.load("alice", session)
    lease, same = await store.acquire_unchanged("alice", session, nothing, WAIT_S, STEP_S)
    assert same
    await store.update("alice", session, add("t1"), lease=lease, release=True)
    read = await store.load("alice", session)
    lease, same = await store.acquire_unchanged("alice", session, nothing, WAIT_S, STEP_S)
    assert not same  # something was stored since
    store.leases.let_go(lease)
    await store.leases.drain()
    lease, same = await store.acquire_unchanged("alice", session, read, WAIT_S, STEP_S)
    assert same


class Counted:
    """The client's commands, counted: each is one round trip."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.calls = 0
        self._execute = client.execute_command

        async def counted(*args, **kwargs):
            self.calls += 1
            return await self._execute(*args, **kwargs)

        client.execute_command = counted


async def test_a_turn_under_the_lease_makes_as_many_round_trips_as_one_without(replicas):
    """Taking the lease is the read's step and giving it back the write's: a turn's read and
    its store are two round trips, with or without the lease."""
    store, _ = replicas
    session = uuid.uuid4().hex
    await store.update("alice", session, add("t0"))  # the scripts are loaded, the session exists
    lease, _ = await store.acquire("alice", session, WAIT_S, STEP_S)
    await store.update("alice", session, add("t1"), lease=lease, release=True)
    counted = Counted(store.redis)
    plain = await store.load("alice", session)
    await store.update("alice", session, add("t2"), read=plain)
    without = counted.calls
    lease, held = await store.acquire("alice", session, WAIT_S, STEP_S)
    await store.update("alice", session, add("t3"), read=held, lease=lease, release=True)
    assert counted.calls - without == without == 2
    assert isinstance(held, SessionHistory) and lease.free.is_set()
