"""Any client, through the real services (Whisper STT, piper TTS, brain with a scripted LLM):
the official OpenAI SDK's realtime client on /v1/realtime, and a Twilio Media Streams client on
/v1/twilio (μ-law 8 kHz), each with a spoken turn, a barge-in, and bad input that the call survives."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable

import numpy as np
import pytest
import websockets
from openai import AsyncOpenAI

from tests.audio import silence, speech
from tests.conftest import TWILIO_SECRET
from tests.integration.test_bargein import (
    FIRST_QUESTION,
    INTERRUPTION,
    INTERRUPTION_WORD,
    LONG_REPLY,
    SHORT_REPLY_START,
    gateway_metric,
)
from voicebot.common.audio import float_to_pcm16
from voicebot.gateway.g711 import pcm16_to_ulaw, ulaw_to_pcm16

pytestmark = pytest.mark.integration

FRAME_MS = 20


class Microphone:
    """Real-time 20 ms frames, queued speech else silence; ``send`` wraps a frame for the wire."""

    def __init__(self, rate: int, send: Callable[[bytes], object]) -> None:
        self.rate, self._send, self._queue = rate, send, []
        self.task = asyncio.create_task(self._run())

    def say(self, audio: np.ndarray) -> None:
        pcm, frame = float_to_pcm16(audio), self.rate * FRAME_MS // 1000 * 2
        self._queue += [pcm[i:i + frame].ljust(frame, b"\0") for i in range(0, len(pcm), frame)]

    async def _run(self) -> None:
        frame = self.rate * FRAME_MS // 1000 * 2
        due = time.perf_counter()
        while True:
            await self._send(self._queue.pop(0) if self._queue else bytes(frame))
            due = max(due + FRAME_MS / 1000, time.perf_counter())
            await asyncio.sleep(due - time.perf_counter())

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def wait_for(events: list, check: Callable[[], bool], changed: asyncio.Event,
                   timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        changed.clear()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out; events: {[getattr(e, 'type', e) for e in events][-60:]}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), remaining)


# ---- OpenAI Realtime ---------------------------------------------------------------------------
def openai_client(services) -> AsyncOpenAI:
    # A gateway token is the API key: the SDK sends it as the bearer token.
    return AsyncOpenAI(api_key="tok-alice", base_url=f"{services.http_url}/v1",
                       websocket_base_url=f"ws://127.0.0.1:{services.gateway_port}/v1")


SESSION = {"type": "realtime", "audio": {
    "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": {"type": "server_vad"},
              "transcription": {"model": "whisper-1", "language": "en"}},
    "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy"}}}


async def test_the_openai_sdk_talks_to_the_gateway_and_interrupts_it(services, scripted_llm):
    events: list = []
    changed = asyncio.Event()
    async with openai_client(services).realtime.connect(model="voicebot") as conn:
        created = await asyncio.wait_for(conn.recv(), 10)
        assert created.type == "session.created"
        await conn.session.update(session=SESSION)

        async def receive() -> None:
            async for event in conn:
                events.append(event)
                changed.set()

        receiver = asyncio.create_task(receive())
        mic = Microphone(24000, lambda pcm: conn.input_audio_buffer.append(
            audio=base64.b64encode(pcm).decode()))
        try:
            def audio_ms(response_id: str) -> float:
                return sum(len(base64.b64decode(e.delta)) / 48 for e in events
                           if e.type == "response.output_audio.delta" and e.response_id == response_id)

            mic.say(np.concatenate([speech(FIRST_QUESTION, 24000), silence(200, 24000)]))
            await wait_for(events, lambda: any(e.type == "response.output_audio.delta" for e in events),
                           changed)
            first = next(e for e in events if e.type == "response.created").response.id
            await wait_for(events, lambda: audio_ms(first) >= 1500, changed)
            mic.say(np.concatenate([speech(INTERRUPTION, 24000), silence(200, 24000)]))
            await wait_for(events, lambda: sum(e.type == "response.done" for e in events) >= 2, changed, 90)
        finally:
            await mic.stop()
            receiver.cancel()

    kinds = [e.type for e in events]
    assert "session.updated" in kinds and "input_audio_buffer.speech_started" in kinds
    assert "input_audio_buffer.speech_stopped" in kinds
    assert "conversation.item.input_audio_transcription.delta" in kinds
    transcripts = [e.transcript for e in events
                   if e.type == "conversation.item.input_audio_transcription.completed"]
    assert "menu" in transcripts[0].lower() and INTERRUPTION_WORD in transcripts[1].lower()
    done = [e.response for e in events if e.type == "response.done"]
    # The first response was cut off by the second utterance; the second one ran to its end.
    assert done[0].id == first and done[0].status == "cancelled"
    assert done[1].status == "completed"
    cut = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta"
                  and e.response_id == first)
    assert cut and LONG_REPLY.startswith(cut.strip())  # the menu answer, verbatim as far as it went
    second = done[1].id
    text = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta"
                   and e.response_id == second)
    assert text.startswith(SHORT_REPLY_START) and text != LONG_REPLY
    assert audio_ms(second) > 500  # reply audio, 24 kHz PCM16
    cancelled_at = kinds.index("response.done")
    assert not [e for e in events[cancelled_at:] if e.type == "response.output_audio.delta"
                and e.response_id == first]  # not one frame of the cut reply after its end


async def test_realtime_bad_input_gets_openai_errors_and_the_session_goes_on(services, scripted_llm):
    url = f"ws://127.0.0.1:{services.gateway_port}/v1/realtime?model=voicebot"
    async with websockets.connect(url, additional_headers={"Authorization": "Bearer tok-alice"}) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        bad = ["not json", json.dumps({"type": "no.such.event", "event_id": "e1"}),
               json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}),
               json.dumps({"type": "session.update",
                           "session": {"audio": {"input": {"format": {"type": "mp3"}}}}}),
               json.dumps({"type": "input_audio_buffer.commit"}),
               json.dumps({"type": "conversation.item.truncate", "item_id": "item_nope", "content_index": 0,
                           "audio_end_ms": 10})]
        for message in bad:
            await ws.send(message)
            error = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
        assert error["error"]["code"] == "item_not_found"
        # The session goes on: a typed turn is answered in text and audio.
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "We are three."}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        seen: list[dict] = []
        while not seen or seen[-1]["type"] != "response.done":
            seen.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        assert seen[-1]["response"]["status"] == "completed"
        assert any(e["type"] == "response.output_audio.delta" for e in seen)


# ---- Twilio Media Streams -----------------------------------------------------------------------
class TwilioPhone:
    """Twilio's side of a bidirectional stream: its documented messages, μ-law 8 kHz."""

    def __init__(self, ws) -> None:
        self.ws, self.sid = ws, "MZ" + "0" * 32
        self.events: list[dict] = []
        self.changed = asyncio.Event()
        self.receiver = asyncio.create_task(self._receive())
        self.sequence = 0

    async def send(self, event: str, **body) -> None:
        self.sequence += 1
        await self.ws.send(json.dumps({"event": event, "sequenceNumber": str(self.sequence),
                                       "streamSid": self.sid, **body}))

    async def media(self, pcm: bytes) -> None:
        await self.send("media", media={"track": "inbound", "chunk": str(self.sequence), "timestamp": "0",
                                        "payload": base64.b64encode(pcm16_to_ulaw(pcm)).decode()})

    async def _receive(self) -> None:
        async for raw in self.ws:
            event = json.loads(raw)
            self.events.append(event)
            if event["event"] == "mark":  # played at once: marks come straight back
                await self.send("mark", mark=event["mark"])
            self.changed.set()

    def audio_ms(self) -> float:
        return sum(len(base64.b64decode(e["media"]["payload"])) / 8
                   for e in self.events if e["event"] == "media")


@contextlib.asynccontextmanager
async def phone_call(services, url_secret: str | None = TWILIO_SECRET, param_secret: str | None = None):
    query = f"?secret={url_secret}" if url_secret else ""
    async with websockets.connect(f"ws://127.0.0.1:{services.gateway_port}/v1/twilio{query}") as ws:
        phone = TwilioPhone(ws)
        await phone.send("connected", protocol="Call", version="1.0.0")
        params = {"caller": "+15550100", **({"secret": param_secret} if param_secret else {})}
        await phone.send("start", start={"streamSid": phone.sid, "accountSid": "AC0", "callSid": "CA0",
                                         "tracks": ["inbound"], "customParameters": params,
                                         "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000,
                                                         "channels": 1}})
        try:
            yield phone
        finally:
            phone.receiver.cancel()


async def test_a_twilio_call_completes_a_spoken_turn_and_is_cleared_on_barge_in(services, scripted_llm):
    async with phone_call(services, url_secret=None, param_secret=TWILIO_SECRET) as phone:
        mic = Microphone(8000, phone.media)
        try:
            mic.say(np.concatenate([speech(FIRST_QUESTION, 8000), silence(200, 8000)]))
            await wait_for(phone.events, lambda: phone.audio_ms() >= 1500, phone.changed)
            assert any(e["event"] == "mark" for e in phone.events)
            mic.say(np.concatenate([speech(INTERRUPTION, 8000), silence(200, 8000)]))
            await wait_for(phone.events, lambda: any(e["event"] == "clear" for e in phone.events),
                           phone.changed)
            cleared = next(i for i, e in enumerate(phone.events) if e["event"] == "clear")
            # The answer to the interruption plays after the clear.
            await wait_for(phone.events, lambda: any(e["event"] == "media" for e in phone.events[cleared:]),
                           phone.changed, 90)
        finally:
            await mic.stop()
        assert all(e["streamSid"] == phone.sid for e in phone.events)
        pcm = b"".join(ulaw_to_pcm16(base64.b64decode(e["media"]["payload"])) for e in phone.events[:cleared]
                       if e["event"] == "media")
        assert np.abs(np.frombuffer(pcm, "<i2")).max() > 1000  # speech, not silence
        await phone.send("stop", stop={"accountSid": "AC0", "callSid": "CA0"})
    # The model reads the caller's words only (no state block any more, so the call's custom
    # parameters are not shown to it); whatever it is shown, the secret is never in it.
    prompts = [json.dumps(r["messages"]) for r in scripted_llm.requests]
    assert any(r.get("response_format") for r in scripted_llm.requests)  # the interruption was read
    assert not any(TWILIO_SECRET in p for p in prompts)


async def test_twilio_bad_input_is_counted_and_the_call_goes_on(services, scripted_llm):
    before = await gateway_metric(services, 'voicebot_gateway_client_errors_total{code="bad_request"}')
    async with phone_call(services) as phone:
        await phone.ws.send("not json")
        await phone.send("media", media={"track": "inbound", "payload": "%%%"})
        await phone.send("dance")
        mic = Microphone(8000, phone.media)
        try:
            # Not a short quiet sentence ("We are three."): on 8 kHz audio the 16 kHz Silero VAD
            # gives it 0.1-0.5 and piper's randomness put all of it under the threshold in one
            # run of five (no turn at all); that weakness is noted for its own fix.
            mic.say(np.concatenate([speech(FIRST_QUESTION, 8000), silence(200, 8000)]))
            await wait_for(phone.events, lambda: phone.audio_ms() >= 300, phone.changed)
        finally:
            await mic.stop()
    after = await gateway_metric(services, 'voicebot_gateway_client_errors_total{code="bad_request"}')
    assert after - before >= 3


@pytest.mark.parametrize("url_secret, param_secret", [("wrong", TWILIO_SECRET), (None, "wrong")],
                         ids=["wrong-in-url", "wrong-in-parameters"])
async def test_twilio_without_the_secret_is_refused(services, url_secret, param_secret):
    # A wrong secret in the URL is refused before the socket takes anything (its `start` may not
    # even be sent); one in the custom parameter at its `start`.
    query = f"?secret={url_secret}" if url_secret else ""
    async with websockets.connect(f"ws://127.0.0.1:{services.gateway_port}/v1/twilio{query}") as ws:
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send(json.dumps({"event": "start", "streamSid": "MZ0", "start": {
                "streamSid": "MZ0", "customParameters": {"secret": param_secret}}}))
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 4401
