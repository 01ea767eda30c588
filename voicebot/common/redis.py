"""The one way services connect to Redis: password, bounded retries, stale-connection checks.

A pooled connection can die under a client (Redis restarted, a NAT or proxy
dropped an idle connection). redis-py then fails the next call with
ConnectionError unless it is told to retry; with ``Retry`` here the call
reconnects and is sent again, with jittered exponential backoff, a bounded
number of times (about ``max_wait_s`` in all), so a Redis restart costs the
callers a short wait instead of an error. ``health_check_interval`` pings a
connection that was idle that long before using it, so a half-open one is
replaced before a command is lost on it.

A command is retried only on ConnectionError or TimeoutError. One whose
reply was lost may run twice; what we send is safe to repeat (SET NX, GET,
EXPIRE, versioned writes checked in a transaction).

Password: one in the URL (``redis://:PASSWORD@host:6379/0``) wins, then the
``password`` argument, then ``VOICEBOT_REDIS_PASSWORD``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import EqualJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from voicebot.common.config import SharedSettings

RETRY_ON = (RedisConnectionError, RedisTimeoutError)
# Backoff per attempt: 0.1, 0.2, 0.4, 0.8, 1, 1 s (each between half and all of it):
# a local Redis restart (AOF replay included) takes well under a second.
RETRIES = 6
BACKOFF_BASE_S = 0.1
BACKOFF_CAP_S = 1.0
HEALTH_CHECK_INTERVAL_S = 10
CONNECT_TIMEOUT_S = 2.0
# A command that gets no answer for this long counts as a dead connection (and is retried).
SOCKET_TIMEOUT_S = 5.0


def max_wait_s(retries: int = RETRIES) -> float:
    """The longest the backoff sleeps before the last attempt fails (connect timeouts aside)."""
    return sum(min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** n) for n in range(1, retries + 1))


def _password(url: str, password: str | None) -> str | None:
    if urlsplit(url).password:
        return None  # from_url takes it from the URL
    if password:
        return password
    return SharedSettings().redis_password.get_secret_value() or None


def _options(url: str, password: str | None, retries: int, retry_cls: type) -> dict[str, Any]:
    options: dict[str, Any] = {
        "retry": retry_cls(EqualJitterBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S), retries),
        "retry_on_error": list(RETRY_ON),
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_keepalive": True,
    }
    secret = _password(url, password)
    if secret:
        options["password"] = secret
    return options


def connect_redis(url: str, password: str | None = None, *, retries: int = RETRIES,
                  **kwargs: Any) -> aioredis.Redis:
    """An asyncio Redis client for ``url`` that survives dropped connections and Redis restarts.

    No I/O happens here; the first command connects. ``kwargs`` go to redis-py
    (e.g. ``decode_responses=True``) and override the defaults above.
    """
    options = _options(url, password, retries, AsyncRetry)
    return aioredis.Redis.from_url(url, **{**options, **kwargs})


def connect_redis_sync(url: str, password: str | None = None, *, retries: int = RETRIES,
                       **kwargs: Any) -> redis.Redis:
    """The same for blocking code (scripts, tests)."""
    options = _options(url, password, retries, Retry)
    return redis.Redis.from_url(url, **{**options, **kwargs})
