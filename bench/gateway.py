"""Gateway benchmark (``make bench-gateway``): what the gateway itself adds, and how many
real-time sessions one gateway process carries.

Starts redis, instant fake STT and TTS gRPC servers (tests/fakes/speech_servers.py), a scripted
LLM (tests/fakes/llm_server.py) and the real brain, each as its own process; then, for each
variant (a set of GATEWAY_* settings), the real gateway, and plays people over WebSocket:

- latency: one session streams real-time 20 ms frames and takes turns (600 ms of "speech",
  then silence). End of speech (the first quiet frame sent) -> first reply audio received,
  p50/p95. With instant engines that is the gateway's and the brain's own time; the brain's
  share (``llm_ttft`` from ``turn.metrics``) is shown next to it. Every variant's gateway runs
  at once and the variants take turns at this in ``--rounds`` rounds, so a drift of the
  machine's speed within the run falls on all of them; each variant's p50 is also given against
  the first variant's, with a bootstrap interval.
- load: N sessions at once, each streaming real-time frames with a turn every 2-4 s: turn
  p50/p99, gateway CPU (cores, from /proc over the measured window), CPU per audio frame,
  errors by code, turns with no audio within 5 s, and sessions refused beyond capacity.

Everything runs on this machine: the client, the fakes and the brain compete with the gateway
for the same cores, so the figures are an upper bound on its latency; the gateway's CPU is its
own process's. Compare variants within one run (ratios), not against another machine.
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
import numpy as np
import websockets
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection
from websockets.frames import Frame, Opcode

from bench import cpu_latency
from bench import gateway_hops as bench_hops
from bench import gateway_targets as bench_targets
from bench.gateway_stalls import StallMeter
from bench.stats import p50_ratio_interval, percentile
from voicebot.common import gc_tuning
from voicebot.devstack import ROOT, Proc, Stack, free_port

RATE = 16000
FRAME_MS = 20
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
SILENCE = bytes(FRAME_BYTES)
TONE = (np.sin(2 * np.pi * 220 * np.arange(FRAME_BYTES // 2) / RATE) * 8000).astype(np.int16).tobytes()
SPEECH_FRAMES = 30  # 600 ms
# The two frames the callers send, each encoded once as a client's masked binary WebSocket frame
# (RFC 6455; the mask key is random once, not per frame: nothing between here and the gateway
# caches). Written straight to the socket they cost the client ~5x less CPU than the library's
# send, so the harness takes less of the cores it shares with the brain and the fakes.
PREPARED = {pcm: Frame(Opcode.BINARY, pcm).serialize(mask=True) for pcm in (TONE, SILENCE)}
NO_AUDIO_AFTER_S = 5.0
TOKEN = "tok-bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")

VARIANTS = {
    # The gateway as configured by default.
    "tuned": {},
    # Python's own garbage-collector thresholds, nothing frozen (voicebot/common/gc_tuning.py).
    "python-gc": {"VOICEBOT_GC": "python"},
    # No reply started on the speculative transcript (GATEWAY_PREEMPTIVE).
    "no-preemptive": {"GATEWAY_PREEMPTIVE": "false"},
}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def resident_mib(pid: int) -> float:
    """The process's resident memory now (VmRSS), MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class StampedConnection(ClientConnection):
    """A caller's connection that notes when bytes last arrived: a reply's first audio is timed
    from there, not from when the caller's task got to it (the client's loop may first run a
    burst of other callers' frames and replies: its time, not the system's)."""

    received_at = 0.0

    def data_received(self, data: bytes) -> None:
        self.received_at = time.perf_counter()
        super().data_received(data)


@dataclass
class Session:
    """A person: silence, then 600 ms of "speech" when a turn is due, then waiting for the reply."""

    ws: object
    phase: int
    next_turn_at: float
    period: tuple[float, float]
    state: str = "idle"  # idle | speaking | waiting
    speech_left: int = 0
    speech_end_at: float = 0.0  # when the first quiet frame after the speech was sent
    turns: list[float] = field(default_factory=list)
    brain_ms: list[float] = field(default_factory=list)
    # Each turn's time less the brain's share of it (the gateway's llm_ttft for the same turn):
    # what the gateway, the fakes and the sockets add, without the brain's queue on its core.
    without_brain: list[float] = field(default_factory=list)
    reported: float | None = None  # the last turn's time, until its turn.metrics comes
    stages: list[dict] = field(default_factory=list)  # turn.metrics, the gateway's own view
    missed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    frames: int = 0
    received: int = 0  # WebSocket messages from the gateway
    deltas: int = 0
    closed: int | None = None

    def frame(self, now: float) -> bytes:
        if self.state == "speaking":
            if self.speech_left:
                self.speech_left -= 1
                return TONE
            self.state, self.speech_end_at = "waiting", now
            return SILENCE
        if self.state == "waiting" and now - self.speech_end_at > NO_AUDIO_AFTER_S:
            self.missed += 1
            self.state = "idle"
        if self.state == "idle" and now >= self.next_turn_at:
            self.state, self.speech_left = "speaking", SPEECH_FRAMES - 1
            self.next_turn_at = now + random.uniform(*self.period)
            return TONE
        return SILENCE

    def arrived(self) -> float:
        """When the message just read came: the connection's last bytes (those that completed it
        came then or before, never before the message itself), else now."""
        now = time.perf_counter()
        stamped = getattr(self.ws, "received_at", 0.0)
        return stamped if 0.0 < stamped <= now else now

    async def receive(self) -> None:
        try:
            async for message in self.ws:
                self.received += 1
                if isinstance(message, bytes):
                    if self.state == "waiting":
                        self.reported = (self.arrived() - self.speech_end_at) * 1000
                        self.turns.append(self.reported)
                        self.state = "idle"
                    continue
                event = json.loads(message)
                if event["type"] == "reply.delta":
                    self.deltas += 1
                elif event["type"] == "error":
                    self.errors[event["code"]] = self.errors.get(event["code"], 0) + 1
                elif event["type"] == "turn.metrics":
                    self.stages.append(event["ms"])
                    if event["ms"].get("llm_ttft") is not None:
                        self.brain_ms.append(event["ms"]["llm_ttft"])
                        if self.reported is not None:
                            self.without_brain.append(self.reported - event["ms"]["llm_ttft"])
                    self.reported = None
        except websockets.ConnectionClosed as closed:
            self.closed = closed.rcvd.code if closed.rcvd else 1006


async def open_session(url: str, phase: int, first_turn_at: float,
                       period: tuple[float, float]) -> Session | tuple[str, int]:
    """A started session, or ("refused", the error's code, else the close code) when the
    gateway said no."""
    ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"},
                                  max_size=2**22, ping_interval=None, create_connection=StampedConnection)
    # A gateway at capacity sends its error and closes before reading the start: the send may
    # then fail, and the error is still there to read.
    with contextlib.suppress(websockets.ConnectionClosed):
        await ws.send(json.dumps({"type": "session.start", "session_id": None, "language": "en",
                                  "audio": {"encoding": "pcm16", "sample_rate": RATE}}))
    try:
        first = json.loads(await asyncio.wait_for(ws.recv(), 15))
    except websockets.ConnectionClosed as closed:  # closed with no word
        return ("refused", closed.rcvd.code if closed.rcvd else 1006)
    if first.get("type") != "session.started":
        with contextlib.suppress(Exception):
            await ws.close()
        return ("refused", first.get("code", "?"))
    return Session(ws, phase, first_turn_at, period)


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


# Slots of the 20 ms the callers' frames are spread over (caller i sends in slot i % PHASES). 20
# slots instead of 5 (smaller bursts) made no difference larger than the machine's own drift.
PHASES = 5
RAMP_BATCH, RAMP_PAUSE_S = 25, 0.5  # callers arrive over time: the gateway's admission sees the load


async def microphones(sessions: list[Session], stop: asyncio.Event, late_ms: list[float]) -> None:
    """Every session's real-time frames from one loop, spread over the 20 ms like real clients':
    session ``phase`` sends in its own of ``PHASES`` slots, every slot in turn (a late slot is
    caught up, never skipped, so no session loses a frame)."""
    slot_s = FRAME_MS / PHASES / 1000
    start, slot = time.perf_counter(), 0
    while not stop.is_set():
        wait = start + slot * slot_s - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        now = time.perf_counter()
        for s in list(sessions):
            if s.phase == slot % PHASES and s.closed is None:
                s.frames += 1
                # The caller's own clock, not the slot's: the end of speech is stamped as its
                # quiet frame goes, not up to a burst of other callers' sends earlier (~0.3 ms
                # on average at 200 sessions, the client's time, not the system's).
                await send_frame(s.ws, s.frame(time.perf_counter()))
        late_ms.append(max(0.0, (time.perf_counter() - now) * 1000))
        slot += 1


async def send_frame(ws, pcm: bytes) -> None:
    """A prepared frame straight to the socket; through the library when the connection has an
    extension (the gateway agrees to none, so that path is a safety net)."""
    prepared = PREPARED.get(pcm)
    if prepared is not None and not ws.protocol.extensions:
        if not ws.transport.is_closing():
            ws.transport.write(prepared)
        return
    with contextlib.suppress(websockets.ConnectionClosed):
        await ws.send(pcm)


async def run_sessions(url: str, count: int, seconds: float, period: tuple[float, float],
                       gateway_pid: int, others: dict[str, int], warmup_s: float = 2.0,
                       samples: bool = False, brain_metrics: str | None = None,
                       stalls: StallMeter | None = None) -> dict:
    """``count`` callers arriving in batches, streaming real-time audio; measured for ``seconds``
    after ``warmup_s``: turns, errors, and the CPU of every process (the gateway's, and the
    others' for context) in that window, and the machine's late wake-ups in it (``stalls``).
    ``samples``: each turn's figures too (``*_samples_ms``)."""
    sessions: list[Session] = []
    refused: list = []
    receivers: list[asyncio.Task] = []
    late_ms: list[float] = []
    stop = asyncio.Event()
    mics = asyncio.create_task(microphones(sessions, stop, late_ms))
    for first in range(0, count, RAMP_BATCH):
        now = time.perf_counter()
        opened = await asyncio.gather(*(open_session(url, i % PHASES, now + random.uniform(*period), period)
                                        for i in range(first, min(count, first + RAMP_BATCH))),
                                      return_exceptions=True)
        for item in opened:
            if isinstance(item, Session):
                sessions.append(item)
                receivers.append(asyncio.create_task(item.receive()))
            else:
                refused.append(item)
        if first + RAMP_BATCH < count:
            await asyncio.sleep(RAMP_PAUSE_S)
    await asyncio.sleep(warmup_s)
    cpu_start, frames_start = cpu_seconds(gateway_pid), sum(s.frames for s in sessions)
    others_start = {name: cpu_seconds(pid) for name, pid in others.items()}
    others_start["client"] = own_cpu_seconds()
    counters_start, gateway_gc = await gateway_counters(url)
    gc_start = await gc_pauses_now(gateway_gc, brain_metrics)
    for s in sessions:
        s.turns.clear()
        s.brain_ms.clear()
        s.stages.clear()
        s.missed, s.errors, s.received, s.deltas = 0, {}, 0, 0
    late_ms.clear()
    window_start = time.monotonic()
    await asyncio.sleep(seconds)
    window_end = time.monotonic()
    cpu = cpu_seconds(gateway_pid) - cpu_start
    rss = resident_mib(gateway_pid)
    counters_end, gateway_gc = await gateway_counters(url)
    gc_end = await gc_pauses_now(gateway_gc, brain_metrics)
    counters = {k: v - counters_start.get(k, 0.0) for k, v in counters_end.items()}
    others_cores = {name: (cpu_seconds(pid) - others_start[name]) / seconds for name, pid in others.items()}
    others_cores["client"] = (own_cpu_seconds() - others_start["client"]) / seconds
    frames = sum(s.frames for s in sessions) - frames_start
    stop.set()
    await mics
    for s in sessions:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(s.ws.close(), 2)
    for task in receivers:
        task.cancel()
    await asyncio.gather(*receivers, return_exceptions=True)
    turns = [t for s in sessions for t in s.turns]
    brain_ms = [b for s in sessions for b in s.brain_ms]
    without_brain = [t for s in sessions for t in s.without_brain]
    errors = counts_summed(s.errors for s in sessions)
    kept = {f"{name}_samples_ms": [round(v, 3) for v in values] for name, values in
            (("turn", turns), ("brain", brain_ms), ("without_brain", without_brain))} if samples else {}
    return {
        **kept,
        "sessions": count, "admitted": len(sessions),
        "refused": len([r for r in refused if isinstance(r, tuple)]),
        "refusals": refusal_codes(refused),
        "connect_failures": len([r for r in refused if isinstance(r, BaseException)]),
        "turns": len(turns), "turn_p50_ms": percentile(turns, 0.5),
        "turn_p95_ms": percentile(turns, 0.95), "turn_p99_ms": percentile(turns, 0.99),
        "brain_p50_ms": percentile(brain_ms, 0.5), "brain_p99_ms": percentile(brain_ms, 0.99),
        "without_brain_p50_ms": percentile(without_brain, 0.5),
        "without_brain_p99_ms": percentile(without_brain, 0.99),
        "missed_turns": sum(s.missed for s in sessions), "errors": errors,
        "closed": sum(s.closed is not None for s in sessions),
        "gateway_cores": cpu / seconds, "gateway_us_per_frame": cpu / max(1, frames) * 1e6,
        "gateway_rss_mib": rss,
        "client_tick_p99_ms": percentile(late_ms, 0.99), "other_cores": others_cores,
        "machine_stalls": stalls.window(window_start, window_end) if stalls else None,
        # Each process's collections in the window and how long they stopped it, ms.
        "gc_pauses": {name: {"collections": round(end["collections"] - gc_start[name]["collections"]),
                             "ms": round((end["seconds"] - gc_start[name]["seconds"]) * 1000, 1)}
                      for name, end in gc_end.items()},
        "stt_messages_per_frame": counters["stt_messages"] / max(1.0, counters["frames"]),
        "ws_messages_per_turn": sum(s.received for s in sessions) / max(1, len(turns)),
        "reply_deltas_per_turn": sum(s.deltas for s in sessions) / max(1, len(turns)),
        **{f"gateway_stages_p{q}_ms": stage_percentiles(sessions, q / 100) for q in (50, 99)},
    }


def refusal_codes(refused: list) -> dict[str, int]:
    """How the gateway said no: each error code (or close code) and how many callers got it."""
    return dict(Counter(str(item[1]) for item in refused if isinstance(item, tuple)))


def stage_percentiles(sessions: list[Session], q: float) -> dict[str, float | None]:
    """The gateway's own view of each stage (``turn.metrics``), over every session's turns."""
    return {stage: percentile([m[stage] for s in sessions for m in s.stages if m.get(stage) is not None], q)
            for stage in ("endpoint", "stt", "llm_ttft", "tts_ttfa", "voice_to_voice")}


def start_gateway(stack: Stack, env: dict[str, str], upstream: dict[str, int], redis_url: str,
                  name: str) -> Proc:
    return stack.start_service(f"gateway-{name}", "voicebot.gateway.app", {
        "GATEWAY_PORT": "0", "GATEWAY_TOKENS": f"{TOKEN}=bench", "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_LOG_LEVEL": "WARNING",
        # One token plays every caller: the per-user cap would refuse all but the first few.
        "GATEWAY_MAX_SESSIONS_PER_USER": "0",
        "GATEWAY_STT_ADDR": f"127.0.0.1:{upstream['stt']}",
        "GATEWAY_TTS_ADDR": f"127.0.0.1:{upstream['tts']}",
        "GATEWAY_BRAIN_ADDR": f"127.0.0.1:{upstream['brain']}", **env,
    })


def stop_proc(stack: Stack, proc: Proc) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.popen.pid, signal.SIGTERM)
    with contextlib.suppress(Exception):
        proc.popen.wait(timeout=15)
    stack.procs.remove(proc)


def start_backends(stack: Stack, guard: bool) -> tuple[dict[str, int], str, dict[str, int], str]:
    """Redis, the fakes and the brain: the upstream ports, Redis's URL, the processes' pids and
    the brain's metrics URL."""
    redis_port = free_port()
    stack.start_redis(redis_port)
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    speech = stack.start_service("fake-speech", "tests.fakes.speech_servers", {})
    llm = stack.start_service("fake-llm", "tests.fakes.llm_server", {})
    brain = stack.start_service("brain", "voicebot.brain.server", {
        "BRAIN_PORT": "0", "BRAIN_METRICS_PORT": "0", "BRAIN_REDIS_URL": redis_url,
        "BRAIN_LLM_BASE_URL": f"http://127.0.0.1:{llm.ready['http']}/v1", "BRAIN_LOG_LEVEL": "WARNING",
        "BRAIN_GUARD_ENABLED": "true" if guard else "false",
    })
    pids = {"brain": brain.popen.pid, "fake_speech": speech.popen.pid, "fake_llm": llm.popen.pid}
    ports = {"stt": speech.ready["stt"], "tts": speech.ready["tts"], "brain": brain.ready["grpc"]}
    return ports, redis_url, pids, f"http://127.0.0.1:{brain.ready['metrics']}/metrics"


def _pin(pid: int, cores: set[int]) -> None:
    """Every thread of ``pid`` (a process's affinity is per thread; its threads exist already)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cores)


def pin_cores(gateway_pid: int, other_pids: list[int], cores: list[int]) -> None:
    """The gateway alone on the last core, every other process (the bench's client, the brain,
    the fakes, redis) on the others: what one gateway process carries on one core of its own."""
    if len(cores) < 2:
        raise SystemExit("--pin needs at least two cores")
    _pin(gateway_pid, {cores[-1]})
    for pid in other_pids:
        _pin(pid, set(cores[:-1]))


_http: list[httpx.AsyncClient] = []


def http() -> httpx.AsyncClient:
    """The run's one HTTP client, made before anything is measured. Making one builds an SSL
    context, tens of ms of this process's CPU in which no caller's frame goes out and no reply is
    read: a client per scrape at a window's edges timed the turns then that much late."""
    if not _http:
        _http.append(httpx.AsyncClient())
    return _http[0]


async def scrape(metrics_url: str) -> str:
    return (await http().get(metrics_url)).text


def gc_pauses(text: str) -> dict[str, float]:
    """A process's collections so far and the time they stopped it (``voicebot_gc_pause_seconds``,
    all generations), from its Prometheus text."""
    totals = {"voicebot_gc_pause_seconds_count": 0.0, "voicebot_gc_pause_seconds_sum": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return {"collections": totals["voicebot_gc_pause_seconds_count"],
            "seconds": totals["voicebot_gc_pause_seconds_sum"]}


async def gateway_counters(url: str) -> tuple[dict[str, float], dict[str, float]]:
    """The gateway's own counts (audio frames in, audio messages to STT) and its collections
    (``gc_pauses``), from one scrape."""
    names = {"voicebot_gateway_audio_frames_total": "frames",
             "voicebot_gateway_stt_audio_messages_total": "stt_messages"}
    text = await scrape(http_base(url) + "/metrics")
    found = {"frames": 0.0, "stt_messages": 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            found[names[name]] = float(value)
    return found, gc_pauses(text)


async def gc_pauses_now(gateway: dict[str, float], brain_metrics: str | None) -> dict[str, dict[str, float]]:
    """Collections so far of the gateway (scraped with its counters), the brain and this client."""
    found = {"gateway": gateway, "client": gc_pauses(generate_latest().decode())}
    if brain_metrics:
        found["brain"] = gc_pauses(await scrape(brain_metrics))
    return found


async def until_idle(http_url: str, timeout: float = 30.0) -> None:
    """Wait until the gateway has closed every session of the last level (they hold its slots)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "\nvoicebot_active_sessions 0.0" in await scrape(f"{http_url}/metrics"):
            return
        await asyncio.sleep(0.2)


def http_base(ws_url: str) -> str:
    """The gateway's HTTP address for its WebSocket URL (``/metrics``, ``/readyz``)."""
    return ws_url.replace("ws://", "http://").removesuffix("/v1/call")


def in_turns(names: list[str], rounds: int) -> list[list[str]]:
    """The variants' order in each round: every one once, the order rotated each round."""
    return [names[index % len(names):] + names[:index % len(names)] for index in range(rounds)]


async def interleaved_latency(urls: dict[str, str], gateway_pids: dict[str, int], others: dict[str, int],
                              seconds: float, rounds: int, brain_metrics: str) -> dict[str, dict]:
    """One caller's turns on each variant's gateway, the variants taking turns in ``rounds``
    rounds (the order rotated each round), so that a machine whose speed drifts within the hour
    (as these shared ones do) slows every variant alike; each variant's rounds pooled. Without
    the late wake-ups' bystander: it is for the load windows' tails, and its 500 wake-ups a
    second would be in one caller's turns too, between the stack's own steps."""
    parts: dict[str, list[dict]] = {name: [] for name in urls}
    for order in in_turns(list(urls), rounds):
        for name in order:
            parts[name].append(await run_sessions(urls[name], 1, seconds / rounds, (1.5, 2.0),
                                                  gateway_pids[name], others, warmup_s=1.0, samples=True,
                                                  brain_metrics=brain_metrics))
    return {name: pooled(runs) for name, runs in parts.items()}


def counts_summed(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Counts by code (errors, refusals) of several sessions or runs, as one."""
    total: dict[str, int] = {}
    for each in counts:
        for code, n in each.items():
            total[code] = total.get(code, 0) + n
    return total


def pooled(runs: list[dict]) -> dict:
    """Several short runs of one session as one: percentiles over all their turns, counts summed
    (sessions admitted and refused too: ``rounds`` times the level's callers in all), rates
    averaged."""
    out = dict(runs[-1])
    for key in ("turn", "brain", "without_brain"):
        out[f"{key}_samples_ms"] = [v for r in runs for v in r[f"{key}_samples_ms"]]
    turns, brain, without = (out[f"{k}_samples_ms"] for k in ("turn", "brain", "without_brain"))
    out.update({
        "rounds": len(runs), "turns": len(turns),
        "turn_p50_ms": percentile(turns, 0.5), "turn_p95_ms": percentile(turns, 0.95),
        "turn_p99_ms": percentile(turns, 0.99),
        "brain_p50_ms": percentile(brain, 0.5), "brain_p99_ms": percentile(brain, 0.99),
        "without_brain_p50_ms": percentile(without, 0.5), "without_brain_p99_ms": percentile(without, 0.99),
        "missed_turns": sum(r["missed_turns"] for r in runs),
        **{key: sum(r.get(key, 0) for r in runs)
           for key in ("admitted", "refused", "connect_failures", "closed")},
        "refusals": counts_summed(r.get("refusals", {}) for r in runs),
        "errors": counts_summed(r["errors"] for r in runs),
    })
    for key in ("gateway_cores", "gateway_us_per_frame", "stt_messages_per_frame", "ws_messages_per_turn",
                "reply_deltas_per_turn"):
        out[key] = sum(r[key] for r in runs) / len(runs)
    out["gc_pauses"] = {name: {key: round(sum(r["gc_pauses"][name][key] for r in runs), 1)
                               for key in ("collections", "ms")} for name in runs[-1]["gc_pauses"]}
    stalls = [r["machine_stalls"] for r in runs if r.get("machine_stalls")]
    out["machine_stalls"] = {"over_2ms": sum(s["over_2ms"] for s in stalls),
                             "over_10ms": sum(s["over_10ms"] for s in stalls),
                             "max_ms": max(s["max_ms"] for s in stalls)} if stalls else None
    return out


async def interleaved_loads(urls: dict[str, str], gateway_pids: dict[str, int], others: dict[str, int],
                            args, brain_metrics: str,
                            stalls: StallMeter | None = None) -> dict[str, list[dict]]:
    """Each level of ``--sessions`` on every variant's gateway, the variants taking turns in
    ``--load-rounds`` rounds of ``--seconds`` / rounds each (the order rotated each round), each
    variant's rounds at a level pooled; without the per-turn samples (the JSON stays small)."""
    loads: dict[str, list[dict]] = {name: [] for name in urls}
    for count in args.sessions:
        parts: dict[str, list[dict]] = {name: [] for name in urls}
        for order in in_turns(list(urls), args.load_rounds):
            for name in order:
                await until_idle(http_base(urls[name]))
                parts[name].append(await run_sessions(urls[name], count, args.seconds / args.load_rounds,
                                                      (2.0, 4.0), gateway_pids[name], others, samples=True,
                                                      brain_metrics=brain_metrics, stalls=stalls))
        for name in urls:
            merged = pooled(parts[name])
            loads[name].append({k: v for k, v in merged.items() if not k.endswith("_samples_ms")})
        print(f"  {count} sessions done", file=sys.stderr, flush=True)
    return loads


def fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def table(results: dict) -> str:
    pinned = "the gateway alone on one core, everything else on the others (--pin)"
    rows = [pinned] if results.get("pinned") else []
    bound = results["machine"].get("cpu_wakeup_bound_us")
    if results.get("idle_poll"):
        rows.append("idle CPUs held polling for the run (--idle-poll: /dev/cpu_dma_latency at 0 µs)")
    elif bound is not None and bound < cpu_latency.NO_BOUND_US:
        rows.append(f"idle CPUs held to wake within {bound} µs by another process (/dev/cpu_dma_latency)")
    hops = results["machine"].get("hops")
    if hops:
        rows.append(
            f"this machine's hops between two idle processes (p50): socket round trip "
            f"{hops['socket_round_trip_ms']:.2f} ms, gRPC message on an open stream "
            f"{hops['grpc_stream_message_ms']:.2f}, gRPC call {hops['grpc_call_ms']:.2f}; a turn's "
            f"transport floor {hops['turn_floor_ms']:.1f} ms (bench/gateway_hops.py)")
        if "cold_work_factor" in hops:
            rows.append(
                f"after {bench_hops.IDLE_S:g} s idle, as one caller's brain, Redis and LLM are between "
                f"turns: a socket round trip {hops['socket_round_trip_after_idle_ms']:.2f} ms, and the "
                f"same Python {hops['cold_work_factor']:.1f}x as long as back to back "
                f"({hops['work_after_idle_ms']:.2f} against {hops['work_ms']:.2f} ms)")
    first = next(iter(results["variants"]), None)
    for name, r in results["variants"].items():
        lat = r["latency"]
        rows += [
            f"variant {name}: {r['env'] or 'defaults'}",
            f"  end of speech -> first reply audio, 1 session: p50 {fmt(lat['turn_p50_ms'])} ms, "
            f"p95 {fmt(lat['turn_p95_ms'])} ms ({lat['turns']} turns in {lat['rounds']} rounds; "
            f"the brain's own share p50 {fmt(lat['brain_p50_ms'], '.0f')} ms)",
        ]
        versus = r.get("latency_p50_vs_first")
        if versus:
            rows.append(f"  p50 against {first}'s, the same rounds: {versus[0]:+.1%} "
                        f"(90 % bootstrap interval {versus[1]:+.1%} to {versus[2]:+.1%})")
        rows += [
            f"  messages: {fmt(lat['stt_messages_per_frame'], '.2f')} STT messages per audio frame, "
            f"{fmt(lat['ws_messages_per_turn'], '.1f')} WebSocket messages to the client per turn "
            f"({fmt(lat['reply_deltas_per_turn'], '.1f')} reply.delta)",
            "  sessions  admitted  refused  turns  p50 ms  p99 ms  brain p50/p99  w/o brain  "
            "missed  errors      gw cores  us/frame  gw MiB  brain  fakes  client  gc ms gw/brain  "
            "late wake-ups",
            "  --------  --------  -------  -----  ------  ------  -------------  ---------  "
            "------  ----------  --------  --------  ------  -----  -----  ------  --------------  "
            "-------------"]
        for load in r["load"]:
            errors = ",".join(f"{k}:{v}" for k, v in sorted(load["errors"].items())) or "0"
            other = load["other_cores"]
            brain, without = ("/".join(fmt(load.get(f"{key}_p{q}_ms"), ".0f") for q in (50, 99))
                              for key in ("brain", "without_brain"))
            fakes = other.get("fake_speech", 0) + other.get("fake_llm", 0)
            pauses = load.get("gc_pauses", {})
            gc_ms = "/".join(fmt(pauses.get(name, {}).get("ms"), ".0f") for name in ("gateway", "brain"))
            stalls = load.get("machine_stalls")
            late = f"{stalls['over_2ms']}/{stalls['over_10ms']} ({stalls['max_ms']:.0f})" if stalls else "-"
            rows.append(
                f"  {load['sessions']:>8}  {load['admitted']:>8}  {load['refused']:>7}  {load['turns']:>5}  "
                f"{fmt(load['turn_p50_ms']):>6}  {fmt(load['turn_p99_ms']):>6}  "
                f"{brain:>13}  {without:>9}  "
                f"{load['missed_turns']:>6}  {errors:<10}  "
                f"{fmt(load['gateway_cores'], '.2f'):>8}  {fmt(load['gateway_us_per_frame'], '.0f'):>8}  "
                f"{fmt(load.get('gateway_rss_mib'), '.0f'):>6}  "
                f"{other.get('brain', 0):>5.2f}  {fakes:>5.2f}  {other.get('client', 0):>6.2f}  {gc_ms:>14}  "
                f"{late:>13}")
        if "targets" in r:
            rows += ["  targets:", bench_targets.summary(r["targets"])]
        rows.append("")
    rows.append("cores: CPU seconds per second of each process over the measured window; us/frame: the "
                "gateway's CPU per 20 ms audio frame received; gw MiB: its resident memory at the end; "
                "brain p50/p99: the gateway's request to the brain's first text (turn.metrics llm_ttft), ms; "
                "w/o brain p50/p99: each turn less that share of it, ms; gc ms: how long the cycle collector "
                "stopped the gateway and the brain in the window (voicebot_gc_pause_seconds); late wake-ups: "
                "a bystander process sleeping 2 ms at a time woke over 2 / over 10 ms late this many times "
                "in the window (the latest, ms): how long a woken process waited for a CPU then, the hour's "
                "share of the tail (bench/gateway_stalls.py)")
    return "\n".join(rows)


async def main_async(args) -> dict:
    os.environ.setdefault("VOICEBOT_INTERNAL_TOKEN", secrets.token_urlsafe(32))
    stack = Stack(ROOT / ".run" / "bench-gateway", env={"LOG_JSON": "true"}, quiet=True)
    results: dict = {"machine": {"cores": os.cpu_count(), "load_avg_at_start": os.getloadavg(),
                                 "cpu_wakeup_bound_us": cpu_latency.current_bound_us()},
                     "guard": args.guard, "pinned": args.pin, "idle_poll": args.idle_poll, "variants": {}}
    http()
    stalls = StallMeter()
    try:
        cores = sorted(os.sched_getaffinity(0))  # before --pin narrows this process's own
        print("measuring this machine's hops between processes ...", file=sys.stderr, flush=True)
        results["machine"]["hops"] = await bench_hops.measure()  # before the stack loads the cores
        upstream, redis_url, pids, brain_metrics = start_backends(stack, args.guard)
        # The client's own collections would show as the gateway's latency.
        gc_tuning.settle(gc_tuning.configured())
        # Every variant's gateway at once (idle ones cost nothing), so that the variants can
        # take turns at the one-caller latency and at each load level.
        gateways = {name: start_gateway(stack, {
            **VARIANTS[name], "GATEWAY_MAX_SESSIONS": str(args.max_sessions),
            "GATEWAY_MAX_LOOP_LAG_MS": str(args.max_loop_lag_ms),
            "GATEWAY_MAX_CPU_CORES": str(args.max_cpu_cores)}, upstream, redis_url, name)
            for name in args.variants}
        gateway_pids = {name: gateway.popen.pid for name, gateway in gateways.items()}
        if args.pin:
            others = [proc.popen.pid for proc in stack.procs if proc.popen.pid not in gateway_pids.values()]
            for pid in gateway_pids.values():
                pin_cores(pid, [os.getpid(), *others], cores)
        urls = {name: f"ws://127.0.0.1:{gateway.ready['http']}/v1/call" for name, gateway in gateways.items()}
        latency = await interleaved_latency(urls, gateway_pids, pids, args.latency_seconds, args.rounds,
                                            brain_metrics)
        await stalls.start()  # the bystander: for the load windows only (interleaved_latency)
        base = latency[args.variants[0]]["turn_samples_ms"]
        loads = await interleaved_loads(urls, gateway_pids, pids, args, brain_metrics, stalls)
        for name, gateway in gateways.items():
            stop_proc(stack, gateway)
            results["variants"][name] = {"latency": latency[name], "load": loads[name], "env": VARIANTS[name]}
            results["variants"][name]["targets"] = bench_targets.checks(results["variants"][name],
                                                                        args.max_sessions)
            if name != args.variants[0]:
                results["variants"][name]["latency_p50_vs_first"] = p50_ratio_interval(
                    latency[name]["turn_samples_ms"], base)
    finally:
        await stalls.stop()
        stack.stop()
        await http().aclose()
        _http.clear()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=lambda s: [int(x) for x in s.split(",")],
                        default=[10, 50, 100, 200, 400])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured window per load level")
    # 90 s: ~50 turns. Fewer make the p50 a coin toss near the 5 ms target (resampled from a
    # long run, a p50 of ~33 turns crossed it far more often than one of ~50).
    parser.add_argument("--latency-seconds", type=float, default=90.0,
                        help="one caller's turns, per variant, over all rounds")
    parser.add_argument("--rounds", type=int, default=3,
                        help="the variants take turns at the one-caller latency this many times each")
    parser.add_argument("--load-rounds", type=int, default=1,
                        help="the variants take turns at each load level this many times each "
                             "(--seconds split between the rounds)")
    parser.add_argument("--variants", type=lambda s: s.split(","), default=["tuned", "python-gc"],
                        help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--max-sessions", type=int, default=200, help="GATEWAY_MAX_SESSIONS")
    parser.add_argument("--max-loop-lag-ms", type=float, default=0.0,
                        help="GATEWAY_MAX_LOOP_LAG_MS (0: sessions are refused only beyond --max-sessions)")
    parser.add_argument("--max-cpu-cores", type=float, default=0.0,
                        help="GATEWAY_MAX_CPU_CORES (0: not checked)")
    parser.add_argument("--guard", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--pin", action="store_true",
                        help="the gateway alone on one core, the brain, fakes, redis and client on the rest")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the first variant misses a target (bench/gateway_targets.py)")
    parser.add_argument("--idle-poll", action="store_true",
                        help="hold /dev/cpu_dma_latency at 0 for the run (root): idle CPUs poll instead of "
                             "halting, as on a latency-tuned host (bench/cpu_latency.py)")
    args = parser.parse_args()
    unknown = [name for name in args.variants if name not in VARIANTS]
    if unknown or len(set(args.variants)) != len(args.variants):
        parser.error(f"--variants: each once, of {', '.join(VARIANTS)} (got {','.join(args.variants)})")
    if args.rounds < 1 or args.load_rounds < 1:
        parser.error("--rounds and --load-rounds: at least 1")
    with contextlib.ExitStack() as host:
        if args.idle_poll:
            try:
                host.enter_context(cpu_latency.held_bound(0))
            except OSError as exc:
                parser.error(f"--idle-poll: {exc}")
        try:
            import uvloop

            results = uvloop.run(main_async(args))
        except ImportError:
            results = asyncio.run(main_async(args))
    print(table(results))
    verdicts = {name: r["targets"] for name, r in results["variants"].items()}
    for name, r in results["variants"].items():
        r["targets"] = bench_targets.as_json(verdicts[name])
    print(json.dumps({"bench_gateway": results}))
    judged = args.variants[0]
    misses = bench_targets.missed(verdicts[judged])
    if args.check and misses:
        sys.exit(f"bench-gateway --check: {judged} missed: {'; '.join(check.target for check in misses)}")


if __name__ == "__main__":
    main()
