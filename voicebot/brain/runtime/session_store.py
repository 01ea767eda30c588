"""Conversation history per session in Redis.

Keys are scoped by user *and* session, so another user's session id finds
nothing: it looks exactly like a session that does not exist. Every write is
a compare-and-set on the version number the history was read at (one Lua
script: SET only if the stored version is still that one), so two replicas
serving turns of one session concurrently cannot lose each other's updates.

An update is two round trips (GET, then the script), not the four of
WATCH/GET/MULTI-SET-EXEC; one that changes nothing is the GET alone: it writes
nothing, and what it returns is what Redis held at that read. (For the common "the
caller heard all of the last reply" the brain does not update at all: its load is
a plain read.)

A turn reads and writes under the session's lease (``session_lease.py``): the script that
takes it reads the history in the same step, and the compare-and-set checks its fencing
token and gives it back with the turn's last write.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import RedisError

from voicebot.brain.decide.state import SessionState
from voicebot.brain.runtime.session_lease import Lease, LeaseLost, Leases

log = logging.getLogger(__name__)


@dataclass
class Turn:
    turn_id: str
    user: str
    assistant: str
    interrupted: bool = False
    # This turn's assistant tool-call messages and tool results, in order.
    steps: list[dict[str, Any]] = field(default_factory=list)
    # The state block the turn's prompt carried, kept so later prompts repeat it byte for byte.
    context: str = ""
    # The reply was the model's own stock refusal (refusals.py): stored, but left out of later
    # prompts (context.py), since a small model copies it. (The guard's blocked sentence, the
    # profile's own words, stays in them.)
    refused: bool = False


@dataclass
class SessionHistory:
    version: int = 0
    turns: list[Turn] = field(default_factory=list)
    # Dialog state (pending action, collected fields, references): state.py.
    state: SessionState = field(default_factory=SessionState)
    # The stored value this was read from (None: nothing was stored). ``SessionStore.update``
    # starts from it instead of reading the session again; the compare-and-set still checks it.
    source: bytes | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: bytes | str | None) -> SessionHistory:
        if not raw:
            return cls()
        if isinstance(raw, str):
            raw = raw.encode()
        data = json.loads(raw)
        try:
            state = SessionState.model_validate(data.get("state") or {})
        except ValidationError:
            # Written by an older release: the turns stay, the dialog starts afresh (nothing
            # pending is ever guessed back into shape).
            log.warning("session state in an old shape; starting it afresh")
            state = SessionState()
        return cls(data["version"], [Turn(**t) for t in data["turns"]], state, source=raw)

    def to_json(self) -> str:
        return _with_version(self.version, self._body())

    def _body(self) -> str:
        """Everything but the version, as ``to_json`` writes it after ``{"version": N, ``.
        ``vars``, not ``dataclasses.asdict``: a Turn holds only JSON values (its steps are plain
        dicts), and asdict's recursive deep copy was a third of the brain's CPU per turn with a
        long history (each turn serialises it twice)."""
        return json.dumps({"turns": [vars(t) for t in self.turns],
                           "state": self.state.model_dump(mode="json")})[1:]

    def mark_spoken(self, turn_id: str, spoken: str, interrupted: bool) -> bool:
        """Keep only what the person heard of an earlier reply."""
        for turn in reversed(self.turns):
            if turn.turn_id == turn_id:
                if interrupted:
                    turn.assistant, turn.interrupted = spoken, True
                return True
        return False


def _with_version(version: int, body: str) -> str:
    # json.dumps of {"version": ..., "turns": ..., "state": ...} with its default separators.
    return f'{{"version": {version}, {body}'


def _record_json(record: dict[str, Any]) -> str:
    return json.dumps(record, default=str)


def _version_token(raw: bytes | None) -> str:
    """What the compare-and-set compares: the stored version, read from the value's start
    (``to_json`` always writes it first); "-" for no value; a hash for a value of another shape.
    ``_CAS`` computes the same token from what Redis holds."""
    if raw is None:
        return "-"
    match = _VERSION.match(raw)
    return match.group(1).decode() if match else "h" + hashlib.sha1(raw).hexdigest()


_VERSION = re.compile(rb'\{"version": (\d+),')

# KEYS: the history, the records stream, the fence counter, the lease. ARGV: the version token
# the change was made on, the new value, the TTL, the writer's fencing token ("": written
# without a lease), "1" to give the lease back with this write, the turn's record ("": none) and
# how many records to keep. -1: a later turn took the session (the fence moved on); 0: another
# write came first; 1: written. The record is appended in the same step, only when the history
# is written: once.
_CAS = """
if ARGV[4] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[4] then return -1 end
local cur = redis.call('GET', KEYS[1])
local token = '-'
if cur then
  token = string.match(cur, '^{"version": (%d+),') or ('h' .. redis.sha1hex(cur))
end
if token ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
if ARGV[5] == '1' and redis.call('GET', KEYS[4]) == ARGV[4] then redis.call('DEL', KEYS[4]) end
if ARGV[6] ~= '' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', 'record', ARGV[6])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
"""

# KEYS[1]: the records stream; ARGV: the record, how many to keep, the TTL. One command, not a
# MULTI/XADD/EXPIRE/EXEC transaction: the same atomic step for a quarter of the client's work.
_RECORD = """
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'record', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
"""


class ReadAhead:
    """A session's history read while the caller still speaks (``Prepare`` on ``Brain.Converse``),
    for the turn that follows on the same call. The gateway asks for it only when none of its own
    turns of the session can still be writing it; a turn on another connection of the same
    session still could, so the turn that uses it checks it is current (``unchanged_since``)
    before anything it made leaves the brain or any tool runs (``SessionRuntime._respond``)."""

    def __init__(self, store: SessionStore, user_id: str, session_id: str) -> None:
        self.user_id, self.session_id = user_id, session_id
        self._read = asyncio.create_task(store.load(user_id, session_id))
        self._read.add_done_callback(_seen)

    async def history_for(self, user_id: str, session_id: str) -> SessionHistory | None:
        """What was read, when it is this session's and the read succeeded; else None (the turn
        reads it itself). For the call's one turn: it changes what it gets."""
        if (user_id, session_id) != (self.user_id, self.session_id):
            return None
        try:
            return await self._read
        except RedisError:
            return None

    def cancel(self) -> None:
        self._read.cancel()


def _seen(task: asyncio.Task) -> None:
    """A read ahead that failed and was never used is not an error of its own."""
    if not task.cancelled():
        task.exception()


class SessionStore:
    def __init__(self, redis: aioredis.Redis, ttl_s: int, max_turns: int = 200,
                 max_records: int = 200, lease_s: float = 10.0) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self.max_turns = max_turns
        self.max_records = max_records
        self._cas = redis.register_script(_CAS)
        self._record = redis.register_script(_RECORD)
        self.leases = Leases(redis, self.lease_keys, lease_s, ttl_s)

    @staticmethod
    def key(user_id: str, session_id: str) -> str:
        return f"vb:brain:{{{user_id}:{session_id}}}:history"

    @classmethod
    def lease_keys(cls, user_id: str, session_id: str) -> tuple[str, str, str]:
        """The session's lease, its fence counter and its history (one hash slot)."""
        prefix = f"vb:brain:{{{user_id}:{session_id}}}"
        return f"{prefix}:lease", f"{prefix}:fence", cls.key(user_id, session_id)

    async def acquire(self, user_id: str, session_id: str, wait_s: float, op_timeout_s: float
                      ) -> tuple[Lease, SessionHistory]:
        """The session's lease and its history, read in the same step (session_lease.py)."""
        lease, raw = await self.leases.acquire(user_id, session_id, wait_s, op_timeout_s)
        assert not isinstance(raw, bool)
        return lease, SessionHistory.from_json(raw)

    async def acquire_unchanged(self, user_id: str, session_id: str, read: SessionHistory,
                                wait_s: float, op_timeout_s: float) -> tuple[Lease, bool]:
        """The session's lease, and whether the session is still as ``read`` found it (its
        version prefix, as ``unchanged_since``), in one step."""
        head: bytes | None = None
        if read.source is not None:
            match = _VERSION.match(read.source)
            head = match.group(0) if match else read.source
        lease, same = await self.leases.acquire(user_id, session_id, wait_s, op_timeout_s,
                                                check=head, checking=True)
        return lease, bool(same)

    async def load(self, user_id: str, session_id: str) -> SessionHistory:
        return SessionHistory.from_json(await self._get(self.key(user_id, session_id)))

    async def unchanged_since(self, user_id: str, session_id: str, read: SessionHistory) -> bool:
        """Whether the session is still as ``read`` found it: its version prefix, one GETRANGE
        of ~16 bytes (every write bumps the version: ``update``), not the whole history."""
        key = self.key(user_id, session_id)
        if read.source is None:  # nothing was stored: is there still nothing?
            return await self.redis.getrange(key, 0, 0) in (b"", "")
        match = _VERSION.match(read.source)
        if match is None:  # a value of another shape: only the whole of it can tell
            return await self._get(key) == read.source
        now = await self.redis.getrange(key, 0, len(match.group(0)) - 1)
        return (now.encode() if isinstance(now, str) else now) == match.group(0)

    async def _get(self, key: str) -> bytes | None:
        raw = await self.redis.get(key)
        return raw.encode() if isinstance(raw, str) else raw  # a client made with decode_responses

    async def update(
        self,
        user_id: str,
        session_id: str,
        change: Callable[[SessionHistory], Any],
        attempts: int = 20,
        read: SessionHistory | None = None,
        record: dict[str, Any] | None = None,
        lease: Lease | None = None,
        release: bool = False,
    ) -> SessionHistory:
        """Apply ``change`` atomically; re-read and re-apply when another writer got there first.

        ``change`` may run more than once (once per attempt), each time on a fresh copy. ``read``:
        the session as the caller read it earlier (``load``, or an earlier ``update``): the first
        attempt starts from its stored value instead of reading it again, one round trip less
        on every turn; a write in between fails the compare-and-set and the next attempt reads.
        ``record``: the turn's record (``add_record``), appended in the same step as the history
        that succeeds (one round trip less again), or on its own when there is nothing to write.
        ``lease``: the session's lease this write is made under (fenced: ``LeaseLost`` when a
        later turn took the session); ``release``: it is given back in the same step when this
        is its last holder."""
        key = self.key(user_id, session_id)
        lease_key, fence_key, _ = self.lease_keys(user_id, session_id)
        keys = [key, self.records_key(user_id, session_id), fence_key, lease_key]
        giving_back = release and lease is not None and lease.sole
        fence = [lease.token if lease is not None else "", "1" if giving_back else ""]
        extra = [_record_json(record), self.max_records] if record is not None else ["", 0]
        for attempt in range(attempts):
            raw = read.source if read is not None and attempt == 0 else await self._get(key)
            history = SessionHistory.from_json(raw)
            change(history)
            history.turns = history.turns[-self.max_turns:]
            body = history._body()
            if raw is not None and raw == _with_version(history.version, body).encode():
                if read is not None and attempt == 0:
                    continue  # nothing changed from the earlier read: the answer is what is stored now
                if record is not None:
                    await self.add_record(user_id, session_id, record)
                if giving_back:
                    assert lease is not None
                    self.leases.give_back(lease)  # nothing to write: given back on its own
                return history  # nothing changed: this was a read, and nothing is written
            token = _version_token(raw)
            history.version += 1
            written = _with_version(history.version, body)
            stored = await self._cas(keys=keys, args=[token, written, self.ttl_s, *fence, *extra])
            if stored == -1:
                raise LeaseLost(f"session {session_id}: a later turn holds it")
            if stored:
                history.source = written.encode()
                if giving_back:
                    assert lease is not None
                    self.leases.released_by_store(lease)
                return history
        raise RuntimeError(f"session {session_id}: too much write contention")

    async def append_turn(self, user_id: str, session_id: str, turn: Turn,
                          state: SessionState | None = None) -> SessionHistory:
        def change(history: SessionHistory) -> None:
            history.turns.append(turn)
            if state is not None:
                history.state = state

        return await self.update(user_id, session_id, change)

    @staticmethod
    def records_key(user_id: str, session_id: str) -> str:
        return f"vb:brain:{{{user_id}:{session_id}}}:records"

    async def add_record(self, user_id: str, session_id: str, record: dict[str, Any]) -> None:
        """Per-turn record (LLM calls, tools, guard, final text): answers "why did it say that?"."""
        await self._record(keys=[self.records_key(user_id, session_id)],
                           args=[_record_json(record), self.max_records, self.ttl_s])

    async def records(self, user_id: str, session_id: str) -> list[dict[str, Any]]:
        entries = await self.redis.xrange(self.records_key(user_id, session_id))
        return [json.loads(fields[b"record"]) for _, fields in entries]
