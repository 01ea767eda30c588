"""The brain's session history in a real redis-server: every write a compare-and-set on the
version read, a change that changes nothing written not at all, and no update lost to another
writer that comes between a read and its write."""

from __future__ import annotations

import json
import uuid

import pytest
import redis.asyncio as aioredis

from voicebot.brain.runtime.session_store import SessionHistory, SessionStore, Turn
from voicebot.common.redis import connect_redis_sync


@pytest.fixture
async def store(redis_url):
    redis = aioredis.Redis.from_url(redis_url)
    yield SessionStore(redis, 60)
    await redis.aclose()


@pytest.fixture
def other_writer(redis_url):
    """Another replica's writes, made synchronously from inside a change (between its read and
    its write)."""
    client = connect_redis_sync(redis_url)
    yield client
    client.close()


def heard(turn_id: str, spoken: str = "", interrupted: bool = False):
    return lambda history: history.mark_spoken(turn_id, spoken, interrupted)


async def test_a_change_that_changes_nothing_writes_nothing(store, other_writer):
    session = uuid.uuid4().hex
    await store.append_turn("alice", session, Turn("t1", "q", "a full answer"))
    key = store.key("alice", session)
    other_writer.expire(key, 5000)  # a write would set the store's TTL (60 s) again
    history = await store.update("alice", session, heard("t1"))  # heard all of it
    assert history.version == 1 and history.turns[0].assistant == "a full answer"
    assert json.loads(other_writer.get(key))["version"] == 1
    assert other_writer.ttl(key) > 60


async def test_a_change_is_written_with_a_new_version(store, other_writer):
    session = uuid.uuid4().hex
    await store.append_turn("alice", session, Turn("t1", "q", "a full answer"))
    history = await store.update("alice", session, heard("t1", "a full", interrupted=True))
    assert history.version == 2
    stored = await store.load("alice", session)
    assert (stored.version, stored.turns[0].assistant, stored.turns[0].interrupted) == (2, "a full", True)
    assert 0 < other_writer.ttl(store.key("alice", session)) <= 60


async def test_a_write_between_the_read_and_the_write_is_not_lost(store, other_writer):
    session = uuid.uuid4().hex
    key = store.key("alice", session)
    await store.append_turn("alice", session, Turn("t1", "q1", "a1"))
    calls = []

    def append_mine(history: SessionHistory) -> None:
        calls.append(history.version)
        if len(calls) == 1:  # another replica stores its turn after this read
            theirs = SessionHistory.from_json(other_writer.get(key))
            theirs.turns.append(Turn("t2", "q2", "a2"))
            theirs.version += 1
            other_writer.set(key, theirs.to_json())
        history.turns.append(Turn("t3", "q3", "a3"))

    history = await store.update("alice", session, append_mine)
    assert calls == [1, 2]  # re-applied on the fresh read
    stored = await store.load("alice", session)
    assert [t.turn_id for t in stored.turns] == ["t1", "t2", "t3"] == [t.turn_id for t in history.turns]
    assert stored.version == 3


def their_turn(client, key: str, turn: Turn) -> None:
    """Another replica stores a turn."""
    theirs = SessionHistory.from_json(client.get(key))
    theirs.turns.append(turn)
    theirs.version += 1
    client.set(key, theirs.to_json())


async def test_an_update_from_the_turns_own_read_reads_nothing_again(store, other_writer):
    """A turn reads its session when it starts and stores itself when it ends: the store starts
    from that read, and the compare-and-set is the only round trip."""
    session = uuid.uuid4().hex
    await store.append_turn("alice", session, Turn("t1", "q1", "a1"))
    read = await store.load("alice", session)
    reads, get = [], store.redis.get

    async def counted_get(key):
        reads.append(key)
        return await get(key)

    store.redis.get = counted_get
    def append(turn_id: str):
        return lambda history: history.turns.append(Turn(turn_id, "q", "a"))

    history = await store.update("alice", session, append("t2"), read=read)
    again = await store.update("alice", session, append("t3"), read=history)  # its write, its read
    assert reads == []
    stored = await store.load("alice", session)
    assert [t.turn_id for t in stored.turns] == ["t1", "t2", "t3"] == [t.turn_id for t in again.turns]
    assert stored.version == again.version == 3


async def test_a_write_after_the_turns_read_is_not_lost(store, other_writer):
    session = uuid.uuid4().hex
    key = store.key("alice", session)
    await store.append_turn("alice", session, Turn("t1", "q1", "a1"))
    read = await store.load("alice", session)
    their_turn(other_writer, key, Turn("t2", "q2", "a2"))  # between this turn's start and its end
    calls = []

    def append_mine(history: SessionHistory) -> None:
        calls.append(history.version)
        history.turns.append(Turn("t3", "q3", "a3"))

    history = await store.update("alice", session, append_mine, read=read)
    assert calls == [1, 2]  # the compare-and-set failed on the turn's read; re-applied on a fresh one
    stored = await store.load("alice", session)
    assert [t.turn_id for t in stored.turns] == ["t1", "t2", "t3"] == [t.turn_id for t in history.turns]


async def test_a_change_that_changes_nothing_answers_with_what_is_stored_now(store, other_writer):
    """Nothing to write on the turn's read is not an answer: another replica may have written
    since, and the caller gets that."""
    session = uuid.uuid4().hex
    key = store.key("alice", session)
    await store.append_turn("alice", session, Turn("t1", "q1", "a1"))
    read = await store.load("alice", session)
    their_turn(other_writer, key, Turn("t2", "q2", "a2"))
    history = await store.update("alice", session, heard("t1"), read=read)
    assert history.version == 2 and [t.turn_id for t in history.turns] == ["t1", "t2"]


async def test_a_value_of_another_shape_is_compared_whole(store, other_writer):
    """A history whose JSON does not start with its version (not written by this store) is
    still updated, and still compare-and-set: by a hash of the whole value."""
    session = uuid.uuid4().hex
    key = store.key("alice", session)
    other_writer.set(key, json.dumps({"turns": [{"turn_id": "t1", "user": "q1", "assistant": "a1"}],
                                      "state": {}, "version": 4}))
    calls = []

    def append_mine(history: SessionHistory) -> None:
        calls.append(len(history.turns))
        if len(calls) == 1:
            other_writer.set(key, json.dumps({"turns": [{"turn_id": "t1", "user": "q1", "assistant": "a1"},
                                                        {"turn_id": "t2", "user": "q2", "assistant": "a2"}],
                                              "state": {}, "version": 4}))  # the same version
        history.turns.append(Turn("t3", "q3", "a3"))

    await store.update("alice", session, append_mine)
    assert calls == [1, 2]
    stored = await store.load("alice", session)
    assert [t.turn_id for t in stored.turns] == ["t1", "t2", "t3"] and stored.version == 5


async def test_serialised_history_round_trips(store):
    session = uuid.uuid4().hex
    step = {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"slots": ["19:00"]})}
    await store.append_turn("alice", session, Turn("t1", "q", "a", steps=[step], context="[state]"))
    history = await store.load("alice", session)
    assert history.turns == [Turn("t1", "q", "a", steps=[step], context="[state]")]
    assert SessionHistory.from_json(history.to_json()).to_json() == history.to_json()
    assert list(json.loads(history.to_json())) == ["version", "turns", "state"]


async def test_a_turns_record_is_stored_with_its_history_in_one_step(store, other_writer):
    """A turn's end is one Redis command: the history's compare-and-set, which appends the
    turn's record too (kept for the session's TTL)."""
    session = uuid.uuid4().hex
    read = await store.load("alice", session)
    commands, execute = [], store.redis.execute_command

    async def counted(*args, **options):
        commands.append(args[0])
        return await execute(*args, **options)

    store.redis.execute_command = counted
    await store.update("alice", session, lambda h: h.turns.append(Turn("t1", "q1", "a1")), read=read,
                       record={"turn_id": "t1", "outcome": "completed"})
    assert commands == ["EVALSHA"]
    assert [t.turn_id for t in (await store.load("alice", session)).turns] == ["t1"]
    assert await store.records("alice", session) == [{"turn_id": "t1", "outcome": "completed"}]
    assert 0 < other_writer.ttl(store.records_key("alice", session)) <= 60


async def test_a_record_is_appended_once_however_many_tries_the_history_takes(store, other_writer):
    session = uuid.uuid4().hex
    key = store.key("alice", session)
    await store.append_turn("alice", session, Turn("t1", "q1", "a1"))
    read = await store.load("alice", session)
    their_turn(other_writer, key, Turn("t2", "q2", "a2"))  # the first compare-and-set fails
    await store.update("alice", session, lambda h: h.turns.append(Turn("t3", "q3", "a3")), read=read,
                       record={"turn_id": "t3"})
    assert await store.records("alice", session) == [{"turn_id": "t3"}]
    assert [t.turn_id for t in (await store.load("alice", session)).turns] == ["t1", "t2", "t3"]


async def test_a_record_with_nothing_to_write_is_stored_on_its_own(store, other_writer):
    session = uuid.uuid4().hex
    await store.append_turn("alice", session, Turn("t1", "q1", "a full answer"))
    await store.update("alice", session, heard("t1"), record={"turn_id": "t2", "outcome": "completed"})
    assert (await store.load("alice", session)).version == 1  # the history was not written
    assert await store.records("alice", session) == [{"turn_id": "t2", "outcome": "completed"}]


async def test_records_are_trimmed_to_about_the_most_kept(redis_url):
    redis = aioredis.Redis.from_url(redis_url)
    try:
        store, session = SessionStore(redis, 60, max_records=3), uuid.uuid4().hex
        for n in range(400):
            await store.add_record("alice", session, {"n": n})
        kept = [r["n"] for r in await store.records("alice", session)]
        assert kept[-1] == 399 and kept == list(range(400 - len(kept), 400))
        assert len(kept) < 400  # approximate trimming: whole stream nodes at a time
    finally:
        await redis.aclose()


async def test_a_read_is_confirmed_current_by_its_version_until_someone_writes(store, other_writer):
    """``unchanged_since``: what a turn on a read made ahead checks before anything leaves."""
    session = uuid.uuid4().hex
    nothing = await store.load("alice", session)
    assert await store.unchanged_since("alice", session, nothing)  # still nothing stored
    await store.append_turn("alice", session, Turn("t1", "q", "a"))
    assert not await store.unchanged_since("alice", session, nothing)  # now there is
    read = await store.load("alice", session)
    assert await store.unchanged_since("alice", session, read)
    other_writer.set(store.key("alice", session), read.to_json().replace('"a"', '"b"', 1)
                     .replace('"version": 1', '"version": 2'))  # another replica's turn
    assert not await store.unchanged_since("alice", session, read)
    other_writer.delete(store.key("alice", session))  # expired meanwhile
    assert not await store.unchanged_since("alice", session, read)


async def test_a_read_of_another_shape_is_confirmed_only_whole(store, other_writer):
    session = uuid.uuid4().hex
    key = store.key("alice", session)
    legacy = json.dumps({"turns": [], "state": {}, "version": 3})  # the version not first
    other_writer.set(key, legacy)
    read = await store.load("alice", session)
    assert await store.unchanged_since("alice", session, read)
    other_writer.set(key, legacy.replace("[]", '[{"turn_id": "t9", "user": "q", "assistant": "a"}]'))
    assert not await store.unchanged_since("alice", session, read)
