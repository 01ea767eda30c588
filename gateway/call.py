"""One WebSocket connection: protocol handling, the STT stream, turns, barge-in.

Client messages are handled one at a time; STT events and turns run in their
own tasks. A new turn always interrupts the one in flight.

Barge-in, and why it works this way. The person may start speaking while
the bot's reply is in flight (being made or being heard). A cough, a click
or a short "mm" must not cut the bot off, yet the bot must not talk over a
real interruption either. So it goes in two steps:

1. ``SpeechStarted`` (the STT's VAD saw ~64 ms of speech) *pauses* the turn's
   playout within one audio frame: no frame leaves after that until it is
   decided. Nothing is dropped and the client keeps playing the short lead it
   holds (``GATEWAY_PLAYBACK_LEAD_MS``), so a pause that ends soon is not
   heard at all, while a real interruption stops reaching the ear at once.
2. It is *confirmed* by a partial (or final) transcript with words over at
   least ``GATEWAY_BARGE_IN_MIN_WORDS_MS`` of speech (Whisper readily hears
   "up" or "you" in a click; fillers such as "uh", "mm" are not words here), or
   by ``GATEWAY_BARGE_IN_MIN_SPEECH_MS`` of stream time since the onset while
   the utterance is still open. That figure counts the endpointer's closing
   silence too (the gateway only learns that speech ended from
   ``EndOfUtterance``, ``STT_MIN_SILENCE_MS`` later), so it must stay above
   that silence plus the longest noise to ignore. Confirmed: within the same
   frame the playout is stopped (its frames dropped), ``interrupt`` is sent,
   what was heard is worked out from the audio sent and the client's
   ``playback.position``, and the brain and TTS calls are cancelled; the next
   ``Respond`` carries the spoken part.
   Not confirmed (``EndOfUtterance`` came first and the final transcript has
   no such words): a false start. The playout resumes where it paused, with
   the same turn's next frame; nothing is replayed, and that final does not
   start a turn either.

A new turn never replays the interrupted one: its audio comes from a new TTS
call, and a turn's frames are checked under the send lock against its
``interrupted`` flag, so no frame of it follows its ``interrupt``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry import trace
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from gateway.config import GatewaySettings
from gateway.metrics import BARGE_IN_FALSE_STARTS, BARGE_IN_SECONDS, BARGE_INS, CLIENT_ERRORS, TURNS
from gateway.playout import Playout
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
from voicebot.common.telemetry import ids, outgoing_metadata, record_content, trace_id_hex, tracer
from voicebot.v1 import brain_pb2, stt_pb2

log = logging.getLogger("gateway.call")
TRACER = tracer("voicebot.gateway")


@dataclass
class ActiveTurn:
    turn_id: str
    text: str
    transcribed: bool
    spoken: SpokenTracker
    playout: Playout
    task: asyncio.Task | None = None
    # The client's last playback.position: played_ms at perf_counter() time.
    played_ms: int | None = None
    played_at: float = 0.0
    announced: bool = False  # audio.start went out
    interrupted: bool = False

    def heard_ms_reported(self, now: float) -> float | None:
        """The client's position now: its report plus the time since, while it had audio."""
        if self.played_ms is None:
            return None
        return self.played_ms + (now - self.played_at) * 1000

    def audible(self, now: float) -> bool:
        """The reply is being made or heard (and was not interrupted)."""
        if self.interrupted or self.task is None:
            return False
        return not self.task.done() or self.spoken.playing(now)


@dataclass
class PendingBargeIn:
    """Speech started while the bot's reply was in flight; not yet confirmed."""

    turn: ActiveTurn
    utterance: int
    onset_ms: int
    detected_at: float
    # Stream time already received when SpeechStarted came: how far STT runs behind.
    detected_stream_ms: int = 0
    ended: bool = False  # EndOfUtterance came: the final transcript decides

    def long_enough(self, received_ms: int, now: float, min_speech_ms: int) -> bool:
        """The utterance is still open after ``min_speech_ms`` since its onset.

        Counted in stream time (the audio received) *and* in wall time since
        SpeechStarted: a client that sends a burst of audio is ahead of what STT has
        processed, and the EndOfUtterance of a short sound may still be on its way.
        """
        if self.ended:
            return False
        detected_late_ms = self.detected_stream_ms - self.onset_ms
        return (received_ms - self.onset_ms >= min_speech_ms
                and (now - self.detected_at) * 1000 + detected_late_ms >= min_speech_ms)


# Sounds that are not an interruption when they are all there is.
FILLERS = {"uh", "um", "umm", "er", "erm", "eh", "ah", "oh", "mm", "mmm", "hm", "hmm", "mhm", "uh-huh"}


def has_words(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def spoken_words(text: str) -> list[str]:
    """The words of a transcript that mean something (fillers and backchannels left out)."""
    return [w for w in re.findall(r"[\w'-]+", text.lower()) if w.strip("'-") not in FILLERS]


class TurnChannel:
    """A turn's output: its audio goes out only while it is the live, unpaused turn."""

    def __init__(self, call: Call, turn: ActiveTurn) -> None:
        self.call, self.turn = call, turn

    def _live(self) -> bool:
        return not self.turn.interrupted and self.call.turn is self.turn

    async def event(self, kind: str, **fields: Any) -> None:
        await self.call.send_event(kind, **fields)

    async def audio(self, frame: bytes) -> bool:
        # Checked under the send lock: once `interrupt` is out, no frame of the turn follows,
        # and once the playout is paused, none until it resumes.
        sent = await self.call._send(data=frame,
                                     still_valid=lambda: self._live() and not self.turn.playout.paused)
        return sent or not self._live()  # not live: the playout is stopped, the frame is moot

    async def audio_event(self, kind: str) -> None:
        sent = await self.call._send(text=event(kind, turn_id=self.turn.turn_id), still_valid=self._live)
        self.turn.announced = self.turn.announced or (sent and kind == "audio.start")


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
        # Audio for STT; an UtteranceContext rides in the same queue to keep its order.
        self._audio: asyncio.Queue[bytes | stt_pb2.UtteranceContext | None] | None = None
        self._stt_task: asyncio.Task | None = None
        self._received_ms = 0
        # (stream ms at the end of a frame, arrival time): maps VAD times to wall time.
        self._arrivals: deque[tuple[int, float]] = deque(maxlen=3000)
        self._pending_timings: TurnTimings | None = None
        # Root `turn` spans opened at speech onset, by utterance, until a turn takes them.
        self._utterance_spans: dict[int, trace.Span] = {}
        self._barge_in: PendingBargeIn | None = None
        # What the person said in a turn that was cut off before any of its reply
        # went out (they went on speaking): it leads the next turn's text.
        self._unanswered: str | None = None

    # ---- sending -------------------------------------------------------
    async def send_event(self, kind: str, **fields) -> None:
        await self._send(text=event(kind, **fields))

    async def send_error(self, code: str, message: str) -> None:
        CLIENT_ERRORS.labels(code).inc()
        await self._send(text=error_event(code, message))

    async def _send(self, text: str | None = None, data: bytes | None = None,
                    still_valid=lambda: True) -> bool:
        """False only when ``still_valid()`` said no (a closed socket swallows the message)."""
        if self.ws.application_state != WebSocketState.CONNECTED:
            return True
        async with self._send_lock:
            if not still_valid():
                return False
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                if text is not None:
                    await self.ws.send_text(text)
                else:
                    await self.ws.send_bytes(data or b"")
        return True

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
                self._unanswered = None
                self._start_turn(message.text, TurnTimings())
            elif isinstance(message, PlaybackPosition):
                if self.turn and self.turn.turn_id == message.turn_id:
                    self.turn.played_ms, self.turn.played_at = message.played_ms, time.perf_counter()
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
        if self._barge_in is not None and self._barge_in.long_enough(
                self._received_ms, time.perf_counter(), self.settings.barge_in_min_speech_ms):
            await self._confirm_barge_in("min_speech")

    # ---- STT -----------------------------------------------------------
    def _end_utterance_spans(self, outcome: str) -> None:
        for span in self._utterance_spans.values():
            span.set_attribute("voicebot.turn.outcome", outcome)
            span.end()
        self._utterance_spans.clear()

    def _open_stt(self) -> None:
        self._end_utterance_spans("stt_stream_ended")  # a new stream numbers utterances afresh
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
                if isinstance(chunk, stt_pb2.UtteranceContext):
                    yield stt_pb2.RecognizeRequest(utterance=chunk)
                else:
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
        finally:
            # No STT, no confirmation: a paused reply must not wait for ever.
            if self._barge_in is not None:
                self._false_start()

    async def _on_stt_event(self, ev: stt_pb2.RecognizeEvent) -> None:
        kind = ev.WhichOneof("event")
        now = time.perf_counter()
        if kind == "speech_started":
            self._open_utterance_span(ev.utterance_index)
            self._speech_started(ev.utterance_index, ev.speech_started.offset_ms, now)
        elif kind == "end_of_utterance":
            if self._barge_in is not None and self._barge_in.utterance == ev.utterance_index:
                self._barge_in.ended = True
            self._pending_timings = TurnTimings(
                speech_end=self._arrival_of(ev.end_of_utterance.end_ms), end_of_utterance=now,
            )
        elif kind == "transcript":
            await self._on_transcript(ev, now)

    async def _on_transcript(self, ev: stt_pb2.RecognizeEvent, now: float) -> None:
        text = ev.transcript.text.strip()
        final = ev.transcript.is_final
        pending = self._barge_in
        if pending is not None and pending.utterance == ev.utterance_index:
            span_ms = ev.transcript.end_ms - ev.transcript.start_ms
            if spoken_words(text) and span_ms >= self.settings.barge_in_min_words_ms:
                await self._confirm_barge_in("final" if final else "partial")
            elif final:
                self._false_start()
                span = self._utterance_span(ev.utterance_index)
                if span is not None:
                    span.set_attribute("voicebot.turn.outcome", "false_start")
                    span.end()
                return  # a sound too short to count while the bot spoke: not a turn either
        if not final:
            if text:
                await self.send_event("transcript.partial", turn_id="", text=text)
            return
        timings = self._pending_timings or TurnTimings(speech_end=now, end_of_utterance=now)
        self._pending_timings = None
        timings.final_transcript = now
        span = self._utterance_span(ev.utterance_index)
        if has_words(text):  # an empty (or punctuation-only) final never starts a turn
            unanswered, self._unanswered = self._unanswered, None
            self._start_turn(f"{unanswered} {text}" if unanswered else text, timings, transcribed=True,
                             span=span)
        elif self._unanswered:
            # The speech that cut the question off was no words after all: ask it again.
            text, self._unanswered = self._unanswered, None
            self._start_turn(text, timings, transcribed=True, span=span)
        elif span is not None:
            span.set_attribute("voicebot.turn.outcome", "no_words")
            span.end()

    def _open_utterance_span(self, utterance: int) -> None:
        """A person started speaking: this may become a turn. Its trace starts now, and STT
        is told the trace context so its span for this utterance joins the same trace."""
        span = TRACER.start_span("turn", attributes={**ids(self.session_id or ""),
                                                     "voicebot.turn.input": "speech"})
        self._utterance_spans[utterance] = span
        context = stt_pb2.UtteranceContext(utterance_index=utterance, traceparent=dict(
            outgoing_metadata(trace.set_span_in_context(span))).get("traceparent", ""))
        if self._audio is not None:
            with contextlib.suppress(asyncio.QueueFull):
                self._audio.put_nowait(context)

    def _utterance_span(self, utterance: int):
        return self._utterance_spans.pop(utterance, None)

    def _arrival_of(self, stream_ms: int) -> float:
        for end_ms, arrived in self._arrivals:
            if end_ms >= stream_ms:
                return arrived
        return time.perf_counter()

    # ---- barge-in ------------------------------------------------------
    def _speech_started(self, utterance: int, onset_ms: int, now: float) -> None:
        turn = self.turn
        if turn is None or not turn.audible(now):
            return
        turn.playout.pause()  # step 1: not one more frame until this speech is judged
        self._barge_in = PendingBargeIn(turn, utterance, onset_ms, now, self._received_ms)

    async def _confirm_barge_in(self, reason: str) -> None:
        pending, self._barge_in = self._barge_in, None
        if pending is None or pending.turn is not self.turn or pending.turn.interrupted:
            return
        turn = pending.turn
        confirmed_at = time.perf_counter()
        BARGE_INS.inc()
        await self._interrupt(turn)
        interrupted_at = time.perf_counter()
        await cancel_task(turn.task)
        if turn.transcribed and not turn.spoken.sent_ms:
            # Still thinking when the person went on: they were not done ("Actually, | make it
            # three"). The next turn answers both parts instead of the first part alone.
            self._unanswered = turn.text
        self._record_barge_in(pending, reason, confirmed_at, interrupted_at)

    def _false_start(self) -> None:
        pending, self._barge_in = self._barge_in, None
        if pending is None:
            return
        BARGE_IN_FALSE_STARTS.inc()
        log.info("barge-in false start", extra={"turn_id": pending.turn.turn_id,
                                                "utterance": pending.utterance})
        if not pending.turn.interrupted:
            pending.turn.playout.resume()  # the same turn's next frame: nothing stale, nothing replayed

    def _record_barge_in(self, pending: PendingBargeIn, reason: str, confirmed_at: float,
                         interrupted_at: float) -> None:
        last_sent = pending.turn.playout.last_sent_at or pending.detected_at
        steps = {
            "last_audio": max(0.0, last_sent - pending.detected_at),
            "confirmed": confirmed_at - pending.detected_at,
            "interrupt": interrupted_at - pending.detected_at,
        }
        for step, seconds in steps.items():
            BARGE_IN_SECONDS.labels(step).observe(seconds)
        log.info("barge-in", extra={
            "turn_id": pending.turn.turn_id, "reason": reason,
            "onset_to_speech_started_ms": pending.detected_stream_ms - pending.onset_ms,
            **{f"{step}_ms": round(seconds * 1000, 1) for step, seconds in steps.items()},
            "heard_words": len(self.previous_reply.text.split()) if self.previous_reply else 0,
        })

    # ---- turns ---------------------------------------------------------
    def _start_turn(self, text: str, timings: TurnTimings, transcribed: bool = False,
                    span: trace.Span | None = None) -> None:
        assert self.session is not None and self.session_id is not None
        previous = self.turn
        self._barge_in = None  # the new turn interrupts the old one anyway
        turn_id = "t_" + uuid.uuid4().hex[:12]
        spoken = SpokenTracker(self.settings.output_sample_rate)
        playout = Playout(spoken, self.settings.output_frame_ms, self.settings.playback_lead_ms)
        request = TurnRequest(
            self.session_id, self.user_id, turn_id, text, self.session.language,
            self.settings.output_sample_rate,
        )
        turn = ActiveTurn(turn_id, text, transcribed, spoken, playout)
        span = span or TRACER.start_span("turn", attributes={**ids(self.session_id),
                                                             "voicebot.turn.input": "text"})
        span.set_attributes(ids(self.session_id, turn_id))
        if record_content():  # what people said stays out of traces unless an operator opts in
            span.set_attribute("voicebot.turn.text", text)
        turn.task = asyncio.create_task(self._traced_turn(span, previous, turn, request, timings,
                                                          transcribed))
        self.turn = turn

    async def _traced_turn(self, span: trace.Span, previous: ActiveTurn | None, turn: ActiveTurn,
                           request: TurnRequest, timings: TurnTimings, transcribed: bool) -> None:
        """The turn under its root span: brain and TTS calls carry it in their metadata."""
        outcome = "interrupted"
        try:
            with trace.use_span(span, end_on_exit=False):
                outcome = await self._turn(previous, turn, request, timings, transcribed)
        finally:
            span.set_attribute("voicebot.turn.outcome", outcome)
            for stage, ms in timings.stages_ms().items():
                if ms is not None:
                    span.set_attribute(f"voicebot.stage_ms.{stage}", ms)
            span.end()

    async def _turn(self, previous: ActiveTurn | None, turn: ActiveTurn, request: TurnRequest,
                    timings: TurnTimings, transcribed: bool) -> str:
        if previous is not None and previous.audible(time.perf_counter()):
            await self._interrupt(previous)
        await cancel_task(previous.task if previous else None)
        request.previous_reply, self.previous_reply = self.previous_reply, None
        if transcribed:
            await self.send_event("transcript.final", turn_id=request.turn_id, text=request.text)
        runner = TurnRunner(self.upstreams, TurnChannel(self, turn), self.settings.turn_timeout_s)
        try:
            reply = await runner.run(request, timings, turn.spoken, turn.playout)
        except asyncio.CancelledError:
            TURNS.labels("interrupted").inc()
            if timings.first_audio is not None:
                timings.observe(trace_id_hex())  # its latency was real even if the reply was cut short
            raise
        except grpc.aio.AioRpcError as exc:
            TURNS.labels("error").inc()
            log.warning("turn failed", extra={"turn_id": request.turn_id, "code": str(exc.code()),
                                              "detail": exc.details()})
            await self.send_error("upstream_unavailable", "the assistant is unavailable right now")
            return "error"
        TURNS.labels("completed").inc()
        if not turn.interrupted:
            self.previous_reply = brain_pb2.SpokenPart(turn_id=request.turn_id, text=reply)
        await self.send_event("turn.metrics", turn_id=request.turn_id, ms=timings.observe(trace_id_hex()))
        return "completed"

    async def _interrupt(self, turn: ActiveTurn) -> None:
        """Stop the turn's audio now and remember what of it was heard."""
        if turn.interrupted:
            return
        turn.interrupted = True
        turn.playout.stop()
        now = time.perf_counter()
        heard = turn.spoken.spoken_text(turn.heard_ms_reported(now), now)
        self.previous_reply = brain_pb2.SpokenPart(turn_id=turn.turn_id, text=heard, interrupted=True,
                                                   user_text=turn.text)
        if turn.announced:
            await self.send_event("interrupt", turn_id=turn.turn_id)

    async def close(self) -> None:
        self._barge_in = None
        self._end_utterance_spans("call_ended")
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
