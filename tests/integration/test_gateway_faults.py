"""Every failure is heard, with real processes: TTS (and STT) killed between turns, a turn on the
dead upstream gets its error and then the fallback sentence within 2 s, on an open socket; the
restarted upstream serves the next turn. Instant fake STT/TTS servers (no models), the real
brain with the scripted LLM, the real gateway."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
import websockets

from tests.conftest import LOG_ROOT
from voicebot.devstack import Stack, free_port

pytestmark = pytest.mark.integration


async def events_until(ws, last: str, timeout: float = 10.0) -> list[tuple[float, str | int]]:
    """(arrival, type or audio byte count) up to and including the first ``last`` event."""
    out: list[tuple[float, str | int]] = []
    async with asyncio.timeout(timeout):
        while True:
            message = await ws.recv()
            now = time.perf_counter()
            if isinstance(message, bytes):
                out.append((now, len(message)))
                continue
            kind = json.loads(message)["type"]
            out.append((now, kind))
            if kind == last:
                return out


@pytest.fixture
def stack(redis_url, fake_llm):
    stack = Stack(LOG_ROOT / "gateway-faults", quiet=True)
    ports = {"FAKE_STT_PORT": str(free_port()), "FAKE_TTS_PORT": str(free_port())}
    try:
        speech = stack.start_service("fake-speech", "tests.fakes.speech_servers", ports)
        brain = stack.start_service("brain", "voicebot.brain.server", {
            "BRAIN_PORT": "0", "BRAIN_METRICS_PORT": "0", "BRAIN_REDIS_URL": redis_url,
            "BRAIN_LLM_BASE_URL": fake_llm.base_url, "BRAIN_GUARD_ENABLED": "false"})
        gateway = stack.start_service("gateway", "voicebot.gateway.app", {
            "GATEWAY_PORT": "0", "GATEWAY_TOKENS": "tok-alice=alice", "GATEWAY_REDIS_URL": redis_url,
            "GATEWAY_STT_ADDR": f"127.0.0.1:{speech.ready['stt']}",
            "GATEWAY_TTS_ADDR": f"127.0.0.1:{speech.ready['tts']}",
            "GATEWAY_BRAIN_ADDR": f"127.0.0.1:{brain.ready['grpc']}"})
        yield stack, speech, ports, f"ws://127.0.0.1:{gateway.ready['http']}/v1/call"
    finally:
        stack.stop()


async def test_tts_killed_mid_call_is_heard_within_2s_and_the_restarted_one_serves_the_next_turn(
        stack, scripted_llm):
    stack, speech, ports, url = stack
    scripted_llm.script = lambda body: "Sure, we open at nine. See you then."
    async with websockets.connect(url, additional_headers={"Authorization": "Bearer tok-alice"}) as ws:
        await ws.send(json.dumps({"type": "session.start", "session_id": None, "language": "en"}))
        assert json.loads(await ws.recv())["type"] == "session.started"
        await ws.send(json.dumps({"type": "input.text", "text": "When do you open?"}))
        await events_until(ws, "turn.metrics")  # works, and the fallback had time to be cached

        os.killpg(speech.popen.pid, signal.SIGKILL)
        speech.popen.wait(5)
        killed = time.perf_counter()
        await ws.send(json.dumps({"type": "input.text", "text": "And on Sunday?"}))
        events = await events_until(ws, "audio.end")
        kinds = [kind for _, kind in events]
        assert "error" in kinds and kinds.index("error") < kinds.index("audio.end")
        first_audio = next(t for t, kind in events if isinstance(kind, int))
        print(f"TTS killed -> first fallback audio: {first_audio - killed:.3f} s")  # shown with -s
        assert first_audio - killed < 2.0
        assert sum(kind for _, kind in events if isinstance(kind, int)) > 16000 * 2 * 0.3  # the sentence

        stack.start_service("fake-speech-again", "tests.fakes.speech_servers", ports)
        deadline = time.monotonic() + 10
        while True:  # the channel reconnects within about a second; a turn before that fails again
            await ws.send(json.dumps({"type": "input.text", "text": "Great, thanks."}))
            events = await events_until(ws, "audio.end")
            if "error" not in [kind for _, kind in events]:
                break
            assert time.monotonic() < deadline, "TTS came back but turns still fail"
            await asyncio.sleep(0.5)
        assert "reply.done" in [kind for _, kind in events]
