"""A session's conversation: the STT stream, turns, barge-in, playout; no socket, no wire format.

Inputs come decoded (``events.py``: audio, a typed turn, a playback report...) and events go
out through an ``Outlet`` (the transport, which encodes them with the session's codec). Inputs
are handled one at a time; STT events and turns run in their own tasks. A new turn always
interrupts the one in flight. The decisions live in pure modules: barge-in in ``bargein.py``
(why it pauses first and confirms later is explained there), what was heard in ``spoken.py``,
the STT stream's merging and backoff in ``stt_link.py``; this class applies them to the turns.

A new turn never replays the interrupted one: its audio comes from a new TTS call, and a
turn's frames are checked under the send lock against its ``interrupted`` flag, so no frame of
it follows its ``interrupt``. Every failure is heard: an upstream that fails mid-turn gets an
``error`` event and then a fallback sentence on the same turn (``fallback.py``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid

import grpc
from opentelemetry import trace
from redis.exceptions import OutOfMemoryError, RedisError

from voicebot.common.audio import float_to_pcm16, pcm16_to_float, resample
from voicebot.common.metrics import REDIS_ERRORS
from voicebot.common.telemetry import ids, outgoing_metadata, record_content, trace_id_hex, tracer
from voicebot.gateway.active_turn import ActiveTurn, Outlet, TurnChannel, TurnStart
from voicebot.gateway.admission import TokenBucket
from voicebot.gateway.bargein import Action, BargeInDetector, Decision, Pending, Rules, has_words
from voicebot.gateway.capacity import Capacity
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import (
    Audio,
    Cancel,
    Commit,
    Configure,
    End,
    Error,
    Event,
    Hangup,
    Input,
    Interrupted,
    Played,
    ReplyCancelled,
    Say,
    SessionStarted,
    Speech,
    Start,
    TranscriptFinal,
    TranscriptPartial,
    Truncated,
    TurnMetrics,
    TurnOver,
)
from voicebot.gateway.fallback import FallbackVoice, chime
from voicebot.gateway.metrics import (
    BARGE_IN_FALSE_STARTS,
    BARGE_IN_SECONDS,
    BARGE_INS,
    CLIENT_ERRORS,
    FALLBACKS,
    IDLE_CLOSED,
    TURNS,
    TURNS_RATE_LIMITED,
)
from voicebot.gateway.playout import FRAME_MS, MESSAGE_MS, Playout
from voicebot.gateway.preemptive import EarlyReply
from voicebot.gateway.prefill import WordsPrefiller
from voicebot.gateway.protocol import ProtocolError, SessionStart
from voicebot.gateway.sessions import SessionRegistry
from voicebot.gateway.spoken import SpokenTracker
from voicebot.gateway.standby import StandbyCalls
from voicebot.gateway.stt_link import DEFAULT_HOLDS, Holds, SttLink
from voicebot.gateway.turn import TurnFailed, TurnRequest, TurnRunner, TurnTimings, cancel_task
from voicebot.gateway.upstreams import Upstreams
from voicebot.v1 import brain_pb2, stt_pb2

log = logging.getLogger("voicebot.gateway.call")
TRACER = tracer("voicebot.gateway")
CLOSE_IDLE = 4408  # like HTTP 408: nothing came from the client for GATEWAY_IDLE_TIMEOUT_S


class Outcome(enum.Enum):
    """What became of an input: done, refused (its ``refused`` frames go back), or the end."""

    DONE = "done"
    REFUSED = "refused"
    END = "end"


class Conversation:
    """One session's conversation, whatever the wire: inputs in (``handle``, ``audio_now``),
    events out (``out.emit``)."""

    def __init__(self, out: Outlet, user_id: str, settings: GatewaySettings,
                 upstreams: Upstreams, sessions: SessionRegistry, fallback: FallbackVoice | None = None,
                 capacity: Capacity | None = None, holds: Holds = DEFAULT_HOLDS) -> None:
        self.out = out
        self.user_id = user_id
        self.settings = settings
        self.upstreams = upstreams
        self.sessions = sessions
        self.fallback = fallback
        self.capacity = capacity
        self.holds = holds  # how long audio may wait for an STT message (stt_link.py)
        self.session: SessionStart | None = None
        self.session_id: str | None = None
        self.turn: ActiveTurn | None = None
        # The turn whose report (what was heard of it) the next brain request carries.
        self._reported: ActiveTurn | None = None
        self.text_only = False  # the session asked for text replies only: no TTS, no audio
        self._stt: SttLink | None = None
        self._pending_timings: TurnTimings | None = None
        # Root `turn` spans opened at speech onset, by utterance, until a turn takes them.
        self._utterance_spans: dict[int, trace.Span] = {}
        self._barge_in = BargeInDetector(Rules(settings.barge_in_min_speech_ms,
                                               settings.barge_in_min_words_ms))
        # What the person said in a turn that was cut off before any of its reply
        # went out (they went on speaking): it leads the next turn's text.
        self._unanswered: str | None = None
        self._early: EarlyReply | None = None  # a reply started on the speculative transcript
        # The brain's and TTS's calls opened at an utterance's onset for its turn (standby.py).
        self._standby: tuple[int, StandbyCalls] | None = None
        self._prefiller = WordsPrefiller(upstreams)
        # The call's metadata for the brain (a phone bridge's custom parameters), shown to the
        # model as data; never the user id, which comes from auth alone.
        self.session_context: dict[str, str] = {}
        self._rate_limited_at = 0.0
        self._utterance_open = False  # SpeechStarted came and its final has not
        # The rate of the audio sent to this client (a codec may fix its own).
        self.output_rate = settings.output_sample_rate
        # Turns recently played, by id: a late report of what was heard still reaches them.
        self._recent: dict[str, ActiveTurn] = {}
        self._typed_turns = TokenBucket(settings.turn_rate_per_s, settings.turn_burst)
        # When the client last sent anything (perf_counter), for GATEWAY_IDLE_TIMEOUT_S.
        self._input_at = time.perf_counter()
        self._idle_timer: asyncio.TimerHandle | None = None

    @property
    def previous_reply(self) -> brain_pb2.SpokenPart | None:
        """The report of the last reply, made when a request takes it (its audio has played by
        then, or the turn was cut off and its record fixed)."""
        turn = self._reported
        return None if turn is None else turn.report(time.perf_counter(), FRAME_MS)

    # ---- sending -------------------------------------------------------
    async def emit(self, event: Event) -> None:
        await self.out.emit((event,))

    async def send_error(self, code: str, message: str, in_turn: bool = True) -> None:
        """An error event; ``in_turn``: it fails the live turn (a codec may end that turn's reply
        as failed), not so a refusal of new input."""
        CLIENT_ERRORS.labels(code).inc()
        turn = self.turn
        await self.emit(Error(code, message, turn.turn_id if in_turn and turn is not None else None))

    # ---- inputs --------------------------------------------------------
    async def handle(self, item: Input) -> Outcome:
        """One decoded input; a ``ProtocolError`` becomes an error event and the session goes on."""
        try:
            return await self._handle(item)
        except ProtocolError as exc:
            await self.send_error(exc.code, exc.message)
            return Outcome.DONE

    async def _handle(self, item: Input) -> Outcome:
        if isinstance(item, Start):
            if item.context:
                self.session_context = dict(item.context)
            await self.start_session(item.session)
        elif isinstance(item, Audio):
            await self._on_audio(item.pcm)
        elif self.session is None:
            raise ProtocolError("bad_request", "send session.start first")
        elif isinstance(item, End):
            return Outcome.END
        elif isinstance(item, Say):
            await self._typed_turn(item.text)
        elif isinstance(item, Played):
            turn = self.turn
            if turn is not None and turn.turn_id == item.turn_id and not turn.interrupted:
                self.played(turn, item.played_ms)
        elif isinstance(item, Truncated):
            return Outcome.DONE if self.truncated(item.turn_id, item.played_ms) else Outcome.REFUSED
        elif isinstance(item, Configure):
            await self._configure(item)
        elif isinstance(item, Cancel):
            return await self._cancel()
        elif isinstance(item, Commit):
            return await self._commit(item.silence_ms)
        return Outcome.DONE

    async def _typed_turn(self, text: str) -> None:
        if await self.typed_turn_allowed():
            self._unanswered = None
            self._start_turn(text, TurnTimings())

    async def _configure(self, config: Configure) -> None:
        """New formats or language: a new input rate or language needs a new STT stream (its
        config is its first message)."""
        assert self.session is not None
        if (config.input_rate, config.language) != (self.session.sample_rate, self.session.language):
            self.session = SessionStart(self.session_id, config.language, config.input_rate)
            stt, self._stt = self._stt, None
            if stt is not None:
                await stt.close()
            if self.fallback is not None:
                self.fallback.warm(config.language)
        self.output_rate, self.text_only = config.output_rate, config.text_only

    async def _cancel(self) -> Outcome:
        """Stop the reply in progress, as a barge-in would."""
        turn = self.turn
        if turn is None or turn.interrupted or not turn.audible(time.perf_counter()):
            return Outcome.REFUSED
        await self._interrupt(turn)
        await cancel_task(turn.task)
        await self.emit(ReplyCancelled(turn.turn_id))
        return Outcome.DONE

    async def _commit(self, silence_ms: int) -> Outcome:
        """Close the open utterance now by giving the endpointer the silence it waits for."""
        if not self._utterance_open or self.session is None:
            return Outcome.REFUSED
        silence = bytes(2 * self.session.sample_rate * silence_ms // 1000)
        step = self.settings.max_audio_frame_bytes // 2 * 2
        for start in range(0, len(silence), step):
            await self._on_audio(silence[start:start + step])
        return Outcome.DONE

    def touch(self) -> None:
        """Something came from the client (for GATEWAY_IDLE_TIMEOUT_S)."""
        self._input_at = time.perf_counter()

    # ---- limits --------------------------------------------------------
    async def typed_turn_allowed(self) -> bool:
        """A typed turn within the session's budget (GATEWAY_TURN_RATE_PER_S, _TURN_BURST); over
        it the client is told (``rate_limited``) and the turn is dropped, so a flood of them
        cannot keep the brain and the LLM from the other sessions."""
        if self._typed_turns.take():
            return True
        TURNS_RATE_LIMITED.inc()
        # Not a failure of the turn in flight.
        await self.send_error("rate_limited", "turns come faster than this session may start them; "
                                              "this one was dropped", in_turn=False)
        return False

    def arm_idle(self) -> None:
        self._arm_idle(self.settings.idle_timeout_s)

    def _arm_idle(self, delay_s: float) -> None:
        if self.settings.idle_timeout_s > 0:
            self._idle_timer = asyncio.get_running_loop().call_later(delay_s, self._idle_check)

    def _idle_check(self) -> None:
        """A timer, not a task per call: it fires once per timeout and re-arms for the rest."""
        now = time.perf_counter()
        turn = self.turn
        if turn is not None and turn.audible(now):
            self._input_at = now  # a reply being made or heard is not an idle line
        idle_s = now - self._input_at
        if idle_s < self.settings.idle_timeout_s:
            self._arm_idle(self.settings.idle_timeout_s - idle_s)
            return
        self._idle_timer = None
        IDLE_CLOSED.inc()
        asyncio.get_running_loop().create_task(self._close_idle())

    async def _close_idle(self) -> None:
        await self.send_error("idle_timeout", f"nothing came for {self.settings.idle_timeout_s:g} s; "
                                              "the session is closed (resume it with its id)")
        await self.emit(Hangup(CLOSE_IDLE, "idle"))

    def played(self, turn: ActiveTurn, played_ms: int) -> None:
        """The client is playing the turn at ``played_ms``: a barge-in cuts the record there."""
        turn.played_ms, turn.played_at = played_ms, time.perf_counter()

    def truncated(self, turn_id: str, played_ms: int) -> bool:
        """The client stopped the turn's audio at ``played_ms`` (it cut playback itself, often after
        the gateway's own cut): the record of what was heard becomes that. False: no such turn."""
        turn = self._recent.get(turn_id)
        if turn is None:
            return False
        self.played(turn, played_ms)
        turn.played_stopped = True  # playback stopped there: no time is added to it
        if turn.record is not None:  # cut off already: the client's figure replaces the estimate
            turn.record = None
            turn.record = turn.report(time.perf_counter(), FRAME_MS)
        return True

    async def start_session(self, start: SessionStart) -> None:
        if self.session is not None:
            raise ProtocolError("bad_request", "session already started")
        session_id = await self._open_session(start.session_id)
        self.session, self.session_id = start, session_id
        self.text_only = start.output == "text"
        if self.fallback is not None and not self.text_only:
            self.fallback.warm(start.language)
        await self.emit(SessionStarted(session_id, self.output_rate, start.output))

    async def _open_session(self, session_id: str | None) -> str:
        """A new session's id, or the resumed one's. The store full (Redis at maxmemory refuses
        writes rather than evict live sessions) or down: a clear error, never a silent loss."""
        try:
            if session_id is None:
                return await self.sessions.create(self.user_id)
            resumed = await self.sessions.resume(self.user_id, session_id)
        except RedisError as exc:
            REDIS_ERRORS.labels("gateway").inc()
            full = isinstance(exc, OutOfMemoryError)
            log.error("session store refused the session", extra={"error": repr(exc)[:200], "full": full})
            if full:
                raise ProtocolError("overloaded", "the session store is full; try again later") from None
            raise ProtocolError("upstream_unavailable", "the session store is unavailable; "
                                                        "try again shortly") from None
        if resumed is None:
            raise ProtocolError("not_found", "no such session")
        return resumed

    def audio_now(self, data: bytes) -> bool:
        """The common audio frame, handled without awaiting: queued for STT. False (nothing
        done) when the frame needs the awaited path: an error to answer, a barge-in to weigh."""
        if (self.session is None or len(data) > self.settings.max_audio_frame_bytes
                or self._barge_in.pending is not None):
            return False
        stt = self._stt
        if stt is not None and stt.would_drop():
            return False
        now = self._input_at = time.perf_counter()
        (stt or self._open_stt()).send(data, now)
        return True

    async def _on_audio(self, data: bytes) -> None:
        if self.session is None:
            await self.send_error("bad_request", "send session.start before audio")
            return
        if len(data) > self.settings.max_audio_frame_bytes:
            await self.send_error("payload_too_large",
                                  f"audio frame over {self.settings.max_audio_frame_bytes} bytes")
            return
        now = self._input_at = time.perf_counter()
        stt = self._stt or self._open_stt()
        if not stt.send(data, now) and now - self._rate_limited_at >= 1.0:
            self._rate_limited_at = now  # said at most once a second, not once per dropped frame
            await self.send_error("rate_limited", "audio arrives faster than it can be processed")
        if self._barge_in.pending is not None:  # the per-frame path stays short otherwise
            await self._apply(self._barge_in.audio(stt.received_ms, now))

    # ---- STT -----------------------------------------------------------
    def _end_utterance_spans(self, outcome: str) -> None:
        for span in self._utterance_spans.values():
            span.set_attribute("voicebot.turn.outcome", outcome)
            span.end()
        self._utterance_spans.clear()

    def _open_standby(self, utterance: int) -> None:
        """The calls this utterance's turn will need, opened now, under its trace (standby.py)."""
        self._take_standby(None)
        if self.session_id is None:
            return
        span = self._utterance_spans.get(utterance)
        metadata = outgoing_metadata(trace.set_span_in_context(span) if span is not None else None)
        read_ahead = brain_pb2.Prepare(session_id=self.session_id, user_id=self.user_id) \
            if self._history_settled() else None
        self._standby = (utterance, StandbyCalls(self.upstreams, self.settings.turn_timeout_s, metadata,
                                                 read_ahead=read_ahead))

    def _history_settled(self) -> bool:
        """No turn of this call can still be writing the session at the brain: the last one's
        brain call ended whole (the brain returns only after the turn's writes), or there was
        none. Then the brain may read the session for the next turn while the caller speaks."""
        last = self.turn
        return last is None or (last.timings is not None and last.timings.brain_done is not None)

    def _take_standby(self, utterance: int | None) -> StandbyCalls | None:
        """The utterance's standby calls if they can still carry its turn; any other is cancelled
        (``None``: drop whatever is open)."""
        held, self._standby = self._standby, None
        if held is None:
            return None
        opened_for, calls = held
        if opened_for == utterance and calls.usable():
            return calls
        calls.cancel()
        return None

    def _open_stt(self) -> SttLink:
        assert self.session is not None
        config = stt_pb2.RecognitionConfig(session_id=self.session_id, language=self.session.language,
                                           sample_rate=self.session.sample_rate, interim_results=True,
                                           speculative_results=self.settings.preemptive,
                                           # STT sends a final it has at the endpoint inside the
                                           # EndOfUtterance: one message, not two (a gRPC stream's
                                           # second message waits for the first).
                                           final_with_end_of_utterance=True)
        self._stt = SttLink(self.upstreams.stt.StreamingRecognize, config,
                            on_event=self._on_stt_event, on_ended=self._on_stt_ended,
                            on_down=self._on_stt_down, max_frames=self.settings.max_pending_audio_frames,
                            hold_ms=self._stt_hold_ms, loud_rms=self.holds.loud_rms,
                            speech_hold=lambda: self._utterance_open,
                            reconnected=lambda: self.upstreams.reconnected("stt"))
        return self._stt

    def _stt_hold_ms(self) -> int:
        """How much audio may wait for one STT message now. While an utterance is open, its
        loud frames a little (the link sends a quiet one at once: the endpoint rides on the
        silence); none while a reply is being made and none of it was sent (speech then holds
        the reply back). While the reply plays, or nothing happens, only the next onset waits
        on it: a barge-in then pauses the playout that much later, which the caller does not
        hear (the client plays its lead either way, and the interrupt comes with the
        confirmation, counted in stream time)."""
        if self._utterance_open:
            # Only loud audio waits, and only when a quiet frame can end the wait.
            return self.holds.speech_ms if self.holds.loud_rms else 0
        turn = self.turn
        if turn is not None and turn.audible(time.perf_counter()):
            return self.holds.playback_ms if turn.spoken.sent_ms > 0 else 0
        return self.holds.idle_ms

    def _became_busy(self) -> None:
        if self._stt is not None:
            self._stt.wake()

    async def _on_stt_ended(self) -> None:
        """A stream ended: its utterances are gone (a new one numbers them afresh)."""
        self._end_utterance_spans("stt_stream_ended")
        self._take_standby(None)
        self._pending_timings = None
        self._utterance_open = False
        await self._apply(self._barge_in.stt_ended())

    async def _on_stt_down(self, code: grpc.StatusCode, detail: str) -> None:
        """Told once per outage (the stream is retried with backoff meanwhile)."""
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            await self.send_error("bad_request", detail or "audio rejected")
            return
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            if self.capacity is not None:
                self.capacity.stt_refused()
            await self.send_error("overloaded", "speech recognition is at capacity; retrying")
        else:
            await self.send_error("upstream_unavailable", "speech recognition is unavailable; retrying")
        if self.turn is None or not self.turn.audible(time.perf_counter()):
            # At capacity the caller hears that the line is busy (fallback.py has the sentence),
            # not that they cannot be heard: calling again later is what helps them.
            full = code == grpc.StatusCode.RESOURCE_EXHAUSTED
            self._start_fallback_turn("busy" if full else "cant_hear", "stt")

    async def _on_stt_event(self, ev: stt_pb2.RecognizeEvent) -> None:
        kind = ev.WhichOneof("event")
        now = time.perf_counter()
        if kind == "speech_started":
            self._utterance_open = True
            self._became_busy()
            await self._speech(True, ev.speech_started.offset_ms)
            self._open_utterance_span(ev.utterance_index)
            self._open_standby(ev.utterance_index)
            turn = self.turn
            audible = turn.turn_id if turn is not None and turn.audible(now) else None
            await self._apply(self._barge_in.speech_started(
                ev.utterance_index, ev.speech_started.offset_ms, audible_turn=audible,
                received_ms=self._stt.received_ms if self._stt else 0, now=now))
        elif kind == "end_of_utterance":
            self._barge_in.end_of_utterance(ev.utterance_index)
            speech_end = self._stt.arrival_of(ev.end_of_utterance.end_ms) if self._stt else now
            self._pending_timings = TurnTimings(speech_end=speech_end, end_of_utterance=now)
            await self._speech(False, ev.end_of_utterance.end_ms)
            if ev.end_of_utterance.HasField("final"):  # asked for in _open_stt
                await self._on_transcript(ev.utterance_index, ev.end_of_utterance.final, now)
        elif kind == "transcript":
            await self._on_transcript(ev.utterance_index, ev.transcript, now)

    async def _speech(self, started: bool, stream_ms: int) -> None:
        received = self._stt.received_ms if self._stt is not None else 0
        await self.emit(Speech(started, received - stream_ms))

    async def _on_transcript(self, utterance: int, transcript: stt_pb2.Transcript, now: float) -> None:
        text = transcript.text.strip()
        final = transcript.is_final
        self._utterance_open = self._utterance_open and not final
        decision = self._barge_in.transcript(utterance, text, transcript.start_ms, transcript.end_ms, final)
        await self._apply(decision)
        if decision.action is Action.RESUME:
            self._take_standby(None)
            span = self._utterance_span(utterance)
            if span is not None:
                span.set_attribute("voicebot.turn.outcome", "false_start")
                span.end()
            return  # a sound too short to count while the bot spoke: not a turn either
        if not final:
            if transcript.speculative:
                self._start_early(utterance, text)
            else:
                self._prefill_words(text)
            if text:
                await self.emit(TranscriptPartial(text))
            return
        timings = self._pending_timings or TurnTimings(speech_end=now, end_of_utterance=now)
        self._pending_timings = None
        timings.final_transcript = now
        span = self._utterance_span(utterance)
        early, self._early = self._early, None
        if early is not None and not (has_words(text) and not self._unanswered
                                      and early.matches(utterance, text)):
            log.info("preemptive reply discarded", extra={"early": early.request.text, "final": text,
                                                         "utterance": utterance,
                                                         "early_utterance": early.utterance})
            early.discard()  # the endpoint heard other words
            early = None
        standby = self._take_standby(utterance)
        if has_words(text):  # an empty (or punctuation-only) final never starts a turn
            unanswered, self._unanswered = self._unanswered, None
            self._start_turn(f"{unanswered} {text}" if unanswered else text, timings, transcribed=True,
                             span=span, early=early, standby=standby)
        elif self._unanswered:
            # The speech that cut the question off was no words after all: ask it again.
            text, self._unanswered = self._unanswered, None
            self._start_turn(text, timings, transcribed=True, span=span, standby=standby)
        else:
            if standby is not None:  # no words: no turn, and the next utterance opens its own
                standby.cancel()
            if span is not None:
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
        if self._stt is not None:
            self._stt.send_context(context)

    def _utterance_span(self, utterance: int):
        return self._utterance_spans.pop(utterance, None)

    # ---- barge-in ------------------------------------------------------
    async def _apply(self, decision: Decision) -> None:
        """Carry out a barge-in decision on the turn it is about, if that is still the live one."""
        if decision.action is Action.IGNORE or decision.pending is None:
            return
        pending = decision.pending
        turn = self.turn
        live = turn is not None and turn.turn_id == pending.turn_id and not turn.interrupted
        if decision.action is Action.PAUSE:
            if live:
                turn.playout.pause()  # not one more frame until this speech is judged
        elif decision.action is Action.CONFIRM:
            if live:
                await self._confirm_barge_in(turn, pending, decision.reason)
        elif decision.action is Action.RESUME:
            BARGE_IN_FALSE_STARTS.inc()
            log.info("barge-in false start", extra={"turn_id": pending.turn_id,
                                                    "utterance": pending.utterance,
                                                    "reason": decision.reason})
            if live:
                turn.playout.resume()  # the same turn's next frame: nothing stale, nothing replayed

    async def _confirm_barge_in(self, turn: ActiveTurn, pending: Pending, reason: str) -> None:
        confirmed_at = time.perf_counter()
        BARGE_INS.inc()
        await self._interrupt(turn)
        interrupted_at = time.perf_counter()
        await cancel_task(turn.task)
        if turn.transcribed and not turn.spoken.sent_ms:
            # Still thinking when the person went on: they were not done ("Actually, | make it
            # three"). The next turn answers both parts instead of the first part alone.
            self._unanswered = turn.text
        self._record_barge_in(turn, pending, reason, confirmed_at, interrupted_at)

    def _record_barge_in(self, turn: ActiveTurn, pending: Pending, reason: str, confirmed_at: float,
                         interrupted_at: float) -> None:
        last_sent = turn.playout.last_sent_at or pending.detected_at
        steps = {
            "last_audio": max(0.0, last_sent - pending.detected_at),
            "confirmed": confirmed_at - pending.detected_at,
            "interrupt": interrupted_at - pending.detected_at,
        }
        for step, seconds in steps.items():
            BARGE_IN_SECONDS.labels(step).observe(seconds)
        log.info("barge-in", extra={
            "turn_id": turn.turn_id, "reason": reason,
            "onset_to_speech_started_ms": pending.detected_stream_ms - pending.onset_ms,
            **{f"{step}_ms": round(seconds * 1000, 1) for step, seconds in steps.items()},
            "heard_words": len(self.previous_reply.text.split()) if self.previous_reply else 0,
        })

    # ---- turns ---------------------------------------------------------
    def _new_playout(self, spoken: SpokenTracker) -> Playout:
        return Playout(spoken, FRAME_MS, self.settings.playback_lead_ms, message_ms=MESSAGE_MS)

    def _runner(self, turn: ActiveTurn) -> TurnRunner:
        return TurnRunner(self.upstreams, TurnChannel(self.out, turn, lambda t: self.turn is t),
                          self.settings.turn_timeout_s,
                          first_words=self.settings.reply_first_words)

    def _may_start_on(self, text: str) -> bool:
        """Words the brain may work on before the endpoint: a session, words, and no reply still
        in the air (then it is a barge-in, and what the caller heard is not known yet)."""
        turn = self.turn
        return (has_words(text) and self.session is not None and self.session_id is not None
                and (turn is None or (not turn.audible(time.perf_counter()) and turn.task.done())))

    def _prefill_words(self, text: str) -> None:
        """An interim transcript while no reply is in the air: the brain caches the prompt a
        turn on these words would send (voicebot/gateway/prefill.py)."""
        if not self.settings.prefill_words or not self._may_start_on(text):
            return
        words = f"{self._unanswered} {text}" if self._unanswered else text
        self._prefiller.send(brain_pb2.RespondRequest(
            session_id=self.session_id, user_id=self.user_id, text=words, language=self.session.language,
            previous_reply=self.previous_reply, session_context=self.session_context))

    def _start_early(self, utterance: int, text: str) -> None:
        """A speculative transcript: start the brain on it now, unless a reply is still in the
        air (then this is a barge-in, and what the caller heard is not known yet)."""
        early = self._early
        if early is not None and early.matches(utterance, text):
            return  # the same words again: the reply already started on them
        if early is not None:
            early.discard()
            self._early = None
        if not self.settings.preemptive or self._unanswered or not self._may_start_on(text):
            return
        request = brain_pb2.RespondRequest(
            session_id=self.session_id, turn_id="t_" + uuid.uuid4().hex[:12], user_id=self.user_id,
            text=text, language=self.session.language, previous_reply=self.previous_reply,
            session_context=self.session_context)
        self._early = EarlyReply(self.upstreams.brain, request, utterance, self.settings.turn_timeout_s,
                                 outgoing_metadata())

    def _start_turn(self, text: str, timings: TurnTimings, transcribed: bool = False,
                    span: trace.Span | None = None, early: EarlyReply | None = None,
                    standby: StandbyCalls | None = None) -> None:
        assert self.session is not None and self.session_id is not None
        previous = self.turn
        self._barge_in.clear()  # the new turn interrupts the old one anyway
        turn_id = early.turn_id if early is not None else "t_" + uuid.uuid4().hex[:12]
        spoken = SpokenTracker(self.output_rate)
        request = TurnRequest(
            self.session_id, self.user_id, turn_id, text, self.session.language,
            self.output_rate, context=self.session_context,
        )
        turn = ActiveTurn(turn_id, text, transcribed, spoken, self._new_playout(spoken), timings=timings,
                          delivered=[] if self.text_only else None)
        if standby is None and self._standby is not None and self._standby[1].read_ahead:
            self._take_standby(None)  # a typed turn during speech: that read may be stale by its turn
        self._recent[turn_id] = turn
        while len(self._recent) > 4:  # a report comes for the last turn or two, never older ones
            self._recent.pop(next(iter(self._recent)))
        span = span or TRACER.start_span("turn", attributes={**ids(self.session_id),
                                                             "voicebot.turn.input": "text"})
        span.set_attributes(ids(self.session_id, turn_id))
        if record_content():  # what people said stays out of traces unless an operator opts in
            span.set_attribute("voicebot.turn.text", text)
        start = TurnStart(early, standby)
        turn.task = asyncio.create_task(self._traced_turn(span, previous, turn, request, timings,
                                                          transcribed, start))
        turn.task.add_done_callback(start.release)
        self.turn = turn
        self._became_busy()

    async def _traced_turn(self, span: trace.Span, previous: ActiveTurn | None, turn: ActiveTurn,
                           request: TurnRequest, timings: TurnTimings, transcribed: bool,
                           start: TurnStart) -> None:
        """The turn under its root span: brain and TTS calls carry it in their metadata."""
        outcome = "interrupted"
        try:
            with trace.use_span(span, end_on_exit=False):
                outcome = await self._turn(previous, turn, request, timings, transcribed, start)
        finally:
            span.set_attribute("voicebot.turn.outcome", outcome)
            for stage, ms in timings.stages_ms().items():
                if ms is not None:
                    span.set_attribute(f"voicebot.stage_ms.{stage}", ms)
            span.end()

    async def _turn(self, previous: ActiveTurn | None, turn: ActiveTurn, request: TurnRequest,
                    timings: TurnTimings, transcribed: bool, start: TurnStart) -> str:
        await self._end_previous(previous)
        runner = self._runner(turn)
        brain_call = self._send_brain(turn, runner, request, timings, start)
        # The brain starts before transcript.final goes out (no reply.delta can precede it: the
        # call's events are read only in runner.run).
        try:
            if transcribed:
                # grpc.aio writes the brain's request from a task of its own (the call's request
                # iterator, or its unary request) once the loop turns: let it go first. Written
                # first, the event put a WebSocket write on the turn's path, and on shared cores
                # the client it woke ran ahead of the gateway, delaying the request.
                await asyncio.sleep(0)
                await self.emit(TranscriptFinal(request.turn_id, request.text))
        except BaseException:
            brain_call.cancel()  # interrupted before the turn could take the call
            raise
        try:
            await runner.run(request, timings, turn.spoken, turn.playout, brain_call, start.standby,
                             speak=not self.text_only)
        except asyncio.CancelledError:
            TURNS.labels("interrupted").inc()
            if timings.first_audio is not None:
                timings.observe(trace_id_hex())  # its latency was real even if the reply was cut short
            raise
        except TurnFailed as exc:
            turn.outcome = "error"
            TURNS.labels("error").inc()
            log.warning("turn failed", extra={"turn_id": request.turn_id, "stage": exc.stage,
                                              "code": exc.code.name, "detail": exc.details})
            await self.send_error("upstream_unavailable", f"the {UPSTREAM_NAMES[exc.stage]} is unavailable "
                                                          "right now")
            await self._speak_fallback(turn, runner, "unavailable", exc.stage)
            await self.emit(TurnOver(turn.turn_id, "error"))
            return "error"
        turn.outcome = "completed"
        TURNS.labels("completed").inc()
        await self.emit(TurnMetrics(request.turn_id, timings.observe(trace_id_hex())))
        await self.emit(TurnOver(turn.turn_id, "completed"))
        return "completed"

    def _send_brain(self, turn: ActiveTurn, runner: TurnRunner, request: TurnRequest, timings: TurnTimings,
                    start: TurnStart):
        """The turn's brain call, its request sent once the previous turn is over: its preemptive
        reply committed, or the request down the calls opened at the onset, or on a new call.
        The request reports what was heard of the last reply; this one's report goes with the
        next request, however it ends (a failed reply is reported too: as far as it was heard)."""
        request.previous_reply, self._reported = self.previous_reply, turn
        if start.early is not None:
            if start.standby is not None:
                start.standby.release_brain()
            return start.early.commit()
        return runner.start_brain(request, timings, start.standby)

    async def _end_previous(self, previous: ActiveTurn | None) -> None:
        if previous is not None and previous.audible(time.perf_counter()):
            await self._interrupt(previous)
        await cancel_task(previous.task if previous else None)

    async def _speak_fallback(self, turn: ActiveTurn, runner: TurnRunner, kind: str, failed: str) -> None:
        """After the error event: the fallback sentence, paced after whatever of the reply went out."""
        assert self.session is not None
        turn.playout.stop()  # what the failed reply left unsent is moot now
        turn.spoken.cut()  # and was never heard: the fallback's audio is none of the reply's words
        if self.text_only:
            return  # a session that asked for text gets no audio: the error event told it
        if self.fallback is not None:
            pcm, source = self.fallback.audio(kind, self.session.language)
            if self.fallback.sample_rate != self.output_rate:  # prepared at the gateway's rate
                pcm = float_to_pcm16(resample(pcm16_to_float(pcm), self.fallback.sample_rate,
                                              self.output_rate))
        else:
            pcm, source = chime(self.output_rate), "tone"
        FALLBACKS.labels(failed, source).inc()
        turn.playout = self._new_playout(turn.spoken)
        await runner.speak(pcm, turn.playout)

    def _start_fallback_turn(self, kind: str, failed: str) -> None:
        """A fallback with no turn around it (STT failed): a turn of its own, so that speech or
        a typed turn interrupts it like any reply."""
        previous = self.turn
        spoken = SpokenTracker(self.output_rate)
        turn = ActiveTurn("t_" + uuid.uuid4().hex[:12], "", False, spoken, self._new_playout(spoken))

        async def say() -> None:
            await self._end_previous(previous)
            await self._speak_fallback(turn, self._runner(turn), kind, failed)

        turn.task = asyncio.create_task(say())
        self.turn = turn
        self._became_busy()

    async def _interrupt(self, turn: ActiveTurn) -> None:
        """Stop the turn's audio now and remember what of it was heard."""
        if turn.interrupted:
            return
        turn.interrupted = True
        turn.playout.stop()
        turn.record = turn.report(time.perf_counter(), FRAME_MS)
        if turn.text:  # a fallback turn answers nothing: it leaves no record for the brain
            self._reported = turn
        if turn.announced:
            await self.emit(Interrupted(turn.turn_id))

    async def close(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        await self._prefiller.close()
        if self._early is not None:
            self._early.discard()
            self._early = None
        self._take_standby(None)
        self._barge_in.clear()
        self._end_utterance_spans("call_ended")
        if self.turn is not None:
            await cancel_task(self.turn.task)
        stt, self._stt = self._stt, None  # the link holds the conversation's methods: no cycle outlives it
        if stt is not None:
            await stt.close()


UPSTREAM_NAMES = {"brain": "assistant", "tts": "speech synthesis"}
