"""Abuse benchmark (``make bench-abuse``): do admitted callers keep their turn latency while
others hold sockets without credentials and flood typed turns?

Starts its own stack (unless ``--gateway`` names a running one): redis-server (a password,
``noeviction``), instant fake STT and TTS (tests/fakes/speech_servers.py), the scripted LLM
(tests/fakes/llm_server.py), the real brain and the real gateway with its shipped limits. Then,
in alternating windows (``--rounds`` of each, so a drift of the machine falls on both):

- quiet: ``--callers`` sessions take typed turns (``input.text``), one every 1.5-2.5 s each;
- abuse: the same, while ``--hostile`` sockets hold ``/v1/twilio`` without the secret (silent,
  ``connected`` only, a ``start`` with a wrong secret, a wrong secret in the URL; each one
  reconnects as soon as it is closed) and one more session sends ``--flood-rate`` typed turns a
  second.

Measured at the client: a turn is ``input.text`` sent -> first reply audio received. Prints a
table, the target (abuse p95 within 20 % of quiet p95) and one JSON line. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import secrets
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import websockets

from bench.gateway import cpu_seconds
from bench.stats import percentile
from voicebot.devstack import ROOT, Proc, Stack, free_port, redis_url_for

CALLER_TOKEN, FLOOD_TOKEN = "tok-caller", "tok-flood"
TOKENS = f"{CALLER_TOKEN}=caller,{FLOOD_TOKEN}=flooder"
TARGET_RATIO = 1.2
HOSTILE_KINDS = ("silent", "connected", "wrong_secret", "url_secret")


# ---- the stack ------------------------------------------------------------------------------
@dataclass
class AbuseStack:
    stack: Stack
    redis_url: str
    gateway_port: int
    upstream: dict[str, int]
    twilio_secret: str
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def ws_base(self) -> str:
        return f"ws://127.0.0.1:{self.gateway_port}"

    @property
    def http_base(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"


def start_gateway(stack: Stack, upstream: dict[str, int], redis_url: str, twilio_secret: str,
                  env: dict[str, str] | None = None, name: str = "gateway") -> Proc:
    return stack.start_service(name, "voicebot.gateway.app", {
        "GATEWAY_PORT": "0", "GATEWAY_TOKENS": TOKENS, "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_TWILIO_SECRET": twilio_secret,
        "GATEWAY_STT_ADDR": f"127.0.0.1:{upstream['stt']}",
        "GATEWAY_TTS_ADDR": f"127.0.0.1:{upstream['tts']}",
        "GATEWAY_BRAIN_ADDR": f"127.0.0.1:{upstream['brain']}", **(env or {}),
    })


def start_stack(stack: Stack, gateway_env: dict[str, str] | None = None, maxmemory: str = "0",
                tokens: str = TOKENS) -> AbuseStack:
    """Redis (with ``maxmemory``, noeviction), the fakes, the brain and one gateway."""
    password, port = secrets.token_urlsafe(18), free_port()
    redis = stack.start_redis(port, password=password, maxmemory=maxmemory)
    redis_url = redis_url_for(port, password)
    speech = stack.start_service("fake-speech", "tests.fakes.speech_servers", {})
    llm = stack.start_service("fake-llm", "tests.fakes.llm_server", {})
    brain = stack.start_service("brain", "voicebot.brain.server", {
        "BRAIN_PORT": "0", "BRAIN_METRICS_PORT": "0", "BRAIN_REDIS_URL": redis_url,
        "BRAIN_LLM_BASE_URL": f"http://127.0.0.1:{llm.ready['http']}/v1", "BRAIN_GUARD_ENABLED": "false"})
    upstream = {"stt": speech.ready["stt"], "tts": speech.ready["tts"], "brain": brain.ready["grpc"]}
    twilio_secret = secrets.token_urlsafe(18)
    gateway = start_gateway(stack, upstream, redis_url, twilio_secret,
                            {"GATEWAY_TOKENS": tokens, **(gateway_env or {})})
    return AbuseStack(stack, redis_url, gateway.ready["http"], upstream, twilio_secret,
                      {"redis": redis, "speech": speech, "llm": llm, "brain": brain, "gateway": gateway})


# ---- callers --------------------------------------------------------------------------------
@dataclass
class Caller:
    """A v1 session: every event received, with its arrival time."""

    ws: Any
    events: list[tuple[float, str, Any]] = field(default_factory=list)
    closed: int | None = None
    session_id: str = ""
    _reader: asyncio.Task | None = None

    @classmethod
    async def open(cls, base: str, token: str, session_id: str | None = None, **start: Any) -> Caller:
        """``start``: more fields of ``session.start`` (``output="text"``)."""
        ws = await websockets.connect(f"{base}/v1/call", max_size=2**22, open_timeout=30,
                                      additional_headers={"Authorization": f"Bearer {token}"})
        caller = cls(ws)
        caller._reader = asyncio.create_task(caller._read())
        await caller.send({"type": "session.start", "session_id": session_id, "language": "en",
                           "audio": {"encoding": "pcm16", "sample_rate": 16000}, **start})
        got = await caller.wait_for(("session.started", "error"), timeout=30)
        if got[1] == "session.started":
            caller.session_id = got[2]["session_id"]
        return caller

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                now = time.perf_counter()
                if isinstance(message, bytes):
                    self.events.append((now, "audio", len(message)))
                else:
                    event = json.loads(message)
                    self.events.append((now, event.get("type", "?"), event))
        except websockets.ConnectionClosed as closed:
            self.closed = closed.rcvd.code if closed.rcvd else 1006
        self.closed = self.closed or (self.ws.close_code or 1006)

    async def send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(json.dumps(message))

    async def wait_for(self, kinds: tuple[str, ...], since: int = 0,
                       timeout: float = 10.0) -> tuple[float, str, Any]:
        deadline = time.perf_counter() + timeout
        while True:
            for item in self.events[since:]:
                if item[1] in kinds:
                    return item
            if self.closed is not None or time.perf_counter() > deadline:
                raise TimeoutError(f"no {kinds} (closed {self.closed}); got {self.kinds(since)}")
            await asyncio.sleep(0.005)

    def kinds(self, since: int = 0) -> list[str]:
        return [kind for _t, kind, _p in self.events[since:]][-12:]

    def errors(self, since: int = 0) -> list[str]:
        return [p.get("code", "?") for _t, kind, p in self.events[since:] if kind == "error"]

    async def turn(self, text: str, timeout: float = 10.0) -> float:
        """A typed turn: seconds from sending it to its first reply audio (the turn then plays out)."""
        mark = len(self.events)
        sent = time.perf_counter()
        await self.send({"type": "input.text", "text": text})
        at, kind, payload = await self.wait_for(("audio", "error"), mark, timeout)
        if kind == "error":
            raise RuntimeError(f"turn refused: {payload}")
        await self.wait_for(("turn.metrics",), mark, timeout)
        return at - sent

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)


async def hostile_socket(base: str, kind: str, hold_s: float) -> tuple[int | None, float]:
    """One socket without the secret, behaving as ``kind``: (close code, or the HTTP status of a
    handshake refused, or -1 not connected; seconds until closed); the code is None when the
    gateway still held it open after ``hold_s``."""
    url = f"{base}/v1/twilio" + ("?secret=not-the-secret" if kind == "url_secret" else "")
    started = time.perf_counter()
    try:
        async with websockets.connect(url, open_timeout=30) as ws:
            if kind != "silent":
                await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            if kind == "wrong_secret":
                await ws.send(json.dumps({"event": "start", "streamSid": "MZ0", "start": {
                    "streamSid": "MZ0", "customParameters": {"secret": "not-the-secret"}}}))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(hold_s):
                    async for _ in ws:
                        pass
            return ws.close_code, time.perf_counter() - started
    except websockets.ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else 1006), time.perf_counter() - started
    except websockets.InvalidStatus as refused:  # refused in the handshake (HTTP 503: no room to wait)
        return refused.response.status_code, time.perf_counter() - started
    except (OSError, websockets.InvalidHandshake, TimeoutError):
        return -1, time.perf_counter() - started  # not even connected: counted apart


async def hostile_crowd(base: str, count: int, stop: asyncio.Event, outcomes: Counter,
                        reconnect_s: float = 1.0) -> None:
    """``count`` hostile sockets held up until ``stop``: each reconnects about ``reconnect_s``
    after it is closed (the 503's Retry-After, ±50 %: sockets of their own, not one wave; 0: at
    once, a connection-rate flood)."""

    async def one(kind: str) -> None:
        while not stop.is_set():
            code, _ = await hostile_socket(base, kind, hold_s=30)
            outcomes[str(code)] += 1
            await asyncio.sleep(reconnect_s * random.uniform(0.5, 1.5))

    tasks = [asyncio.create_task(one(HOSTILE_KINDS[i % len(HOSTILE_KINDS)])) for i in range(count)]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def flood(caller: Caller, per_s: float, stop: asyncio.Event) -> int:
    """Typed turns at ``per_s`` until ``stop``; how many were sent."""
    sent, due = 0, time.perf_counter()
    while not stop.is_set():
        await caller.send({"type": "input.text", "text": f"flood {sent}"})
        sent += 1
        due += 1 / per_s
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
    return sent


# ---- the run --------------------------------------------------------------------------------
async def callers_taking_turns(callers: list[Caller], seconds: float) -> tuple[list[float], Counter]:
    latencies: list[float] = []
    failures: Counter = Counter()

    async def one(caller: Caller) -> None:
        end = time.perf_counter() + seconds
        await asyncio.sleep(random.uniform(0, 1.5))
        while time.perf_counter() < end:
            try:
                latencies.append(await caller.turn("What time do you open on Friday?"))
            except (TimeoutError, RuntimeError) as exc:
                failures[type(exc).__name__] += 1
            await asyncio.sleep(random.uniform(1.5, 2.5))

    await asyncio.gather(*(one(c) for c in callers))
    return latencies, failures


async def attack(base: str, args) -> dict[str, Any]:
    """The attacker's side of an abuse window (run in a process of its own: its event loop,
    busy with hundreds of handshakes a second, must not be the one that times the callers)."""
    stop = asyncio.Event()
    outcomes: Counter = Counter()
    crowd = asyncio.create_task(hostile_crowd(base, args.hostile, stop, outcomes, args.reconnect_delay))
    flooder = await Caller.open(base, args.flood_token)
    flooding = asyncio.create_task(flood(flooder, args.flood_rate, stop))
    await asyncio.sleep(args.seconds)
    stop.set()
    sent = await flooding
    await crowd
    await asyncio.sleep(0.5)  # the last refusals arrive
    errors = Counter(flooder.errors())
    await flooder.close()
    return {"hostile": dict(outcomes), "flood_sent": sent,
            "flood_rate_limited": errors.get("rate_limited", 0),
            "flood_replies": sum(1 for _t, kind, _p in flooder.events if kind == "turn.metrics")}


def gateway_cpu(args) -> float | None:
    """CPU seconds of the gateway so far (our own stack's only)."""
    return cpu_seconds(args.gateway_pid) if getattr(args, "gateway_pid", None) else None


async def window(base: str, callers: list[Caller], seconds: float, abuse: bool, args) -> dict[str, Any]:
    attacker = None
    if abuse:
        attacker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.abuse", "--attack", base, "--hostile", str(args.hostile),
            "--flood-rate", str(args.flood_rate), "--flood-token", args.flood_token,
            "--reconnect-delay", str(args.reconnect_delay),
            "--seconds", str(seconds + 3), cwd=ROOT, stdout=asyncio.subprocess.PIPE)
        await asyncio.sleep(2.0)  # the crowd is up before the window opens
    cpu_before, started = gateway_cpu(args), time.perf_counter()
    latencies, failures = await callers_taking_turns(callers, seconds)
    cpu = None if cpu_before is None else (gateway_cpu(args) - cpu_before) / (time.perf_counter() - started)
    result: dict[str, Any] = {"phase": "abuse" if abuse else "quiet", "latencies": latencies,
                              "failures": dict(failures), "gateway_cores": cpu}
    if attacker is not None:
        out, _ = await attacker.communicate()
        result.update(json.loads(out.decode().strip().splitlines()[-1]))
    return result


def summary(windows: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    mine = [w for w in windows if w["phase"] == phase]
    ms = [x * 1000 for w in mine for x in w["latencies"]]
    cores = [w["gateway_cores"] for w in mine if w.get("gateway_cores") is not None]
    out: dict[str, Any] = {"turns": len(ms), "p50_ms": percentile(ms, 0.5), "p95_ms": percentile(ms, 0.95),
                           "max_ms": max(ms) if ms else None,
                           "gateway_cores": sum(cores) / len(cores) if cores else None,
                           "failed_turns": sum(sum(w["failures"].values()) for w in mine)}
    if phase == "abuse":
        hostile: Counter = Counter()
        for w in mine:
            hostile.update(w.get("hostile", {}))
        out.update(hostile_closes=dict(hostile),
                   flood_sent=sum(w.get("flood_sent") or 0 for w in mine),
                   flood_rate_limited=sum(w.get("flood_rate_limited", 0) for w in mine),
                   flood_replies=sum(w.get("flood_replies", 0) for w in mine))
    return out


def fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.0f}" if isinstance(value, float) else str(value)


def table(results: dict[str, Any]) -> str:
    rows = ["phase   turns  p50 ms  p95 ms  max ms  failed  gateway cores  "
            "hostile sockets closed (code: n)   flood sent / rate_limited / replied",
            "------  -----  ------  ------  ------  ------  -------------  "
            "---------------------------------   -----------------------------------"]
    for phase in ("quiet", "abuse"):
        s = results[phase]
        hostile = ", ".join(f"{k}: {v}" for k, v in sorted(s.get("hostile_closes", {}).items())) or "-"
        flood_cell = (f"{s['flood_sent']} / {s['flood_rate_limited']} / {s['flood_replies']}"
                      if phase == "abuse" else "-")
        cores = "-" if s["gateway_cores"] is None else f"{s['gateway_cores']:.2f}"
        rows.append(f"{phase:<6}  {s['turns']:>5}  {fmt(s['p50_ms']):>6}  {fmt(s['p95_ms']):>6}  "
                    f"{fmt(s['max_ms']):>6}  {s['failed_turns']:>6}  {cores:>13}  "
                    f"{hostile:<33}   {flood_cell}")
    target = results["target"]
    rows.append(f"target: abuse p95 <= {TARGET_RATIO:.0%} of quiet p95: {fmt(target['abuse_p95_ms'])} vs "
                f"{fmt(target['limit_ms'])} ms -> {'met' if target['met'] else 'NOT MET'}")
    return "\n".join(rows)


async def run(args, base: str) -> dict[str, Any]:
    callers = [await Caller.open(base, args.token) for _ in range(args.callers)]
    try:
        for caller in callers:  # every path warm before anything is measured
            await caller.turn("hello")
        windows = []
        for _ in range(args.rounds):
            for abuse in (False, True):
                windows.append(await window(base, callers, args.seconds, abuse, args))
                print(f"  {windows[-1]['phase']}: {len(windows[-1]['latencies'])} turns", flush=True)
    finally:
        for caller in callers:
            await caller.close()
    results: dict[str, Any] = {"quiet": summary(windows, "quiet"), "abuse": summary(windows, "abuse"),
                               "config": {k: v for k, v in vars(args).items()
                                          if "token" not in k and k not in ("attack", "gateway_pid")}}
    quiet_p95, abuse_p95 = results["quiet"]["p95_ms"], results["abuse"]["p95_ms"]
    limit = quiet_p95 * TARGET_RATIO if quiet_p95 is not None else None
    results["target"] = {"abuse_p95_ms": abuse_p95, "limit_ms": limit,
                         "met": None not in (abuse_p95, limit) and abuse_p95 <= limit
                         and results["abuse"]["failed_turns"] == 0}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateway", help="ws://HOST:PORT of a running gateway (default: start a stack)")
    parser.add_argument("--token", default=CALLER_TOKEN, help="the admitted callers' token")
    parser.add_argument("--flood-token", default=FLOOD_TOKEN, help="the flooding session's token")
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--hostile", type=int, default=200)
    parser.add_argument("--flood-rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reconnect-delay", type=float, default=1.0,
                        help="a hostile socket reconnects this long after it was refused (0: at once)")
    parser.add_argument("--attack", metavar="WS_BASE", help=argparse.SUPPRESS)  # the attacker's process
    args = parser.parse_args()
    if args.attack:
        print(json.dumps(asyncio.run(attack(args.attack, args))), flush=True)
        return
    stack = None
    try:
        if args.gateway:
            base = args.gateway.rstrip("/")
        else:
            stack = Stack(ROOT / ".run" / "bench-abuse", quiet=False)
            started = start_stack(stack)
            base, args.gateway_pid = started.ws_base, started.procs["gateway"].popen.pid
        results = asyncio.run(run(args, base))
    finally:
        if stack is not None:
            stack.stop()
    print(table(results))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
