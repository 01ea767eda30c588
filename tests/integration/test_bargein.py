"""Turn-taking through the real services (Whisper STT, piper TTS, brain with a scripted LLM):
the person talks over the bot, and a short sound that is not an interruption."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time

import httpx
import numpy as np
import pytest
import websockets

from tests.audio import noise, silence, speech, vowel
from tests.fakes.stack_profile import MENU, UNKNOWN_FACT, answer
from voicebot.brain.runtime.session_store import SessionHistory, SessionStore
from voicebot.common.audio import float_to_pcm16

pytestmark = pytest.mark.integration

RATE = 16000
FRAME_MS = 20
# A question the business answers at length (tests/fakes/profiles/stack.yaml): code speaks the
# answer verbatim, long enough to be talked over.
FIRST_QUESTION = MENU
LONG_REPLY = answer(MENU)
# What the person says over the bot. Whisper base hears this piper sentence the same way however the
# VAD cuts it (tried with 0-100 ms off either end, at 8, 16 and 24 kHz); "Make it three people"
# came out as "Make it to repeat people" or "3 people" under some cuts, and failed a CI run.
INTERRUPTION = "Change it to Friday, please."
INTERRUPTION_WORD = "friday"
# Code's reply to it: the words need the model's reading (the scripted model reads nothing),
# and the business's knowledge has no answer: the profile's unknown-fact sentence.
SHORT_REPLY_START = UNKNOWN_FACT
# Piper speaks the menu answer (70 words) in ~21.5 s: ~3.3 words a second, rounded up; the bound
# on what was heard doubles it.
WORDS_PER_MS = 3.75 / 1000


class Client:
    """A WebSocket client that plays the person: records every event in order (binary frames as
    ("audio", ms)), reports playback like the browser page, and streams a microphone."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.events: list[dict] = []
        self.audio_ms: dict[str, float] = {}  # per turn, received
        self.audio_turn: str | None = None
        self.audio_started_at = 0.0
        self.session_id: str | None = None
        self._changed = asyncio.Event()
        self._mic: list[bytes] = []
        self._tasks = [asyncio.create_task(self._receive()), asyncio.create_task(self._microphone()),
                       asyncio.create_task(self._report_playback())]

    async def _receive(self) -> None:
        async for message in self.ws:
            if isinstance(message, bytes):
                ms = len(message) / (2 * RATE) * 1000
                self.events.append({"type": "audio", "turn_id": self.audio_turn, "ms": ms})
                self.audio_ms[self.audio_turn] = self.audio_ms.get(self.audio_turn, 0.0) + ms
            else:
                event = json.loads(message)
                self.events.append(event)
                if event["type"] == "audio.start":
                    self.audio_turn, self.audio_started_at = event["turn_id"], time.perf_counter()
                elif event["type"] == "interrupt":
                    self.audio_turn = None
            self._changed.set()

    async def _microphone(self) -> None:
        """Real-time 20 ms frames: queued audio, else silence (a live microphone never stops).
        A late frame moves the schedule on rather than sending a catch-up burst."""
        frame = RATE * FRAME_MS // 1000 * 2
        due = time.perf_counter()
        while True:
            data = self._mic.pop(0) if self._mic else bytes(frame)
            await self.ws.send(data)
            due = max(due + FRAME_MS / 1000, time.perf_counter())
            await asyncio.sleep(due - time.perf_counter())

    async def _report_playback(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            turn = self.audio_turn
            if turn is not None:
                elapsed_ms = (time.perf_counter() - self.audio_started_at) * 1000
                played = min(self.audio_ms.get(turn, 0.0), elapsed_ms)
                await self.ws.send(json.dumps({"type": "playback.position", "turn_id": turn,
                                               "played_ms": int(played)}))

    def say(self, audio: np.ndarray) -> None:
        pcm = float_to_pcm16(audio)
        frame = RATE * FRAME_MS // 1000 * 2
        self._mic += [pcm[i:i + frame].ljust(frame, b"\0") for i in range(0, len(pcm), frame)]

    async def until(self, check, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            self._changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out; events: {kinds(self.events)}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def first(self, kind: str, **fields) -> int:
        return next(i for i, e in enumerate(self.events)
                    if e["type"] == kind and all(e.get(k) == v for k, v in fields.items()))

    def has(self, kind: str, **fields) -> bool:
        return any(e["type"] == kind and all(e.get(k) == v for k, v in fields.items()) for e in self.events)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def kinds(events: list[dict]) -> list[str]:
    out: list[str] = []
    for e in events:
        if not (e["type"] == "audio" and out and out[-1] == "audio"):
            out.append(e["type"])
    return out


@contextlib.asynccontextmanager
async def person(services):
    async with websockets.connect(services.ws_url,
                                  additional_headers={"Authorization": "Bearer tok-alice"}) as ws:
        await ws.send(json.dumps({"type": "session.start", "session_id": None, "language": "en",
                                  "audio": {"encoding": "pcm16", "sample_rate": RATE}}))
        started = json.loads(await asyncio.wait_for(ws.recv(), 10))
        client = Client(ws)
        client.session_id = started["session_id"]
        try:
            yield client
        finally:
            await client.close()


async def gateway_metric(services, name: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{services.http_url}/metrics")).text
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


async def test_talking_over_the_bot_interrupts_it_and_history_keeps_only_what_was_heard(
        services, scripted_llm, redis_client):
    interruption = np.concatenate([speech(INTERRUPTION), silence(200)])
    async with person(services) as client:
        await client.ws.send(json.dumps({"type": "input.text", "text": FIRST_QUESTION}))
        await client.until(lambda: client.has("audio.start"))
        first_turn = client.events[client.first("audio.start")]["turn_id"]
        await client.until(lambda: client.audio_ms.get(first_turn, 0) >= 1500)
        client.say(interruption)
        await client.until(lambda: client.has("turn.metrics"), timeout=90)

        events = client.events
        interrupt = client.first("interrupt")
        assert events[interrupt]["turn_id"] == first_turn
        second_start = next(i for i, e in enumerate(events) if e["type"] == "audio.start" and i > interrupt)
        assert client.first("transcript.final") < second_start
        # Not one frame of the interrupted turn after `interrupt`, and it never "ends" normally.
        assert [e for e in events[interrupt:second_start] if e["type"] == "audio"] == []
        assert not client.has("audio.end", turn_id=first_turn)
        assert not client.has("turn.metrics", turn_id=first_turn)
        second_turn = events[second_start]["turn_id"]
        assert client.has("turn.metrics", turn_id=second_turn)
        assert INTERRUPTION_WORD in events[client.first("transcript.final")]["text"].lower()
        received_first = client.audio_ms[first_turn]
        session_id = client.session_id
        second_reply = next(e["text"] for e in events if e["type"] == "reply.done"
                            and e["turn_id"] == second_turn)

    # The brain's history: the first reply cut to what was heard, the second whole.
    raw = redis_client.get(SessionStore.key("alice", session_id))
    history = SessionHistory.from_json(raw)
    first, second = history.turns
    assert first.interrupted and first.user == FIRST_QUESTION
    heard = first.assistant.split()
    assert 0 < len(heard) < len(LONG_REPLY.split())
    assert LONG_REPLY.split()[: len(heard)] == heard
    # What was heard is at most what reached the client (a generous words-per-ms bound).
    assert len(heard) <= received_first * WORDS_PER_MS * 2 + 3
    assert INTERRUPTION_WORD in second.user.lower()
    assert second.assistant == second_reply and not second.interrupted
    assert second.assistant.startswith(SHORT_REPLY_START)


async def test_a_short_sound_while_the_bot_speaks_is_not_an_interruption(services, scripted_llm):
    false_starts = await gateway_metric(services, "voicebot_barge_in_false_starts_total")
    barge_ins = await gateway_metric(services, "voicebot_barge_ins_total")
    async with person(services) as client:
        await client.ws.send(json.dumps({"type": "input.text", "text": FIRST_QUESTION}))
        await client.until(lambda: client.has("audio.start"))
        turn = client.events[client.first("audio.start")]["turn_id"]
        await client.until(lambda: client.audio_ms.get(turn, 0) >= 1000)
        # 50 ms of noise (the VAD does not even start on it), then a 150 ms "uh" that it does start on.
        client.say(np.concatenate([noise(50), silence(600), vowel(150), silence(200)]))
        await client.until(lambda: client.has("turn.metrics"), timeout=90)

        assert not client.has("interrupt")
        assert not client.has("transcript.final")
        assert client.has("audio.end", turn_id=turn) and client.has("turn.metrics", turn_id=turn)
        assert client.audio_ms[turn] > 15_000  # the whole reply (~21 s) was spoken, not cut
    assert await gateway_metric(services, "voicebot_barge_in_false_starts_total") == false_starts + 1
    assert await gateway_metric(services, "voicebot_barge_ins_total") == barge_ins
