"""Redis's memory, as Prometheus figures (alerts VoicebotRedisMemoryHigh / VoicebotRedisMemoryFull).

Redis runs with ``maxmemory-policy noeviction``: at its limit it refuses writes (OOM errors,
counted by Redis in ``errorstat_OOM``) and never evicts a live session or a pending action. The
limit must be seen coming, so the gateway, which holds a Redis client anyway, reads ``INFO`` now
and then and exports used and maximum memory and the refusals. No exporter sidecar is needed.
"""

from __future__ import annotations

import asyncio
import logging
import re

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from voicebot.gateway.metrics import REDIS_MAXMEMORY, REDIS_REJECTED_WRITES, REDIS_USED_MEMORY

log = logging.getLogger("voicebot.gateway.redis_memory")
OOM_COUNT = re.compile(r"count=(\d+)")


async def sample(redis: aioredis.Redis) -> dict[str, int]:
    """One reading: used and max memory (bytes), and the commands refused at maxmemory."""
    memory = await redis.info("memory")
    errors = await redis.info("errorstats")
    oom = errors.get("errorstat_OOM", {})
    # redis-py parses "count=3" into {"count": 3}; an older one leaves the string.
    refused = oom.get("count", 0) if isinstance(oom, dict) else int((OOM_COUNT.search(str(oom)) or [0, 0])[1])
    reading = {"used": int(memory.get("used_memory", 0)), "max": int(memory.get("maxmemory", 0)),
               "oom_rejections": int(refused)}
    REDIS_USED_MEMORY.set(reading["used"])
    REDIS_MAXMEMORY.set(reading["max"])
    REDIS_REJECTED_WRITES.set(reading["oom_rejections"])
    return reading


async def watch_redis_memory(redis: aioredis.Redis, interval_s: float) -> None:
    while True:
        try:
            await sample(redis)
        except (RedisError, OSError) as exc:  # Redis down: /readyz and the error counters say so
            log.debug("redis memory not read", extra={"error": repr(exc)})
        await asyncio.sleep(interval_s)
