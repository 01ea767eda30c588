"""One turn at a time per session, across replicas: a lease in Redis with a fencing token.

Why a lease, and not the state's changes expressed as operations re-applied under the
compare-and-set: what a turn changes is decided by code on the state it read (the answer to a
read-back, the form's next step, a proposal). On a state another turn changed meanwhile that
decision is not an operation to replay but a different decision; re-applying it would mean
running the turn again (its reading, its lookups), and a write cannot be replayed at all. With
the lease the state a turn decides on is the state it stores, and a write's outcome lands on
the state the turn that ran it read.

What it costs a turn: nothing in round trips. Taking the lease is the same Lua step as the
turn's first read (``acquire``: take it, then GET the history), and giving it back is the same
step as its last write (the compare-and-set deletes it): an uncontended turn makes the same two
round trips as without it (tests/unit/test_session_lease.py counts them). Each of the two does
a little more inside Redis (a counter, a key with a TTL), and the process keeps a timer to renew
the lease of a turn that runs past a third of its time.

Fencing: every acquire takes the next number of the session's fence counter, and the
compare-and-set writes only while the counter is still the writer's number. A holder whose
lease expired (a paused or partitioned replica) can never overwrite what the next holder
decided: its write fails with ``LeaseLost``.

Who holds it, and for how long: a turn from its read to its store. A barge-in or a Realtime
``response.cancel`` cancels the turn and gives it back at once, so the lease never spans audio
being played and never blocks a barge-in, except for one thing: a write that is running. The
write keeps the lease until its outcome is stored (``Agent._execute``); a turn spoken over it
waits for it (at most ``BRAIN_SESSION_WAIT_S``), then starts from the stored outcome: it tells
the caller what happened and reads their words against the finished task (``SessionRuntime._compose``).
A holder renews the lease every third of its time while it holds it, so a replica that dies
holds its sessions no longer than ``BRAIN_SESSION_LEASE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

# A turn that finds the session held waits for it in steps this long at most (the holder on
# another replica; one on this replica wakes it at once).
POLL_S = (0.005, 0.1)


class SessionBusy(Exception):
    """The session stayed held (a write still running) past the turn's wait."""


class LeaseLost(RedisError):
    """A later turn took the session: this holder's write is refused. A RedisError, so every
    place that copes with a store that failed copes with it the same way."""


# KEYS: the lease, the fence counter, the history. ARGV: the lease's time (ms), the session's
# TTL (s), what to read ("get": the history; "check": whether it still starts with ARGV[4]).
# Returns {0} when the session is held, else {token, the history or whether it is unchanged}.
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
local token = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], token, 'PX', ARGV[1])
if ARGV[3] == 'get' then return {token, redis.call('GET', KEYS[3])} end
if ARGV[4] == '' then return {token, 1 - redis.call('EXISTS', KEYS[3])} end
local head = redis.call('GETRANGE', KEYS[3], 0, string.len(ARGV[4]) - 1)
if head == ARGV[4] then return {token, 1} end
return {token, 0}
"""

# KEYS: the lease. ARGV: the token. Only the holder deletes it (or renews it).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class Lease:
    """A session held by this process. A turn holds it; a write the turn runs holds it too
    (``hold``), so a cancelled turn leaves it with the write until the write's outcome is stored."""

    def __init__(self, key: str, token: str) -> None:
        self.key = key  # the lease's Redis key
        self.token = token  # the fencing token: the fence counter's value when it was taken
        self.holders = 1
        self.free = asyncio.Event()  # set once it is given back (in Redis)
        self.renewal: asyncio.TimerHandle | None = None
        self.giving_back = False

    def hold(self) -> None:
        self.holders += 1

    @property
    def sole(self) -> bool:
        """One holder left: its last write may give the lease back in the same step."""
        return self.holders == 1


class Leases:
    """This process's leases; ``keys(user_id, session_id)``: (lease, fence, history) keys."""

    def __init__(self, redis: aioredis.Redis, keys: Callable[[str, str], tuple[str, str, str]],
                 lease_s: float, ttl_s: int) -> None:
        self.redis = redis
        self.keys = keys
        self.lease_ms = max(1, round(lease_s * 1000))
        self.ttl_s = ttl_s
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)
        self._held: dict[str, Lease] = {}
        self._work: set[asyncio.Task] = set()

    async def acquire(self, user_id: str, session_id: str, wait_s: float, op_timeout_s: float,
                      check: bytes | None = None, checking: bool = False
                      ) -> tuple[Lease, bytes | bool | None]:
        """Take the session's lease, waiting at most ``wait_s`` for a holder to give it back
        (then ``SessionBusy``); each Redis step is bounded by ``op_timeout_s`` (TimeoutError).
        Returns the lease and, in the same step, the stored history; with ``checking``, whether
        it still starts with ``check`` (None: whether nothing is stored) instead."""
        lease_key, fence_key, history_key = self.keys(user_id, session_id)
        mode, head = ("check", check or b"") if checking else ("get", b"")
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + wait_s, POLL_S[0]
        while True:
            async with asyncio.timeout(op_timeout_s):
                reply = await self._acquire(keys=[lease_key, fence_key, history_key],
                                            args=[self.lease_ms, self.ttl_s, mode, head])
            if reply[0]:
                lease = self._taken(lease_key, _text(reply[0]))
                if _being_cancelled():
                    self.let_go(lease)
                    raise asyncio.CancelledError
                return lease, (bool(reply[1]) if checking else _raw(reply[1]))
            left = deadline - loop.time()
            if left <= 0:
                raise SessionBusy(session_id)
            await self._wait(lease_key, min(pause, left), left)
            pause = min(pause * 2, POLL_S[1])

    async def _wait(self, lease_key: str, pause: float, left: float) -> None:
        """Until the holder on this replica gives it back (at most ``left``), or ``pause`` for
        one on another replica (it is polled)."""
        local = self._held.get(lease_key)
        if local is None:
            await asyncio.sleep(pause)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await local.free.wait()

    def _taken(self, lease_key: str, token: str) -> Lease:
        lease = Lease(lease_key, token)
        self._held[lease_key] = lease
        self._arm(lease)
        return lease

    def _arm(self, lease: Lease) -> None:
        loop = asyncio.get_running_loop()
        lease.renewal = loop.call_later(self.lease_ms / 3000, self._spawn_renewal, lease)

    def _spawn_renewal(self, lease: Lease) -> None:
        self._background(self._renew_once(lease))

    async def _renew_once(self, lease: Lease) -> None:
        if lease.free.is_set():
            return
        try:
            renewed = await self._renew(keys=[lease.key], args=[lease.token, self.lease_ms])
        except RedisError as exc:
            renewed = True  # Redis is away: try again in a third of the time; the fence decides
            log.warning("could not renew a session lease", extra={"error": repr(exc)})
        if renewed and not lease.free.is_set():
            self._arm(lease)

    def released_by_store(self, lease: Lease) -> None:
        """The compare-and-set gave the lease back with the turn's last write."""
        self._forget(lease)

    def let_go(self, lease: Lease) -> None:
        """One holder is done; the last one gives the lease back."""
        lease.holders -= 1
        if lease.holders <= 0:
            self.give_back(lease)

    def give_back(self, lease: Lease) -> None:
        """In the background: a cancelled turn's ``finally`` must not wait on Redis."""
        if not lease.free.is_set() and not lease.giving_back:
            lease.giving_back = True
            self._background(self._give_back(lease))

    async def _give_back(self, lease: Lease) -> None:
        try:
            await self._release(keys=[lease.key], args=[lease.token])
        except RedisError as exc:  # it expires on its own, and the fence guards what follows
            log.warning("could not give a session lease back", extra={"error": repr(exc)})
        finally:
            self._forget(lease)

    def _forget(self, lease: Lease) -> None:
        if lease.renewal is not None:
            lease.renewal.cancel()
        lease.free.set()
        if self._held.get(lease.key) is lease:
            del self._held[lease.key]

    def _background(self, work) -> None:
        task = asyncio.ensure_future(work)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    async def drain(self) -> None:
        """Wait for the leases being given back (tests; a server stopping)."""
        while self._work:
            await asyncio.gather(*list(self._work), return_exceptions=True)


def _being_cancelled() -> bool:
    """Whether this task was cancelled during a Redis command: redis-py finishes a command it
    is cancelled in and returns its reply, so a barge-in's cancel would be lost there and the
    turn would go on holding the session."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _raw(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value
