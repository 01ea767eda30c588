"""Sessions survive Redis: a real redis-server with an append-only file (fsync every second) and
a password, killed and restarted under a client made by ``connect_redis``."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
import redis.exceptions

from voicebot.common.redis import CONNECT_TIMEOUT_S, RETRIES, connect_redis, connect_redis_sync, max_wait_s
from voicebot.devstack import Proc, Stack, free_port, redis_url_for
from voicebot.gateway.sessions import SessionRegistry

pytestmark = pytest.mark.integration

PASSWORD = "durable-" + "x" * 16


@pytest.fixture
def durable_redis(tmp_path):
    stack = Stack(tmp_path / "logs", quiet=True)
    port = free_port()
    proc = stack.start_redis(port, password=PASSWORD, data_dir=tmp_path / "data")
    yield stack, proc, redis_url_for(port, PASSWORD)
    stack.close()


def crash_and_restart(proc: Proc, down_s: float) -> threading.Thread:
    """SIGKILL (no shutdown, no final fsync), then start it again after ``down_s``."""
    os.kill(proc.popen.pid, signal.SIGKILL)
    proc.popen.wait()

    def restart() -> None:
        time.sleep(down_s)
        assert proc.relaunch is not None
        proc.relaunch()

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    return thread


async def test_a_restart_mid_use_costs_a_short_wait_and_no_data(durable_redis):
    _stack, proc, url = durable_redis
    client = connect_redis(url)
    sessions = SessionRegistry(client, ttl_s=3600)
    try:
        ids = [await sessions.create(f"user-{n}") for n in range(5)]
        await client.rpush("vb:test:history", *[f"turn {n}" for n in range(20)])
        await asyncio.sleep(1.5)  # older than one appendfsync everysec
        restarter = crash_and_restart(proc, down_s=0.5)
        started = time.monotonic()
        # The pooled connection is dead and the port closed for 0.5 s: the call retries through it.
        resumed = await sessions.resume("user-0", ids[0])
        waited = time.monotonic() - started
        await asyncio.to_thread(restarter.join, 30)
        assert resumed == ids[0]
        assert 0.3 < waited < max_wait_s() + 2 * CONNECT_TIMEOUT_S, waited
        for n, session_id in enumerate(ids):  # every session resumes, with its owner
            assert await sessions.resume(f"user-{n}", session_id) == session_id
            assert await sessions.resume("someone-else", session_id) is None
        assert await client.lrange("vb:test:history", 0, -1) == [f"turn {n}".encode() for n in range(20)]
    finally:
        await client.aclose()


async def test_a_dropped_pooled_connection_is_replaced_without_an_error(durable_redis):
    _stack, _proc, url = durable_redis
    client = connect_redis(url)
    admin = connect_redis_sync(url)
    try:
        await client.set("vb:test:k", "v")
        killed = admin.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1  # the async client's pooled connection is gone
        assert await client.get("vb:test:k") == b"v"
    finally:
        await client.aclose()
        admin.close()


async def test_the_retry_is_bounded_when_redis_stays_down(durable_redis):
    _stack, proc, url = durable_redis
    client = connect_redis(url)
    try:
        await client.ping()
        os.kill(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait()
        started = time.monotonic()
        with pytest.raises(redis.exceptions.ConnectionError):
            await client.get("vb:test:k")
        waited = time.monotonic() - started
        # It did back off (each sleep is at least half its step) and then gave up.
        assert max_wait_s(RETRIES) / 2 <= waited < max_wait_s(RETRIES) + (RETRIES + 1) * CONNECT_TIMEOUT_S
    finally:
        await client.aclose()


async def test_a_client_without_the_password_is_refused(durable_redis, monkeypatch):
    _stack, _proc, url = durable_redis
    bare = url.replace(f":{PASSWORD}@", "")
    monkeypatch.delenv("VOICEBOT_REDIS_PASSWORD", raising=False)
    client = connect_redis(bare, retries=0)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            await client.ping()
    finally:
        await client.aclose()
    # The password can come from the shared setting instead of the URL.
    monkeypatch.setenv("VOICEBOT_REDIS_PASSWORD", PASSWORD)
    client = connect_redis(bare)
    try:
        assert await client.ping()
    finally:
        await client.aclose()
