"""``voicebot call --protocol realtime``: the same call over the gateway's OpenAI Realtime endpoint.

Streams the WAV as ``input_audio_buffer.append`` (PCM16 at 24 kHz, real-time pace unless
``fast``), or sends a typed turn as ``conversation.item.create`` + ``response.create``; collects
the transcript (``conversation.item.input_audio_transcription.completed``), the reply's
transcript and audio (``response.output_audio_transcript.done``, ``response.output_audio.delta``)
and the stage latencies the gateway puts in ``response.done``'s metadata.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

from voicebot.common.audio import float_to_pcm16, pcm16_to_float, resample
from voicebot.gateway.call_result import FRAME_MS, TRAILING_SILENCE_MS, CallResult, load_audio

RATE = 24000


def realtime_url(url: str) -> str:
    """The protocol v1 URL a user already has, pointed at the realtime endpoint."""
    return url.replace("/v1/call", "/v1/realtime") if url.endswith("/v1/call") else url


async def call_realtime(url: str, token: str, wav: str | None = None, text: str | None = None,
                        fast: bool = False, timeout: float = 120.0, progress=None,
                        text_only: bool = False) -> CallResult:
    import websockets

    say = progress or (lambda _msg: None)
    result = CallResult(audio_rate=RATE)
    async with websockets.connect(realtime_url(url), additional_headers={"Authorization": f"Bearer {token}"},
                                  max_size=2**22) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"] if text_only else ["audio"], "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": RATE}},
                "output": {"format": {"type": "audio/pcm", "rate": RATE}}}}}))
        sender = None
        if text is not None:
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
            await ws.send(json.dumps({"type": "response.create"}))
        else:
            sender = asyncio.create_task(_send_audio(ws, wav, fast, say))
        try:
            await asyncio.wait_for(_receive(ws, result, say), timeout)
        finally:
            if sender is not None:
                sender.cancel()
    return result


async def _send_audio(ws, wav: str, fast: bool, say) -> None:
    pcm, rate = load_audio(wav)
    if rate != RATE:
        pcm = float_to_pcm16(resample(pcm16_to_float(pcm), rate, RATE))
    data = pcm + bytes(RATE * TRAILING_SILENCE_MS // 1000 * 2)
    frame = RATE * FRAME_MS // 1000 * 2
    begin = time.perf_counter()
    for index, offset in enumerate(range(0, len(data), frame)):
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(data[offset:offset + frame]).decode()}))
        if not fast:
            await asyncio.sleep(max(0.0, begin + (index + 1) * FRAME_MS / 1000 - time.perf_counter()))
    say(f"sent {len(pcm) * 500 // RATE} ms of audio")


async def _receive(ws, result: CallResult, say) -> None:
    while True:
        event = json.loads(await ws.recv())
        kind = event.get("type", "")
        result.events.append(kind)
        if kind == "session.created":
            result.session_id = event["session"].get("id", "")
        elif kind == "conversation.item.input_audio_transcription.delta":
            result.partials += 1
        elif kind == "conversation.item.input_audio_transcription.completed":
            result.transcripts.append(event["transcript"])
            say(f"heard: {event['transcript']}")
        elif kind == "response.output_audio.delta":
            result.audio.extend(base64.b64decode(event["delta"]))
        elif kind in ("response.output_audio_transcript.done", "response.output_text.done"):
            text = event.get("transcript", event.get("text", ""))
            result.replies.append(text)
            say(f"reply: {text}")
        elif kind == "error":
            result.errors.append(event["error"])
            say(f"error {event['error'].get('code')}: {event['error'].get('message')}")
        elif kind == "response.done":
            response = event["response"]
            if response.get("status") == "cancelled":
                result.interrupts += 1
                continue
            metadata = response.get("metadata") or {}
            result.metrics.append({k.removesuffix("_ms"): int(v) for k, v in metadata.items()
                                   if k.endswith("_ms") and str(v).isdigit()})
            return
