"""The speech input: the caller's audio to STT, and what STT hears back, as turns to start.

It owns the STT stream (``stt_link.py``: its merging and backoff), the calls opened at an
utterance's onset for its turn (``standby.py``), the preemptive reply started on a speculative
transcript (``preemptive.py``), and the utterance's trace. What it hears goes to the turn
driver (``turn_driver.py``): speech onsets and transcripts as barge-in input, finals as turns.
"""

from __future__ import annotations

import logging
import time
import uuid

import grpc
from opentelemetry import trace

from voicebot.common.telemetry import ids, outgoing_metadata, tracer
from voicebot.gateway.bargein import Action, has_words
from voicebot.gateway.call_state import CallState
from voicebot.gateway.capacity import Capacity
from voicebot.gateway.events import Speech, TranscriptPartial
from voicebot.gateway.metrics import RESUMED_TURNS
from voicebot.gateway.preemptive import EarlyReply
from voicebot.gateway.prefill import WordsPrefiller
from voicebot.gateway.standby import StandbyCalls
from voicebot.gateway.stt_link import Holds, SttLink
from voicebot.gateway.turn import TurnTimings
from voicebot.gateway.turn_driver import TurnDriver
from voicebot.v1 import brain_pb2, stt_pb2

log = logging.getLogger("voicebot.gateway.call")
TRACER = tracer("voicebot.gateway")


class SpeechInput:
    def __init__(self, call: CallState, turns: TurnDriver, holds: Holds,
                 capacity: Capacity | None = None) -> None:
        self.call = call
        self.turns = turns
        self.holds = holds  # how long audio may wait for an STT message (stt_link.py)
        self._capacity = capacity
        self.stt: SttLink | None = None
        self._pending_timings: TurnTimings | None = None
        # Root `turn` spans opened at speech onset, by utterance, until a turn takes them.
        self._utterance_spans: dict[int, trace.Span] = {}
        self._early: EarlyReply | None = None  # a reply started on the speculative transcript
        # The brain's and TTS's calls opened at an utterance's onset for its turn (standby.py).
        self._standby: tuple[int, StandbyCalls] | None = None
        self._prefiller = WordsPrefiller(call.upstreams)
        self._rate_limited_at = 0.0
        self.utterance_open = False  # SpeechStarted came and its final has not
        # The utterance whose words the client last saw as a partial transcript.
        self._partial_of: int | None = None

    # ---- audio ---------------------------------------------------------
    def audio_now(self, data: bytes) -> bool:
        """The common audio frame, handled without awaiting: queued for STT. False (nothing
        done) when the frame needs the awaited path: an error to answer, a barge-in to weigh."""
        call = self.call
        if (call.session is None or len(data) > call.settings.max_audio_frame_bytes
                or self.turns.barge_in.pending is not None):
            return False
        stt = self.stt
        if stt is not None and stt.would_drop():
            return False
        now = call.input_at = time.perf_counter()
        (stt or self._open_stt()).send(data, now)
        return True

    async def on_audio(self, data: bytes) -> None:
        call = self.call
        if call.session is None:
            await call.error("bad_request", "send session.start before audio", self._live_id())
            return
        if len(data) > call.settings.max_audio_frame_bytes:
            limit = call.settings.max_audio_frame_bytes
            await call.error("payload_too_large", f"audio frame over {limit} bytes", self._live_id())
            return
        now = call.input_at = time.perf_counter()
        stt = self.stt or self._open_stt()
        if not stt.send(data, now) and now - self._rate_limited_at >= 1.0:
            self._rate_limited_at = now  # said at most once a second, not once per dropped frame
            await call.error("rate_limited", "audio arrives faster than it can be processed", self._live_id())
        barge_in = self.turns.barge_in
        if barge_in.pending is not None:  # the per-frame path stays short otherwise
            await self.turns.apply(barge_in.audio(stt.received_ms, now))

    def _live_id(self) -> str | None:
        turn = self.turns.turn
        return turn.turn_id if turn is not None else None

    async def restart(self) -> None:
        """A new input rate or language: a new STT stream (its config is its first message); at
        the end of the call, none (the link holds this stage's methods: no cycle outlives it)."""
        stt, self.stt, self.call.wake_input = self.stt, None, None
        if stt is not None:
            await stt.close()

    # ---- STT -----------------------------------------------------------
    def _open_stt(self) -> SttLink:
        call = self.call
        assert call.session is not None
        config = stt_pb2.RecognitionConfig(session_id=call.session_id, language=call.session.language,
                                           sample_rate=call.session.sample_rate, interim_results=True,
                                           speculative_results=call.settings.preemptive,
                                           # STT sends a final it has at the endpoint inside the
                                           # EndOfUtterance: one message, not two (a gRPC stream's
                                           # second message waits for the first).
                                           final_with_end_of_utterance=True)
        self.stt = SttLink(call.upstreams.stt.StreamingRecognize, config,
                           on_event=self.on_stt_event, on_ended=self._on_stt_ended,
                           on_down=self._on_down, max_frames=call.settings.max_pending_audio_frames,
                           hold_ms=self.stt_hold_ms, loud_rms=self.holds.loud_rms,
                           speech_hold=lambda: self.utterance_open,
                           reconnected=lambda: call.upstreams.reconnected("stt"))
        call.wake_input = self.stt.wake
        return self.stt

    def stt_hold_ms(self) -> int:
        """How much audio may wait for one STT message now. While an utterance is open, its
        loud frames a little (the link sends a quiet one at once: the endpoint rides on the
        silence); none while a reply is being made and none of it was sent (speech then holds
        the reply back). While the reply plays, or nothing happens, only the next onset waits
        on it: a barge-in then pauses the playout that much later, which the caller does not
        hear (the client plays its lead either way, and the interrupt comes with the
        confirmation, counted in stream time)."""
        if self.utterance_open:
            # Only loud audio waits, and only when a quiet frame can end the wait.
            return self.holds.speech_ms if self.holds.loud_rms else 0
        turn = self.turns.turn
        if turn is not None and turn.audible(time.perf_counter()):
            return self.holds.playback_ms if turn.spoken.sent_ms > 0 else 0
        return self.holds.idle_ms

    async def _on_down(self, code: grpc.StatusCode, detail: str) -> None:
        """Told once per outage (the stream is retried with backoff meanwhile)."""
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            await self.call.error("bad_request", detail or "audio rejected", self._live_id())
            return
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            if self._capacity is not None:
                self._capacity.stt_refused()
            await self.call.error("overloaded", "speech recognition is at capacity; retrying",
                                  self._live_id())
        else:
            await self.call.error("upstream_unavailable", "speech recognition is unavailable; retrying",
                                  self._live_id())
        turn = self.turns.turn
        if turn is None or not turn.audible(time.perf_counter()):
            # At capacity the caller hears that the line is busy (fallback.py has the sentence),
            # not that they cannot be heard: calling again later is what helps them.
            full = code == grpc.StatusCode.RESOURCE_EXHAUSTED
            self.turns.start_fallback("busy" if full else "cant_hear", "stt")

    async def _on_stt_ended(self) -> None:
        """A stream ended: its utterances are gone (a new one numbers them afresh)."""
        self._end_utterance_spans("stt_stream_ended")
        self._take_standby(None)
        self._pending_timings = None
        self.utterance_open = False
        await self.turns.apply(self.turns.barge_in.stt_ended())

    async def on_stt_event(self, ev: stt_pb2.RecognizeEvent) -> None:
        kind = ev.WhichOneof("event")
        now = time.perf_counter()
        if kind == "speech_started":
            self.utterance_open = True
            self.call.wake()
            await self._speech(True, ev.speech_started.offset_ms)
            self._open_utterance_span(ev.utterance_index)
            self.open_standby(ev.utterance_index)
            await self.turns.apply(self.turns.speech_started(
                ev.utterance_index, ev.speech_started.offset_ms,
                received_ms=self.stt.received_ms if self.stt else 0, now=now))
        elif kind == "end_of_utterance":
            self.turns.barge_in.end_of_utterance(ev.utterance_index)
            speech_end = self.stt.arrival_of(ev.end_of_utterance.end_ms) if self.stt else now
            self._pending_timings = TurnTimings(speech_end=speech_end, end_of_utterance=now)
            await self._speech(False, ev.end_of_utterance.end_ms)
            if ev.end_of_utterance.HasField("final"):  # asked for in _open_stt
                await self._on_transcript(ev.utterance_index, ev.end_of_utterance.final, now)
        elif kind == "transcript":
            await self._on_transcript(ev.utterance_index, ev.transcript, now)

    async def _speech(self, started: bool, stream_ms: int) -> None:
        received = self.stt.received_ms if self.stt is not None else 0
        await self.call.emit(Speech(started, received - stream_ms))

    # ---- transcripts ---------------------------------------------------
    async def _on_transcript(self, utterance: int, transcript: stt_pb2.Transcript, now: float) -> None:
        text = transcript.text.strip()
        final = transcript.is_final
        self.utterance_open = self.utterance_open and not final
        decision = self.turns.barge_in.transcript(utterance, text, transcript.start_ms, transcript.end_ms,
                                                  final)
        await self.turns.apply(decision)
        if decision.action is Action.RESUME:
            self._take_standby(None)
            span = self._utterance_spans.pop(utterance, None)
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
                self._partial_of = utterance
                await self.call.emit(TranscriptPartial(text))
            return
        if has_words(text) and self._partial_of != utterance:
            # Words the recogniser had no time to show as they came (a short utterance, a busy
            # decoder) are shown once before the final: a client always sees partials first.
            await self.call.emit(TranscriptPartial(text))
        timings = self._pending_timings or TurnTimings(speech_end=now, end_of_utterance=now)
        self._pending_timings = None
        timings.final_transcript = now
        self._on_final(utterance, text, timings)

    def _on_final(self, utterance: int, text: str, timings: TurnTimings) -> None:
        turns = self.turns
        span = self._utterance_spans.pop(utterance, None)
        early, self._early = self._early, None
        if early is not None and not (has_words(text) and not turns.unanswered
                                      and early.matches(utterance, text)):
            log.info("preemptive reply discarded", extra={"early": early.request.text, "final": text,
                                                         "utterance": utterance,
                                                         "early_utterance": early.utterance})
            early.discard()  # the endpoint heard other words
            early = None
        standby = self._take_standby(utterance)
        if has_words(text):  # an empty (or punctuation-only) final never starts a turn
            unanswered, turns.unanswered = turns.unanswered, None
            if unanswered:
                RESUMED_TURNS.inc()
            turns.start(f"{unanswered} {text}" if unanswered else text, timings, transcribed=True,
                        span=span, early=early, standby=standby)
        elif turns.unanswered:
            # The speech that cut the question off was no words after all: ask it again.
            text, turns.unanswered = turns.unanswered, None
            turns.start(text, timings, transcribed=True, span=span, standby=standby)
        else:
            if standby is not None:  # no words: no turn, and the next utterance opens its own
                standby.cancel()
            if span is not None:
                span.set_attribute("voicebot.turn.outcome", "no_words")
                span.end()

    def _prefill_words(self, text: str) -> None:
        """An interim transcript while no reply is in the air: the brain caches the prompt a
        turn on these words would send (voicebot/gateway/prefill.py)."""
        call = self.call
        if not call.settings.prefill_words or not self.turns.may_start_on(has_words(text)):
            return
        unanswered = self.turns.unanswered
        words = f"{unanswered} {text}" if unanswered else text
        self._prefiller.send(brain_pb2.RespondRequest(
            session_id=call.session_id, user_id=call.user_id, text=words, language=call.session.language,
            previous_reply=self.turns.previous_reply, session_context=call.context))

    def _start_early(self, utterance: int, text: str) -> None:
        """A speculative transcript: start the brain on it now, unless a reply is still in the
        air (then this is a barge-in, and what the caller heard is not known yet)."""
        early = self._early
        if early is not None and early.matches(utterance, text):
            return  # the same words again: the reply already started on them
        if early is not None:
            early.discard()
            self._early = None
        call = self.call
        if (not call.settings.preemptive or self.turns.unanswered
                or not self.turns.may_start_on(has_words(text))):
            return
        request = brain_pb2.RespondRequest(
            session_id=call.session_id, turn_id="t_" + uuid.uuid4().hex[:12], user_id=call.user_id,
            text=text, language=call.session.language, previous_reply=self.turns.previous_reply,
            session_context=call.context)
        self._early = EarlyReply(call.upstreams.brain, request, utterance, call.settings.turn_timeout_s,
                                 outgoing_metadata())

    # ---- the utterance's trace and standby calls -----------------------
    def _open_utterance_span(self, utterance: int) -> None:
        """A person started speaking: this may become a turn. Its trace starts now, and STT
        is told the trace context so its span for this utterance joins the same trace."""
        span = TRACER.start_span("turn", attributes={**ids(self.call.session_id or ""),
                                                     "voicebot.turn.input": "speech"})
        self._utterance_spans[utterance] = span
        context = stt_pb2.UtteranceContext(utterance_index=utterance, traceparent=dict(
            outgoing_metadata(trace.set_span_in_context(span))).get("traceparent", ""))
        if self.stt is not None:
            self.stt.send_context(context)

    def _end_utterance_spans(self, outcome: str) -> None:
        for span in self._utterance_spans.values():
            span.set_attribute("voicebot.turn.outcome", outcome)
            span.end()
        self._utterance_spans.clear()

    def open_standby(self, utterance: int) -> None:
        """The calls this utterance's turn will need, opened now, under its trace (standby.py)."""
        self._take_standby(None)
        call = self.call
        if call.session_id is None:
            return
        span = self._utterance_spans.get(utterance)
        metadata = outgoing_metadata(trace.set_span_in_context(span) if span is not None else None)
        read_ahead = brain_pb2.Prepare(session_id=call.session_id, user_id=call.user_id) \
            if self.turns.history_settled() else None
        self._standby = (utterance, StandbyCalls(call.upstreams, call.settings.turn_timeout_s, metadata,
                                                 read_ahead=read_ahead))

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

    def drop_stale_read_ahead(self) -> None:
        """A typed turn during speech: the session read at the onset may be stale by its turn."""
        if self._standby is not None and self._standby[1].read_ahead:
            self._take_standby(None)

    async def close(self) -> None:
        await self._prefiller.close()
        if self._early is not None:
            self._early.discard()
            self._early = None
        self._take_standby(None)
        self._end_utterance_spans("call_ended")
