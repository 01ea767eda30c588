"""``make bench-v2v``: voice to voice through the stack as ``make run`` starts it, measured at the client.

Spoken turns (piper and espeak-ng voices at several speeds) stream over the
gateway's WebSocket in real-time 20 ms frames, silence between them, as a
caller's microphone does. For each turn the client measures end of speech (its
last speech frame sent) → first reply audio received, and reads the gateway's
per-stage ``turn.metrics`` (endpoint, stt, llm_ttft, first_clause, tts_ttfa). The caller
listens to the whole reply before speaking again. Cases, in one run:

- ``questions, guard on`` / ``guard off``: questions only the model can answer;
- ``questions, guard on, LLM only``: the same with the guard's quick screen off
  (``BRAIN_GUARD_SCREEN=false``: every question is judged by the LLM guard, as before the
  screen), so the screen's share of the guard's cost shows in the same run (the three
  question cases take turns, a session of four questions each, so the machine's slow minutes
  are shared between them; each case asks them in its own order, ``session_order``, and every
  reply is sampled with one seed, ``SEED``);
- ``form, next field``: a booking given one field at a time ("I would like to book a table",
  "On Friday", ...): each reply is code's next question or its read-back (``FORM``);
- ``booking changes``: changes to a read-back booking, some of which only the model's reading
  understands ("Could we do eight instead"); the new read-back is code's, in
  ``BOOKING_SESSIONS`` sessions.

Prints a line per turn (client v2v, then the turn's stt, llm_ttft, first_clause and
longest_gap ms), a table and JSON. The table counts per case the turns the STT misheard, the
guard blocked and those answered with code's read-back of a pending action (a change that
reached a proposal). After the turns, a line per turn from the brain's own record of it (read
from the session's records in Redis): how far ahead of its commit it started, who judged it
for the guard (screen or LLM) and when, and each model call's new prompt tokens and time to
first text; per case the p50s of those by who judged (``guard_by_case`` in the JSON).
``--rounds`` repeats the question set and the booking sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.stats import percentile
from voicebot.common.audio import float_to_pcm16
from voicebot.devstack import (
    Stack,
    free_port,
    redis_url_for,
    speech_env,
    start_brain_and_gateway,
    start_local_llm,
    start_mcp_servers,
    start_speech,
)

RATE = 16000
FRAME = RATE // 50 * 2  # 20 ms of PCM16
TOKEN = "tok-v2v"
USER = "bench"  # whom TOKEN stands for
VOICES = [("piper", 0), ("espeak", ("en-us", 165)), ("espeak", ("en-gb", 180)), ("espeak", ("en-us+f3", 150))]
QUESTIONS = [
    "Do you have vegetarian dishes?", "Can I bring my dog?", "Is there parking nearby?",
    "What time do you close on Sundays?", "Do you have a menu for children?",
    "Is the restaurant wheelchair accessible?", "Can I bring my own wine?", "Do you take credit cards?",
    "Is there a dress code?", "Do you have gluten free options?", "How far are you from the train station?",
    "Can we sit outside on the terrace?", "Do you serve breakfast?", "Is it loud in the evening?",
    "Do you have vegan desserts?", "Can I order takeaway?",
]
# Spoken by piper only, without commas: espeak's pause at a comma is longer than the endpoint
# silence (one sentence became two turns) and Whisper garbled its long sentences ("the goal
# family"), so the case measured the STT, not the booking path.
BOOKING = [
    "I would like a table for two on Friday at seven pm and my name is Robin",  # rules: read back by code
    # Changes to the read-back, read as the booking's fields: by rules where they can ("just me"),
    # by the model's reading where they cannot ("do eight", "the weekend").
    "Could we do eight instead",
    "Actually my friend can't come so it's just me",
    "Could we move it to the weekend instead",
]
# What the read-back of each change must say to be the change asked for: the new value and what
# the changes before it set (a table for two on Friday at seven first), so a change that
# brings back an older value does not count.
AS_ASKED = {"Could we do eight instead": r"\btable for two on friday\b[^.]*\beight p m\b",
            "Actually my friend can't come so it's just me": r"\btable for one on friday\b[^.]*\beight p m\b",
            "Could we move it to the weekend instead":
                r"\btable for one on (?:saturday|sunday)\b[^.]*\beight p m\b"}
BOOKING_VOICES = [("piper", 0)]
# A booking one field at a time: every reply is code's next question, then its read-back.
FORM = ["I would like to book a table", "On Friday", "At seven pm", "For two people", "My name is Robin"]
# Booking sessions per round: each change is one turn, and a misheard first request (no
# read-back, so nothing to change) takes its session's changes out of the path.
BOOKING_SESSIONS = 3
STAGES = ("endpoint", "stt", "llm_ttft", "first_clause", "tts_ttfa", "voice_to_voice", "longest_gap")
PER_TURN = ("stt", "llm_ttft", "first_clause", "longest_gap")  # printed for each turn
# A pause in the reply's audio shorter than this is jitter the client's buffer hides.
GAP_MIN_MS = 40


def speech(text: str, voice: tuple[str, Any]) -> bytes:
    from bench.stt import espeak_speech, piper_speech

    kind, options = voice
    audio = piper_speech(text) if kind == "piper" else espeak_speech(text, *options)
    return float_to_pcm16(np.asarray(audio, dtype=np.float32))


@dataclass
class Turn:
    case: str
    text: str
    voice: str
    v2v_ms: float | None = None
    stages: dict[str, Any] = field(default_factory=dict)
    reply: str = ""
    heard: str = ""  # the final transcript(s) the turn ran on
    session_id: str = ""
    turn_id: str = ""
    record: dict[str, Any] = field(default_factory=dict)  # the brain's, in brief: ``brief_record``

    def read_back(self, opening: str) -> bool:
        """Code's read-back of a pending action: it opens with the profile's confirm sentence."""
        return bool(opening) and self.reply.startswith(opening)

    def as_asked(self, opening: str) -> bool:
        """A read-back that says what the change asked for (AS_ASKED)."""
        expected = AS_ASKED.get(self.text)
        return bool(expected and self.read_back(opening) and re.search(expected, self.reply, re.I))

    @property
    def misheard(self) -> bool:
        """The STT's words differ from what was said (compared as the STT bench scores WER)."""
        from bench.stt import words

        return words(self.heard) != words(self.text)


class Microphone:
    """Real-time frames from a queue, silence when there is nothing to say; events time-stamped."""

    def __init__(self, ws, output_rate: int) -> None:
        self.ws = ws
        self.output_rate = output_rate
        self.session_id = ""
        self.turn_id = ""  # the last reply's
        self.pending: list[bytes] = []
        self.last_speech_sent: float | None = None
        self.received: list[tuple[float, str, Any]] = []
        self.tasks = [asyncio.create_task(self._send()), asyncio.create_task(self._listen())]

    async def _send(self) -> None:
        due = time.perf_counter()
        while True:
            spoken = bool(self.pending)
            await self.ws.send(self.pending.pop(0) if spoken else bytes(FRAME))
            if spoken:
                self.last_speech_sent = time.perf_counter()
            due = max(due + 0.02, time.perf_counter() - 0.1)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))

    async def _listen(self) -> None:
        async for message in self.ws:
            now = time.perf_counter()
            if isinstance(message, bytes):
                self.received.append((now, "audio", len(message)))
            else:
                event = json.loads(message)
                self.received.append((now, event["type"], event))

    async def say(self, pcm: bytes, timeout: float = 60.0) -> tuple[float | None, dict[str, Any], str, str]:
        """Speak, wait for the reply to be heard out; (end of speech → first audio ms, stages, reply,
        what the STT heard).

        The stages are the gateway's ``turn.metrics`` and one the client measures: ``longest_gap``
        (the longest the caller's playback ran dry mid-reply: a piece of it came late)."""
        mark = len(self.received)
        self.last_speech_sent = None
        self.pending += [pcm[i:i + FRAME].ljust(FRAME, b"\0") for i in range(0, len(pcm), FRAME)]
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            await asyncio.sleep(0.02)
            events = self.received[mark:]
            if any(kind == "turn.metrics" for _, kind, _ in events) and (
                    any(kind == "audio.end" for _, kind, _ in events)
                    or not any(kind == "audio" for _, kind, _ in events)):
                break
        events = self.received[mark:]
        ended = self.last_speech_sent
        first_audio = next((t for t, kind, _ in events if kind == "audio" and ended and t > ended), None)
        metrics = dict(next((e["ms"] for _, kind, e in events if kind == "turn.metrics"), {}))
        done = next((e for _, kind, e in events if kind == "reply.done"), {})
        reply, self.turn_id = done.get("text", ""), done.get("turn_id", "")
        heard = " ".join(e.get("text", "") for _, kind, e in events if kind == "transcript.final")
        metrics["longest_gap"] = longest_gap(events, self.output_rate) if first_audio else None
        await asyncio.sleep(0.6)  # the client's playback buffer drains: the caller heard it all
        return (first_audio - ended) * 1000 if first_audio and ended else None, metrics, reply, heard

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def longest_gap(events: list[tuple[float, str, Any]], rate: int) -> int:
    """The longest silence a client playing each frame on arrival hears between a reply's first
    audio and its end, beyond GAP_MIN_MS (a piece of the reply that came late: a choppy join)."""
    played_until: float | None = None
    longest = 0.0
    for at, kind, size in events:
        if kind == "audio.end":
            break
        if kind != "audio":
            continue
        if played_until is not None and at > played_until:
            longest = max(longest, at - played_until)
        played_until = max(played_until or at, at) + size / 2 / rate
    ms = round(longest * 1000)
    return ms if ms >= GAP_MIN_MS else 0


@contextlib.asynccontextmanager
async def caller(url: str):
    import websockets

    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"},
                                  max_size=2**22) as ws:
        await ws.send(json.dumps({"type": "session.start", "session_id": None, "language": "en",
                                  "audio": {"encoding": "pcm16", "sample_rate": RATE}}))
        while (started := json.loads(await asyncio.wait_for(ws.recv(), 10))).get("type") != "session.started":
            pass
        mic = Microphone(ws, started["audio"]["sample_rate"])
        mic.session_id = started.get("session_id") or ""
        try:
            await asyncio.sleep(1.0)  # a little silence first, as when a call connects
            yield mic
        finally:
            await mic.close()


async def run_case(case: str, url: str, texts: list[str], per_session: int,
                   voices: list[tuple[str, Any]] = VOICES, places: list[int] | None = None) -> list[Turn]:
    """``texts`` in sessions of ``per_session``; each keeps the voice of its place in the whole
    set: ``places[i]`` for texts[i] (a set run a few sessions at a time), else i."""
    turns: list[Turn] = []
    places = places or list(range(len(texts)))
    for start in range(0, len(texts), per_session):
        async with caller(url) as mic:
            for index, text in enumerate(texts[start:start + per_session]):
                voice = voices[places[start + index] % len(voices)]
                pcm = await asyncio.to_thread(speech, text, voice)
                v2v, stages, reply, heard = await mic.say(pcm)
                turn = Turn(case, text, f"{voice[0]} {voice[1] or ''}".strip(), v2v, stages, reply, heard,
                            mic.session_id, mic.turn_id)
                turns.append(turn)
                shown = f"{v2v:.0f} ms" if v2v is not None else "no audio"
                parts = " ".join(str(stages.get(s)) for s in PER_TURN)
                print(f"  {case:24s} {shown:>9s} [{parts:>17s}]  {text[:44]:44s} → {reply[:56]}", flush=True)
                if turn.misheard:  # what the reply answered is then not what was said
                    print(f"  {'':24s} {'':>9s}  {'':>19s}  heard: {heard[:100]!r}", flush=True)
    return turns


def summarise(turns: list[Turn], blocked_sentence: str = "", read_back_opening: str = "") -> dict[str, Any]:
    """Percentiles per stage; and how many turns the STT misheard or the guard blocked (each
    question is in the domain, so a block is a wrong one, and its short canned answer is fast),
    and how many replies were code's read-back of a pending action (they open with the profile's
    confirm sentence), and how many of those read back the change that was asked for."""
    def stat(values: list[float]) -> dict[str, float | None]:
        return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}

    measured = [t.v2v_ms for t in turns if t.v2v_ms is not None]
    return {"turns": len(turns), "no_audio": sum(t.v2v_ms is None for t in turns),
            "misheard": sum(t.misheard for t in turns),
            "blocked": sum(bool(blocked_sentence) and t.reply == blocked_sentence for t in turns),
            "read_back": sum(t.read_back(read_back_opening) for t in turns),
            "as_asked": sum(t.as_asked(read_back_opening) for t in turns),
            "client_v2v_ms": stat(measured),
            "stages_ms": {s: stat([t.stages[s] for t in turns if t.stages.get(s) is not None])
                          for s in STAGES}}


def brief_record(record: dict[str, Any]) -> dict[str, Any]:
    """What a turn's brain record says of where its LLM time went: the guard's verdict (by the
    screen or the LLM, and its ms from the turn's start), how far ahead of its commit the turn
    started (a preemptive turn's head start), and each model call's new (uncached) prompt tokens
    and time to first token."""
    guard = record.get("guard") or {}
    calls = [{"purpose": call.get("purpose", "reply"), "ttft_ms": call.get("ttft_ms"),
              "new_tokens": (call["prompt_tokens"] - (call.get("cached_tokens") or 0)
                             if call.get("prompt_tokens") is not None else None)}
             for call in record.get("llm_calls", [])]
    return {"outcome": record.get("outcome"), "committed_ms": record.get("committed_ms"),
            "guard_by": guard.get("by"), "guard_ms": guard.get("ms"), "llm_calls": calls}


async def attach_records(redis_url: str, turns: list[Turn]) -> None:
    """Each turn's brain record, in brief (``brief_record``), from the session's records in Redis
    (the last one of its turn id: a discarded preemptive start leaves a "cancelled" one first)."""
    from voicebot.brain.runtime.session_store import SessionStore
    from voicebot.common.redis import connect_redis

    redis = connect_redis(redis_url)
    store = SessionStore(redis, ttl_s=3600)
    try:
        sessions = {t.session_id for t in turns if t.session_id}
        by_session = {s: {r.get("turn_id"): r for r in await store.records(USER, s)} for s in sessions}
    finally:
        await redis.aclose()
    for turn in turns:
        if record := by_session.get(turn.session_id, {}).get(turn.turn_id):
            turn.record = brief_record(record)


def time_per_turn(turns: list[Turn]) -> str:
    """A line per turn: the client's v2v, the gateway's llm_ttft, then the brain's record."""
    lines = []
    for t in turns:
        r = t.record
        calls = " ".join(f"{c['purpose']}:{c['new_tokens']}new/{c['ttft_ms']}ms"
                         for c in r.get("llm_calls", []))
        v2v = f"{t.v2v_ms:.0f}" if t.v2v_ms is not None else "–"
        guard = f"{r.get('guard_by') or '–'}:{r.get('guard_ms')!s:>4s}"
        lines.append(f"  {t.case[:28]:28s} {v2v:>5s} ttft {t.stages.get('llm_ttft')!s:>4s} | head start "
                     f"{r.get('committed_ms')!s:>4s} guard {guard} | {calls:34s} | {t.heard[:40]}")
    return "\n".join(lines)


def guard_summary(turns: list[Turn]) -> dict[str, Any]:
    """Per case: verdicts by who gave them, and the p50s of the guard's ms, the head start and the
    first model call's new tokens and time to first token, over the turns the LLM judged and
    the rest."""
    def p50(values: list[Any]) -> float | None:
        return percentile([v for v in values if v is not None], 0.5)

    out: dict[str, Any] = {}
    for by in ("llm", "screen", None):
        group = [t for t in turns if t.record and t.record.get("guard_by") == by]
        if not group:
            continue
        first = [t.record["llm_calls"][0] if t.record["llm_calls"] else {} for t in group]
        out[by or "none"] = {"turns": len(group), "guard_ms_p50": p50([t.record["guard_ms"] for t in group]),
                             "head_start_ms_p50": p50([t.record["committed_ms"] for t in group]),
                             "llm_ttft_ms_p50": p50([t.stages.get("llm_ttft") for t in group]),
                             "first_call_ttft_ms_p50": p50([c.get("ttft_ms") for c in first]),
                             "first_call_new_tokens_p50": p50([c.get("new_tokens") for c in first])}
    return out


async def metrics_text(metrics_port: int) -> str:
    import httpx

    async with httpx.AsyncClient() as client:
        return (await client.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)).text


async def guard_verdicts(metrics_port: int) -> dict[str, int]:
    """The brain's guard verdicts over the run, by who decided (the screen or the LLM) and what
    (``voicebot_guard_verdicts_total``; the warm-up's check included)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = await metrics_text(metrics_port)
    return {f"{s.labels['by']} {s.labels['verdict']}": int(s.value)
            for family in text_string_to_metric_families(text) if family.name == "voicebot_guard_verdicts"
            for s in family.samples if s.name.endswith("_total")}


async def stt_decodes(metrics_port: int) -> dict[str, Any]:
    """Where the stt stage goes, from the STT's own metrics over the whole run: decodes by kind
    (count, mean time, mean wait for the one worker) and where each final's text came from."""
    return parse_stt_decodes(await metrics_text(metrics_port))


def parse_stt_decodes(text: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[tuple[str, str], float] = {}
    finals: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name in ("voicebot_stt_decode_seconds", "voicebot_stt_decode_wait_seconds") and (
                    sample.name.endswith(("_sum", "_count"))):
                sums[(sample.name, sample.labels["kind"])] = sample.value
            elif family.name == "voicebot_stt_finals" and sample.name.endswith("_total"):
                finals[sample.labels["source"]] = int(sample.value)
    def mean_ms(metric: str, kind: str) -> int | None:
        count = sums.get((f"{metric}_count", kind), 0)
        return round(1000 * sums.get((f"{metric}_sum", kind), 0) / count) if count else None

    kinds = {kind: {"decodes": int(sums.get(("voicebot_stt_decode_seconds_count", kind), 0)),
                    "mean_ms": mean_ms("voicebot_stt_decode_seconds", kind),
                    "mean_wait_ms": mean_ms("voicebot_stt_decode_wait_seconds", kind)}
             for kind in ("final", "speculative", "partial")}
    return {"by_kind": kinds, "finals_by_source": finals}


def table(results: dict[str, dict[str, Any]]) -> str:
    def cell(value: dict[str, Any]) -> str:
        p50, p95 = value["p50"], value["p95"]
        return "–" if p50 is None else f"{p50:.0f} / {p95:.0f}"

    rows = ["| case | turns (misheard, blocked, read back, as asked) | client v2v p50/p95 ms | "
            + " | ".join(STAGES) + " |", "|---|---|---|" + "---|" * len(STAGES)]
    for case, r in results.items():
        counts = f"{r['turns']} ({r['misheard']}, {r['blocked']}, {r['read_back']}, {r['as_asked']})"
        rows.append(f"| {case} | {counts} | {cell(r['client_v2v_ms'])} | "
                    + " | ".join(cell(r["stages_ms"][s]) for s in STAGES) + " |")
    return "\n".join(rows)


QUESTION_CASES = (("questions, guard on", "guard-on"), ("questions, guard off", "guard-off"),
                  ("questions, guard on, LLM only", "guard-llm"))
PER_SESSION = 4


def session_order(start: int, size: int, case_index: int) -> list[int]:
    """The places of a group's questions in the order one case asks them: rotated by the case,
    so no two cases open their sessions with the same question. Opened alike, a case that came
    later found the first prompt (instructions + question) in the LLM server's prompt cache
    another case had left there: a head start the guard's share would be measured against."""
    shift = case_index % size
    return [start + (i + shift) % size for i in range(size)]


# One sampling seed for the main replies: the same prompt gets the same words, so a case's
# replies repeat from one run to the next and runs differ by what changed, not by the words
# drawn. Drawn freely, the words moved a case's p50 more than the guard did: a case that drew
# replies without an early comma (a late first clause) came out slower for that alone.
SEED = 7


def same_words_env(llm_env: dict[str, str]) -> dict[str, str]:
    """BRAIN_LLM_EXTRA_BODY with ``SEED`` added to what the local server's fields already are."""
    body = json.loads(llm_env.get("BRAIN_LLM_EXTRA_BODY") or "{}")
    return {"BRAIN_LLM_EXTRA_BODY": json.dumps({**body, "seed": SEED})}


async def question_cases(pairs: dict[str, str], questions: list[str]) -> dict[str, list[Turn]]:
    """The question cases a session each in turn (the same four questions, voices and speeds,
    each case in its own order: ``session_order``), the order of the cases rotated from one
    group to the next, so a slow minute of the shared machine or a case's place in the run does
    not land on one case."""
    runs: dict[str, list[Turn]] = {case: [] for case, _ in QUESTION_CASES}
    for group, start in enumerate(range(0, len(questions), PER_SESSION)):
        order = QUESTION_CASES[group % len(QUESTION_CASES):] + QUESTION_CASES[:group % len(QUESTION_CASES)]
        size = min(PER_SESSION, len(questions) - start)
        for case, pair in order:
            places = session_order(start, size, QUESTION_CASES.index((case, pair)))
            runs[case] += await run_case(case, pairs[pair], [questions[i] for i in places],
                                         PER_SESSION, VOICES, places=places)
    return runs


async def main_async(rounds: int) -> dict[str, Any]:
    stack = Stack(Path(tempfile.mkdtemp(prefix="bench-v2v-")), quiet=False)
    try:
        redis_port = free_port()
        stack.start_redis(redis_port)
        redis_url = redis_url_for(redis_port)
        llm_url, llm_env = start_local_llm(stack)
        stt, tts = start_speech(stack, env=speech_env("restaurant"))
        _, profile_env = start_mcp_servers(stack, "restaurant", {"RESERVATIONS_DB": ":memory:",
                                                                "RESERVATIONS_TODAY": "2026-11-30"})
        pairs, brains = {}, {}
        for name, guard, screen in (("guard-on", "true", "true"), ("guard-off", "false", "true"),
                                    ("guard-llm", "true", "false")):
            brains[name], gateway = start_brain_and_gateway(
                stack, redis_url=redis_url, llm_base_url=llm_url, tokens=f"{TOKEN}={USER}", stt=stt, tts=tts,
                name=name, brain_env={**profile_env, **llm_env, **same_words_env(llm_env),
                                      "BRAIN_TODAY": "2026-11-30",
                                      "BRAIN_GUARD_ENABLED": guard, "BRAIN_GUARD_SCREEN": screen})
            pairs[name] = f"ws://127.0.0.1:{gateway.ready['http']}/v1/call"
        runs = await question_cases(pairs, QUESTIONS * rounds)
        runs["form, next field"] = await run_case(
            "form, next field", pairs["guard-on"], FORM * BOOKING_SESSIONS * rounds, len(FORM),
            BOOKING_VOICES)
        booking = await run_case(
            "booking changes", pairs["guard-on"], BOOKING * BOOKING_SESSIONS * rounds, len(BOOKING),
            BOOKING_VOICES)
        # Each booking session opens with a request in one line; the changes to its read-back follow.
        runs["booking, first request"] = booking[::len(BOOKING)]
        runs["booking changes"] = [t for i, t in enumerate(booking) if i % len(BOOKING)]
        from voicebot.brain.business.profile import load_profile  # lazily, like speech()'s STT bench voices

        sentences = load_profile("restaurant").sentences
        read_back = sentences.confirm.split("{action}")[0]
        results = {case: summarise(turns, sentences.blocked, read_back) for case, turns in runs.items()}
        await attach_records(redis_url, [t for case_turns in runs.values() for t in case_turns])
        results["time_per_turn"] = "\n".join(time_per_turn(case_turns) for case_turns in runs.values())
        results["guard_by_case"] = {case: guard_summary(turns) for case, turns in runs.items()}
        results["stt_decodes"] = await stt_decodes(stt.ready["metrics"])
        results["guard_verdicts"] = {name: await guard_verdicts(brains[name].ready["metrics"])
                                     for name in ("guard-on", "guard-llm")}
    finally:
        stack.stop()
    off = results["questions, guard off"]["client_v2v_ms"]["p50"]
    for key, case in (("guard_adds_to_p50", "questions, guard on"),
                      ("llm_only_guard_adds_to_p50", "questions, guard on, LLM only")):
        on = results[case]["client_v2v_ms"]["p50"]
        results[key] = round(on / off - 1, 3) if on and off else None
        results[key + "_paired"] = paired_overhead(runs[case], runs["questions, guard off"])
        results[key + "_interval"] = ratio_interval(runs[case], runs["questions, guard off"])
    return results


def paired_overhead(with_guard: list[Turn], without: list[Turn]) -> float | None:
    """The median, over the questions both cases asked (same words, same voice, same round), of
    the client v2v difference, over the p50 without the guard: what the guard adds to the same
    utterance, with less of the noise that two p50s of different turns carry."""
    base, guarded = by_utterance(without), by_utterance(with_guard)
    differences = [ms - base[key] for key, ms in guarded.items() if key in base]
    p50 = percentile(list(base.values()), 0.5) if base else None
    return round(percentile(differences, 0.5) / p50, 3) if differences and p50 else None


def ratio_interval(with_guard: list[Turn], without: list[Turn], draws: int = 2000,
                   seed: int = 0) -> tuple[float, float] | None:
    """A 90 % bootstrap interval of p50(with) / p50(without) - 1 over the utterances both cases
    asked, drawn with replacement as pairs: how far the ratio of two p50s of 16-32 turns moves
    with which questions happened to land near the median (seeded: the same turns, the same
    interval)."""
    base, guarded = by_utterance(without), by_utterance(with_guard)
    keys = [key for key in guarded if key in base]
    if not keys:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        sample = rng.choices(keys, k=len(keys))
        on, off = (percentile([ms[k] for k in sample], 0.5) for ms in (guarded, base))
        ratios.append(on / off - 1)
    return round(percentile(ratios, 0.05), 3), round(percentile(ratios, 0.95), 3)


def by_utterance(turns: list[Turn]) -> dict[tuple[str, str, int], float]:
    """Client v2v per utterance: (words, voice, how many times before these were asked)."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[tuple[str, str, int], float] = {}
    for t in turns:
        round_ = seen[(t.text, t.voice)] = seen.get((t.text, t.voice), -1) + 1
        if t.v2v_ms is not None:
            out[(t.text, t.voice, round_)] = t.v2v_ms
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="how many times the question set is asked")
    args = parser.parse_args()
    # A SIGTERM (timeout, kill) unwinds like Ctrl-C, so the stack this bench started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = asyncio.run(main_async(args.rounds))
    print("\nwhere each turn's LLM time went (client v2v, gateway llm_ttft; the brain's record: head"
          " start before the commit, guard by:ms, model calls new tokens/ttft; words heard):")
    print(results.pop("time_per_turn"))
    print()
    print(table({k: v for k, v in results.items() if isinstance(v, dict) and "turns" in v}))
    print("\nSTT decodes:", json.dumps(results["stt_decodes"]))
    print("\nguard verdicts (by, verdict: count):", json.dumps(results["guard_verdicts"]))
    print("by who judged each turn (p50s):", json.dumps(results["guard_by_case"], indent=1))
    for key, what in (("guard_adds_to_p50", "guard adds"),
                      ("llm_only_guard_adds_to_p50", "LLM-only guard adds")):
        if results[key] is not None:
            paired, interval = results[key + "_paired"], results[key + "_interval"]
            print(f"{what} {results[key]:+.0%} to the p50"
                  + (f" ({paired:+.0%} paired per question)" if paired is not None else "")
                  + (f"; 90 % bootstrap interval of the ratio over the questions: {interval[0]:+.0%}"
                     f" to {interval[1]:+.0%}" if interval else ""))
    print(json.dumps({"bench": "v2v", "results": results}, indent=2))


if __name__ == "__main__":
    main()
