"""Which user owns which session, in Redis. Another user's session id and an
unknown one give the same answer: None."""

from __future__ import annotations

import asyncio
import secrets

import redis.asyncio as aioredis

# redis-py's asyncio pool refuses a command outright ("Too many connections") once its
# connections (100 by default) are all busy: a burst of session starts (every caller
# reconnecting after a restart) would get 1011. They wait their turn here instead.
MAX_CONCURRENT = 32


class SessionRegistry:
    def __init__(self, redis: aioredis.Redis, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self._slots = asyncio.Semaphore(MAX_CONCURRENT)

    @staticmethod
    def _key(session_id: str) -> str:
        return f"vb:gw:session:{session_id}"

    async def create(self, user_id: str) -> str:
        session_id = "s_" + secrets.token_urlsafe(12)
        async with self._slots:
            await self.redis.set(self._key(session_id), user_id, ex=self.ttl_s, nx=True)
        return session_id

    async def resume(self, user_id: str, session_id: str) -> str | None:
        async with self._slots:
            owner = await self.redis.get(self._key(session_id))
            if owner is None or owner.decode() != user_id:
                return None
            await self.redis.expire(self._key(session_id), self.ttl_s)
        return session_id
