"""Conversation history per session in Redis.

Keys are scoped by user *and* session, so another user's session id finds
nothing: it looks exactly like a session that does not exist. Every write is
a compare-and-set on a version number (WATCH/MULTI), so two replicas serving
turns of one session concurrently cannot lose each other's updates.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import WatchError

from services.brain.state import SessionState

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


@dataclass
class SessionHistory:
    version: int = 0
    turns: list[Turn] = field(default_factory=list)
    # Dialog state (pending action, collected fields, references): state.py.
    state: SessionState = field(default_factory=SessionState)

    @classmethod
    def from_json(cls, raw: bytes | str | None) -> SessionHistory:
        if not raw:
            return cls()
        data = json.loads(raw)
        try:
            state = SessionState.model_validate(data.get("state") or {})
        except ValidationError:
            # Written by an older release: the turns stay, the dialog starts afresh (nothing
            # pending is ever guessed back into shape).
            log.warning("session state in an old shape; starting it afresh")
            state = SessionState()
        return cls(data["version"], [Turn(**t) for t in data["turns"]], state)

    def to_json(self) -> str:
        return json.dumps({"version": self.version, "turns": [asdict(t) for t in self.turns],
                           "state": self.state.model_dump(mode="json")})

    def mark_spoken(self, turn_id: str, spoken: str, interrupted: bool) -> bool:
        """Keep only what the person heard of an earlier reply."""
        for turn in reversed(self.turns):
            if turn.turn_id == turn_id:
                if interrupted:
                    turn.assistant, turn.interrupted = spoken, True
                return True
        return False


class SessionStore:
    def __init__(self, redis: aioredis.Redis, ttl_s: int, max_turns: int = 200) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self.max_turns = max_turns

    @staticmethod
    def key(user_id: str, session_id: str) -> str:
        return f"vb:brain:{{{user_id}:{session_id}}}:history"

    async def load(self, user_id: str, session_id: str) -> SessionHistory:
        return SessionHistory.from_json(await self.redis.get(self.key(user_id, session_id)))

    async def update(
        self,
        user_id: str,
        session_id: str,
        change: Callable[[SessionHistory], Any],
        attempts: int = 20,
    ) -> SessionHistory:
        """Apply ``change`` atomically; re-read and re-apply when another writer got there first."""
        key = self.key(user_id, session_id)
        for _ in range(attempts):
            async with self.redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(key)
                    history = SessionHistory.from_json(await pipe.get(key))
                    change(history)
                    history.turns = history.turns[-self.max_turns:]
                    history.version += 1
                    pipe.multi()
                    pipe.set(key, history.to_json(), ex=self.ttl_s)
                    await pipe.execute()
                    return history
                except WatchError:
                    continue
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

    async def add_record(self, user_id: str, session_id: str, record: dict[str, Any],
                         max_records: int = 200) -> None:
        """Per-turn record (LLM calls, tools, guard, final text): answers "why did it say that?"."""
        key = self.records_key(user_id, session_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(key, {"record": json.dumps(record, default=str)}, maxlen=max_records,
                      approximate=True)
            pipe.expire(key, self.ttl_s)
            await pipe.execute()

    async def records(self, user_id: str, session_id: str) -> list[dict[str, Any]]:
        entries = await self.redis.xrange(self.records_key(user_id, session_id))
        return [json.loads(fields[b"record"]) for _, fields in entries]
