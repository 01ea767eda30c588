"""The fault suite (issue 13): every part of the stack killed by pid mid-turn, as a caller hears it.

One stack of real processes on random ports, its own (it kills things): redis-server with an
append-only file and a password, the scripted LLM in a process (tests/faults/llm_child.py), the
restaurant's MCP server, STT (Whisper base), TTS (piper), the brain and the gateway. A WebSocket
caller talks to it; for each of the LLM (failing, then killed), the MCP server, TTS, the brain,
STT and Redis, a turn is started, the part is killed with SIGKILL (no shutdown, no drain), and:

- the caller hears a short sentence (reply audio arrives, after an ``error`` event where the
  protocol has one: ``upstream_unavailable`` for STT, brain and TTS) within ``BOUND_S``;
- the socket stays open;
- once the part is started again on its port, the next turn on the same socket works.

Redis: a turn completed more than a second before the kill is still in the history after the
restart, on the same socket and on a resumed one. The measured figures (kill -> first audio of
the fallback) are printed as a table at the end of the run (tests/faults/conftest.py).

The target is 2 s; the bound is ``BOUND_S`` because CI runs on a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
import websockets

from tests.audio import silence, speech
from tests.conftest import LOG_ROOT
from tests.faults import RESULTS
from voicebot.brain.business.profile import load_profile
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.common.audio import float_to_pcm16
from voicebot.common.redis import connect_redis_sync
from voicebot.devstack import (
    Proc,
    Stack,
    free_port,
    redis_url_for,
    start_brain_and_gateway,
    start_mcp_servers,
    start_speech,
)

pytestmark = pytest.mark.integration

TARGET_S = 2.0
BOUND_S = float(os.environ.get("FAULT_BOUND_S", "4.0"))  # the target, with margin for a busy CI box
TOKEN = "tok-fault"
RATE = 16000
FRAME_BYTES = RATE * 20 // 1000 * 2
PROFILE = load_profile("restaurant")


# ---- the stack ------------------------------------------------------------------------------
@dataclass
class FaultStack:
    stack: Stack
    procs: dict[str, Proc]
    redis_url: str
    gateway_port: int

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.gateway_port}/v1/call"

    def kill(self, name: str) -> float:
        """SIGKILL the part by pid; returns when it was killed (perf_counter)."""
        proc = self.procs[name]
        os.kill(proc.popen.pid, signal.SIGKILL)
        killed_at = time.perf_counter()
        proc.popen.wait()
        return killed_at

    async def restart(self, name: str) -> float:
        """Start the part again on its ports (as the Supervisor does); seconds it took."""
        started = time.perf_counter()
        proc = self.procs[name]
        assert proc.relaunch is not None
        self.procs[name] = await asyncio.to_thread(proc.relaunch)
        return time.perf_counter() - started

    async def wait_ready(self, upstream: str, timeout: float = 15.0) -> None:
        deadline = time.perf_counter() + timeout
        async with httpx.AsyncClient() as http:
            while time.perf_counter() < deadline:
                reply = await http.get(f"http://127.0.0.1:{self.gateway_port}/readyz")
                if reply.json()["checks"].get(upstream):
                    return
                await asyncio.sleep(0.05)
        raise AssertionError(f"the gateway did not see {upstream} back within {timeout} s")

    async def gateway_metric(self, name: str, **labels: str) -> float:
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://127.0.0.1:{self.gateway_port}/metrics")).text
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            metric, _, value = line.rpartition(" ")
            if metric.startswith(name + "{") or metric == name:
                got = ",".join(sorted(re.findall(r'\w+="[^"]*"', metric)))
                if got == want:
                    return float(value)
        return 0.0


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    data = tmp_path_factory.mktemp("faults")
    stack = Stack(LOG_ROOT / "faults", quiet=True)
    try:
        password = secrets.token_urlsafe(18)
        redis_port = free_port()
        redis = stack.start_redis(redis_port, password=password, data_dir=data / "redis")
        redis_url = redis_url_for(redis_port, password)
        llm = stack.start_service("llm", "tests.faults.llm_child", {"FAULT_LLM_PORT": "0"},
                                  timeout=30, prefix="FAULT_LLM")
        stt, tts = start_speech(stack)
        servers, profile_env = start_mcp_servers(stack, "restaurant", {
            "RESERVATIONS_DB": str(data / "reservations.sqlite3"), "RESERVATIONS_TODAY": "2026-11-30",
            "RESERVATIONS_LOG_LEVEL": "WARNING"})
        brain, gateway = start_brain_and_gateway(
            stack, redis_url=redis_url, llm_base_url=f"http://127.0.0.1:{llm.ready['http']}/v1",
            tokens=f"{TOKEN}=fault-user", stt=stt, tts=tts, brain_env=profile_env)
        yield FaultStack(stack, {"redis": redis, "llm": llm, "stt": stt, "tts": tts,
                                 "mcp": servers["reservations"], "brain": brain, "gateway": gateway},
                         redis_url, gateway.ready["http"])
    finally:
        stack.close()


# ---- the caller -----------------------------------------------------------------------------
@dataclass
class Caller:
    """One WebSocket session: everything received, stamped with its arrival time."""

    ws: Any
    log: list[tuple[float, str, Any]] = field(default_factory=list)  # (time, "audio" | type, payload)
    closed: int | None = None
    session_id: str = ""
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _mic: list[bytes] = field(default_factory=list)

    @classmethod
    async def open(cls, url: str, session_id: str | None = None) -> Caller:
        ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"},
                                      max_size=2**22)
        caller = cls(ws)
        caller._tasks.append(asyncio.create_task(caller._receive()))
        await ws.send(json.dumps({"type": "session.start", "session_id": session_id, "language": "en",
                                  "audio": {"encoding": "pcm16", "sample_rate": RATE}}))
        _, started = await caller.wait_for("session.started", timeout=15)
        caller.session_id = started["session_id"]
        return caller

    async def _receive(self) -> None:
        try:
            async for message in self.ws:
                now = time.perf_counter()
                if isinstance(message, bytes):
                    self.log.append((now, "audio", len(message)))
                else:
                    event = json.loads(message)
                    self.log.append((now, event["type"], event))
        except websockets.ConnectionClosed as closed:
            self.closed = closed.rcvd.code if closed.rcvd else 1006

    def mark(self) -> int:
        return len(self.log)

    async def wait_for(self, kind: str, since: int = 0, timeout: float = 15.0,
                       where: Callable[[Any], bool] = lambda _p: True) -> tuple[float, Any]:
        """The first ``kind`` received at or after log index ``since``: (arrival time, payload)."""
        deadline = time.perf_counter() + timeout
        while True:
            for at, got, payload in self.log[since:]:
                if got == kind and where(payload):
                    return at, payload
            if self.closed is not None:
                raise AssertionError(f"socket closed ({self.closed}) waiting for {kind}")
            if time.perf_counter() > deadline:
                raise AssertionError(f"no {kind} within {timeout} s; got {self.kinds(since)}")
            await asyncio.sleep(0.005)

    def index_of(self, kind: str, since: int = 0) -> int:
        return next(i for i, (_t, got, _p) in enumerate(self.log) if i >= since and got == kind)

    def kinds(self, since: int = 0) -> list[str]:
        out: list[str] = []
        for _t, kind, _p in self.log[since:]:
            if not (kind == "audio" and out and out[-1] == "audio"):
                out.append(kind)
        return out

    def errors(self, since: int = 0) -> list[str]:
        return [p["code"] for _t, kind, p in self.log[since:] if kind == "error"]

    def audio_s(self, since: int = 0, until: int | None = None) -> float:
        return sum(p for _t, kind, p in self.log[since:until] if kind == "audio") / 2 / RATE

    async def say_text(self, text: str) -> int:
        mark = self.mark()
        await self.ws.send(json.dumps({"type": "input.text", "text": text}))
        return mark

    async def text_turn(self, text: str, timeout: float = 20.0) -> str:
        """A typed turn that must complete: its reply text (audio arrived, turn.metrics came)."""
        mark = await self.say_text(text)
        _, done = await self.wait_for("reply.done", mark, timeout)
        await self.wait_for("turn.metrics", mark, timeout)
        assert self.audio_s(mark) > 0.3, self.kinds(mark)
        assert not self.errors(mark), self.errors(mark)
        return done["text"]

    # A live microphone: real-time 20 ms frames, queued speech, else silence.
    def start_microphone(self) -> None:
        self._tasks.append(asyncio.create_task(self._microphone()))

    async def _microphone(self) -> None:
        due = time.perf_counter()
        while True:
            await self.ws.send(self._mic.pop(0) if self._mic else bytes(FRAME_BYTES))
            due = max(due + 0.02, time.perf_counter())
            await asyncio.sleep(due - time.perf_counter())

    def speak(self, audio: np.ndarray) -> float:
        """Queue speech (plus closing silence); returns how long it takes to send."""
        pcm = float_to_pcm16(np.concatenate([audio, silence(800)]))
        self._mic += [pcm[i:i + FRAME_BYTES].ljust(FRAME_BYTES, b"\0")
                      for i in range(0, len(pcm), FRAME_BYTES)]
        return len(self._mic) * 0.02

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()


@pytest.fixture
async def caller(faults):
    c = await Caller.open(faults.ws_url)
    # A first turn warms every path (and the gateway has its fallback sentences by now).
    await c.text_turn("hello there")
    yield c
    assert c.closed is None, f"the socket was closed ({c.closed})"
    await c.close()


def record(stage: str, kill_to_audio_s: float | None, **extra: Any) -> None:
    RESULTS[stage] = {"kill_to_first_audio_s": kill_to_audio_s, "target_s": TARGET_S, **extra}
    shown = "-" if kill_to_audio_s is None else f"{kill_to_audio_s:.2f} s"
    print(f"\n{stage}: kill -> first fallback audio {shown} {extra}")


# Words that are no question and name no task need the model's reading; "break", "slowly" and
# "briefly" script the model's answer to it (tests/faults/llm_child.py).
NEEDS_READING = "my cousin says hello to the chef"


def turn_records(faults: FaultStack, caller: Caller) -> list[dict[str, Any]]:
    """The brain's record of each turn of the caller's session (``SessionStore.records``)."""
    client = connect_redis_sync(faults.redis_url)
    try:
        entries = client.xrange(SessionStore.records_key("fault-user", caller.session_id))
    finally:
        client.close()
    return [json.loads(fields[b"record"]) for _, fields in entries]


async def read_by_the_model(caller: Caller) -> None:
    """A turn whose words need the model's reading: once the LLM is back, it is read and code
    answers (the knowledge has nothing on the chef: the unknown-fact sentence, not the fallback)."""
    reply = await caller.text_turn(NEEDS_READING)
    assert reply != PROFILE.sentences.fallback
    assert reply.startswith(PROFILE.sentences.unknown_fact), reply


# ---- the cases ------------------------------------------------------------------------------
async def test_llm_failing_speaks_the_fallback_and_the_next_turn_works(faults, caller):
    mark = await caller.say_text(f"please break now, {NEEDS_READING}")  # the scripted LLM answers 500
    sent = time.perf_counter()
    audio_at, _ = await caller.wait_for("audio", mark, timeout=10)
    _, done = await caller.wait_for("reply.done", mark)
    assert done["text"] == PROFILE.sentences.fallback
    await caller.wait_for("turn.metrics", mark)
    record("llm (HTTP 500)", audio_at - sent, note="from the request: nothing is killed")
    assert audio_at - sent < BOUND_S
    await read_by_the_model(caller)


async def test_llm_killed_mid_turn(faults, caller):
    mark = await caller.say_text(f"slowly, {NEEDS_READING}")
    await asyncio.sleep(0.5)  # the brain's reading request is waiting for its first token
    killed_at = faults.kill("llm")
    audio_at, _ = await caller.wait_for("audio", mark, timeout=10)
    _, done = await caller.wait_for("reply.done", mark)
    assert done["text"] == PROFILE.sentences.fallback
    restart_s = await faults.restart("llm")
    record("llm (killed)", audio_at - killed_at, restart_s=round(restart_s, 2))
    assert audio_at - killed_at < BOUND_S
    await read_by_the_model(caller)


async def test_mcp_server_killed_mid_turn(faults, caller):
    # A booking with every value: rules read the day, time and party; the name, in lower case,
    # needs the model's reading (0.6 s, "briefly"). Then code's finder calls find_slots on the
    # MCP server, which was killed while the reading was on its way.
    mark = await caller.say_text("briefly, can I book a table for two on Friday at seven pm under lee")
    await asyncio.sleep(0.3)  # the model is still reading the words (0.6 s)
    killed_at = faults.kill("mcp")
    audio_at, _ = await caller.wait_for("audio", mark, timeout=15)
    _, done = await caller.wait_for("reply.done", mark)
    # The bot says it cannot check; it never makes something up.
    assert done["text"] == PROFILE.sentences.tool_unavailable
    tools = turn_records(faults, caller)[-1]["tools"]
    assert [(t["name"], t["outcome"]) for t in tools] == [("find_slots", "unavailable")], tools
    restart_s = await faults.restart("mcp")
    record("mcp server", audio_at - killed_at, restart_s=round(restart_s, 2),
           note="includes 0.3 s of the scripted model's reading")
    assert audio_at - killed_at < BOUND_S
    # The server is back: code's next lookup reaches it (another day: code looks again).
    reply = await caller.text_turn("What about Saturday at seven pm?")
    assert "can't check" not in reply and reply != PROFILE.sentences.tool_unavailable
    tools = turn_records(faults, caller)[-1]["tools"]
    assert [t["name"] for t in tools] == ["find_slots"] and tools[0]["outcome"] == "succeeded", tools


async def test_tts_killed_mid_reply(faults, caller):
    spoken_before = await faults.gateway_metric("voicebot_gateway_fallbacks_total", failed="tts",
                                                source="tts")
    mark = await caller.say_text("tell me a story")
    await caller.wait_for("audio", mark, timeout=15)  # the reply is being spoken
    killed_at = faults.kill("tts")
    error_at, error = await caller.wait_for("error", mark, timeout=10)
    assert error["code"] == "upstream_unavailable"
    after_error = caller.index_of("error", mark)
    audio_at, _ = await caller.wait_for("audio", after_error, timeout=10)
    await caller.wait_for("audio.end", after_error, timeout=15)
    # The cached sentence (spoken by TTS earlier), not the chime: TTS itself is what is down.
    assert await faults.gateway_metric("voicebot_gateway_fallbacks_total", failed="tts",
                                       source="tts") == spoken_before + 1
    assert caller.audio_s(after_error) > 1.0
    restart_s = await faults.restart("tts")
    record("tts", audio_at - killed_at, error_s=round(error_at - killed_at, 2), restart_s=round(restart_s, 2))
    assert audio_at - killed_at < BOUND_S
    await caller.text_turn("hello again")


async def test_brain_killed_mid_turn(faults, caller):
    mark = await caller.say_text(f"slowly, {NEEDS_READING}")  # the brain waits 2.5 s for the reading
    await asyncio.sleep(0.5)
    killed_at = faults.kill("brain")
    error_at, error = await caller.wait_for("error", mark, timeout=10)
    assert error["code"] == "upstream_unavailable"
    audio_at, _ = await caller.wait_for("audio", caller.index_of("error", mark), timeout=10)
    restart_s = await faults.restart("brain")
    record("brain", audio_at - killed_at, error_s=round(error_at - killed_at, 2),
           restart_s=round(restart_s, 2))
    assert audio_at - killed_at < BOUND_S
    await caller.text_turn("hello again")


async def test_stt_killed_mid_utterance(faults, caller):
    caller.start_microphone()
    question = speech("Do you have a table for two people tonight?")
    mark = caller.mark()
    caller.speak(question)
    await caller.wait_for("transcript.partial", mark, timeout=15)  # STT is hearing it
    killed_at = faults.kill("stt")
    error_at, error = await caller.wait_for("error", mark, timeout=10)
    assert error["code"] == "upstream_unavailable"
    audio_at, _ = await caller.wait_for("audio", caller.index_of("error", mark), timeout=10)
    await asyncio.sleep(1.0)
    # Told once per outage, not once per frame (the link retries with backoff meanwhile).
    assert caller.errors(mark) == ["upstream_unavailable"], caller.errors(mark)
    restart_s = await faults.restart("stt")
    back_at = time.perf_counter()
    # "Back" as the gateway sees it: its STT channel answers health checks again.
    await faults.wait_ready("stt")
    seen_s = time.perf_counter() - back_at
    record("stt", audio_at - killed_at, error_s=round(error_at - killed_at, 2),
           restart_s=round(restart_s, 2))
    assert audio_at - killed_at < BOUND_S
    # The next spoken turn, on the same socket, once STT is back.
    mark = caller.mark()
    caller.speak(speech("Hello, can you hear me now?"))
    _, final = await caller.wait_for("transcript.final", mark, timeout=20)
    assert "hear" in final["text"].lower()
    await caller.wait_for("turn.metrics", mark, timeout=20)
    RESULTS["stt"]["note"] = (f"gateway saw STT back {seen_s:.1f} s after its READY; "
                              f"the next utterance was heard in full")


async def test_redis_restart_keeps_the_session_and_its_history(faults, caller):
    # The history the brain keeps is the dialog's state: a booking half asked for. Code asks the
    # next missing value; it can do so after the restart only if the state from before it is kept.
    task = PROFILE.tasks["create_reservation"]
    first = "I'd like to book a table for two on Friday"
    assert await caller.text_turn(first) == task.fields["time"].ask
    await asyncio.sleep(1.2)  # older than one appendfsync everysec
    mark = await caller.say_text(f"briefly, {NEEDS_READING}")
    await asyncio.sleep(0.3)  # history loaded, the model reading the words (0.6 s)
    killed_at = faults.kill("redis")
    # Redis holds the history only: the reply being made is still heard (its write is retried).
    audio_at, _ = await caller.wait_for("audio", mark, timeout=15)
    down_s = time.perf_counter() - killed_at
    restart_s = await faults.restart("redis")
    await caller.wait_for("turn.metrics", mark, timeout=15)
    record("redis (mid-reply)", audio_at - killed_at, restart_s=round(restart_s, 2),
           note=f"the reply itself, not a fallback; redis down {down_s:.1f} s")
    assert audio_at - killed_at < BOUND_S
    assert first in [r["text"] for r in turn_records(faults, caller)]  # the turn before the kill
    # The next turn on the same socket goes on from the state before the restart: the day and
    # the party are known, the time is taken, and code asks for the name.
    assert await caller.text_turn("at seven pm") == task.fields["name"].ask
    # So does a resumed session on a new socket: with the name, code reads the booking back.
    again = await Caller.open(faults.ws_url, caller.session_id)
    try:
        assert again.session_id == caller.session_id
        reply = await again.text_turn("Lee")
        assert reply.startswith("To confirm: a table for") and "Lee" in reply, reply
    finally:
        await again.close()


async def test_redis_down_when_a_turn_starts(faults, caller):
    killed_at = faults.kill("redis")
    mark = await caller.say_text("what is on the menu")  # the brain cannot load the history
    # The brain waits at most BRAIN_HISTORY_LOAD_TIMEOUT_S (1 s) for the history, then says its
    # fallback sentence: nothing is decided without the session's state.
    audio_at, _ = await caller.wait_for("audio", mark, timeout=20)
    _, done = await caller.wait_for("reply.done", mark, timeout=10)
    assert done["text"] == load_profile("restaurant").sentences.fallback
    record("redis (down at turn start)", audio_at - killed_at,
           note="the brain's fallback after a 1 s bound on the history load")
    await caller.wait_for("audio.end", mark, timeout=15)
    await faults.restart("redis")
    await caller.text_turn("hello again")
    assert audio_at - killed_at < BOUND_S
