"""One WebSocket connection: protocol handling, the STT stream, turns, barge-in.

Client messages are handled one at a time; STT events and turns run in their
own tasks. A new turn always interrupts the one in flight, and a person who
starts speaking while the bot's audio is going out interrupts it (barge-in):
audio stops, ``interrupt`` is sent, brain and TTS are cancelled, and the next
turn tells the brain what was actually heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass

import grpc
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from gateway.config import GatewaySettings
from gateway.metrics import BARGE_INS, CLIENT_ERRORS, TURNS
from gateway.protocol import (
    InputText,
    PlaybackPosition,
    ProtocolError,
    SessionEnd,
    SessionStart,
    error_event,
    event,
    parse_client_text,
)
from gateway.sessions import SessionRegistry
from gateway.turn import SpokenTracker, TurnRequest, TurnRunner, TurnTimings, cancel_task
from gateway.upstreams import Upstreams
from voicebot.v1 import brain_pb2, stt_pb2

log = logging.getLogger("gateway.call")


@dataclass
class ActiveTurn:
    turn_id: str
    spoken: SpokenTracker
    task: asyncio.Task | None = None
    played_ms: int | None = None
    interrupted: bool = False


class Call:
    def __init__(self, ws: WebSocket, user_id: str, settings: GatewaySettings,
                 upstreams: Upstreams, sessions: SessionRegistry) -> None:
        self.ws = ws
        self.user_id = user_id
        self.settings = settings
        self.upstreams = upstreams
        self.sessions = sessions
        self.session: SessionStart | None = None
        self.session_id: str | None = None
        self.turn: ActiveTurn | None = None
        self.previous_reply: brain_pb2.SpokenPart | None = None
        self._send_lock = asyncio.Lock()
        self._audio: asyncio.Queue[bytes | None] | None = None
        self._stt_task: asyncio.Task | None = None
        self._received_ms = 0
        # (stream ms at the end of a frame, arrival time): maps VAD times to wall time.
        self._arrivals: deque[tuple[int, float]] = deque(maxlen=3000)
        self._pending_timings: TurnTimings | None = None

    # ---- sending -------------------------------------------------------
    async def send_event(self, kind: str, **fields) -> None:
        await self._send(text=event(kind, **fields))

    async def send_error(self, code: str, message: str) -> None:
        CLIENT_ERRORS.labels(code).inc()
        await self._send(text=error_event(code, message))

    async def _send_audio(self, turn: ActiveTurn, data: bytes) -> None:
        # Checked under the send lock: once `interrupt` is out, no frame of that turn follows.
        await self._send(data=data, still_valid=lambda: not turn.interrupted and self.turn is turn)

    async def _send(self, text: str | None = None, data: bytes | None = None,
                    still_valid=lambda: True) -> None:
        if self.ws.application_state != WebSocketState.CONNECTED:
            return
        async with self._send_lock:
            if not still_valid():
                return
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                if text is not None:
                    await self.ws.send_text(text)
                else:
                    await self.ws.send_bytes(data or b"")

    # ---- receiving -----------------------------------------------------
    async def run(self) -> None:
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes") is not None:
                    await self._on_audio(message["bytes"])
                elif message.get("text") is not None:
                    if not await self._on_text(message["text"]):
                        return
        finally:
            await self.close()

    async def _on_text(self, raw: str) -> bool:
        """Handle one text frame; False ends the call."""
        if len(raw) > self.settings.max_message_bytes:
            await self.send_error("payload_too_large", "text frame too large")
            return True
        try:
            message = parse_client_text(raw, self.settings.max_text_chars)
            if isinstance(message, SessionStart):
                await self._start_session(message)
            elif self.session is None:
                raise ProtocolError("bad_request", "send session.start first")
            elif isinstance(message, InputText):
                self._start_turn(message.text, TurnTimings())
            elif isinstance(message, PlaybackPosition):
                if self.turn and self.turn.turn_id == message.turn_id:
                    self.turn.played_ms = message.played_ms
            elif isinstance(message, SessionEnd):
                return False
        except ProtocolError as exc:
            await self.send_error(exc.code, exc.message)
        return True

    async def _start_session(self, start: SessionStart) -> None:
        if self.session is not None:
            raise ProtocolError("bad_request", "session already started")
        if start.session_id is None:
            session_id = await self.sessions.create(self.user_id)
        else:
            session_id = await self.sessions.resume(self.user_id, start.session_id)
            if session_id is None:
                raise ProtocolError("not_found", "no such session")
        self.session, self.session_id = start, session_id
        await self.send_event(
            "session.started", session_id=session_id,
            audio={"encoding": "pcm16", "sample_rate": self.settings.output_sample_rate},
        )

    async def _on_audio(self, data: bytes) -> None:
        if self.session is None:
            await self.send_error("bad_request", "send session.start before audio")
            return
        if len(data) > self.settings.max_audio_frame_bytes:
            await self.send_error("payload_too_large",
                                  f"audio frame over {self.settings.max_audio_frame_bytes} bytes")
            return
        if self._stt_task is None or self._stt_task.done():
            self._open_stt()
        self._received_ms += len(data) * 1000 // (2 * self.session.sample_rate)
        self._arrivals.append((self._received_ms, time.perf_counter()))
        try:
            self._audio.put_nowait(data)
        except asyncio.QueueFull:
            await self.send_error("rate_limited", "audio arrives faster than it can be processed")

    # ---- STT -----------------------------------------------------------
    def _open_stt(self) -> None:
        self._audio = asyncio.Queue(maxsize=self.settings.max_pending_audio_frames)
        self._received_ms = 0
        self._arrivals.clear()
        self._stt_task = asyncio.create_task(self._stt_stream(self._audio))

    async def _stt_stream(self, audio: asyncio.Queue) -> None:
        assert self.session is not None

        async def requests():
            yield stt_pb2.RecognizeRequest(config=stt_pb2.RecognitionConfig(
                session_id=self.session_id, language=self.session.language,
                sample_rate=self.session.sample_rate, interim_results=True,
            ))
            while (chunk := await audio.get()) is not None:
                yield stt_pb2.RecognizeRequest(audio=chunk)

        try:
            async for ev in self.upstreams.stt.StreamingRecognize(requests()):
                await self._on_stt_event(ev)
        except grpc.aio.AioRpcError as exc:
            log.warning("stt stream failed", extra={"code": str(exc.code()), "detail": exc.details()})
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                await self.send_error("bad_request", exc.details() or "audio rejected")
            else:
                await self.send_error("upstream_unavailable", "speech recognition is unavailable")

    async def _on_stt_event(self, ev: stt_pb2.RecognizeEvent) -> None:
        kind = ev.WhichOneof("event")
        now = time.perf_counter()
        if kind == "speech_started":
            await self._barge_in()
        elif kind == "end_of_utterance":
            self._pending_timings = TurnTimings(
                speech_end=self._arrival_of(ev.end_of_utterance.end_ms), end_of_utterance=now,
            )
        elif kind == "transcript":
            text = ev.transcript.text.strip()
            if not ev.transcript.is_final:
                if text:
                    await self.send_event("transcript.partial", turn_id="", text=text)
                return
            timings = self._pending_timings or TurnTimings(speech_end=now, end_of_utterance=now)
            self._pending_timings = None
            timings.final_transcript = now
            if text:
                self._start_turn(text, timings, transcribed=True)

    def _arrival_of(self, stream_ms: int) -> float:
        for end_ms, arrived in self._arrivals:
            if end_ms >= stream_ms:
                return arrived
        return time.perf_counter()

    # ---- turns ---------------------------------------------------------
    def _start_turn(self, text: str, timings: TurnTimings, transcribed: bool = False) -> None:
        assert self.session is not None and self.session_id is not None
        previous = self.turn
        turn_id = "t_" + uuid.uuid4().hex[:12]
        spoken = SpokenTracker(self.settings.output_sample_rate)
        request = TurnRequest(
            self.session_id, self.user_id, turn_id, text, self.session.language,
            self.settings.output_sample_rate,
        )
        turn = ActiveTurn(turn_id, spoken)
        turn.task = asyncio.create_task(self._turn(previous, turn, request, timings, transcribed))
        self.turn = turn

    async def _turn(self, previous: ActiveTurn | None, turn: ActiveTurn, request: TurnRequest,
                    timings: TurnTimings, transcribed: bool) -> None:
        if previous is not None and not previous.task.done():
            await self._interrupt(previous)
        await cancel_task(previous.task if previous else None)
        request.previous_reply, self.previous_reply = self.previous_reply, None
        if transcribed:
            await self.send_event("transcript.final", turn_id=request.turn_id, text=request.text)
        runner = TurnRunner(self.upstreams, self.send_event,
                            lambda data: self._send_audio(turn, data), self.settings.turn_timeout_s)
        try:
            reply = await runner.run(request, timings, turn.spoken)
        except asyncio.CancelledError:
            TURNS.labels("interrupted").inc()
            raise
        except grpc.aio.AioRpcError as exc:
            TURNS.labels("error").inc()
            log.warning("turn failed", extra={"turn_id": request.turn_id, "code": str(exc.code()),
                                              "detail": exc.details()})
            await self.send_error("upstream_unavailable", "the assistant is unavailable right now")
            return
        TURNS.labels("completed").inc()
        self.previous_reply = brain_pb2.SpokenPart(turn_id=request.turn_id, text=reply)
        await self.send_event("turn.metrics", turn_id=request.turn_id, ms=timings.observe())

    async def _barge_in(self) -> None:
        turn = self.turn
        if turn is None or turn.task.done() or turn.spoken.sent_ms == 0:
            return
        BARGE_INS.inc()
        await self._interrupt(turn)
        await cancel_task(turn.task)

    async def _interrupt(self, turn: ActiveTurn) -> None:
        """Stop the turn's audio now and remember what of it was heard."""
        if turn.interrupted:
            return
        turn.interrupted = True
        if turn.spoken.sent_ms:
            await self.send_event("interrupt", turn_id=turn.turn_id)
        self.previous_reply = brain_pb2.SpokenPart(
            turn_id=turn.turn_id, text=turn.spoken.spoken_text(turn.played_ms), interrupted=True,
        )

    async def close(self) -> None:
        if self.turn is not None:
            await cancel_task(self.turn.task)
        if self._audio is not None:
            with contextlib.suppress(asyncio.QueueFull):
                self._audio.put_nowait(None)
        if self._stt_task is not None:
            # Let the stream end cleanly first: a final for speech still in flight is not lost.
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self._stt_task), 0.5)
            await cancel_task(self._stt_task)
