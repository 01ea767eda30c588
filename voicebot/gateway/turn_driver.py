"""The turn driver: a conversation's turns, from their start to what the caller heard of them.

It starts a turn (on a final transcript, a typed turn, or a fallback with no turn around it),
ends the one before it, carries out barge-in decisions (``bargein.py``: why it pauses first and
confirms later is explained there), and keeps what was heard of each reply for the next brain
request.

Speech that resumes before any of a reply was heard continues the same turn (``resume.py``).

A new turn always interrupts the one in flight and never replays it: its audio comes
from a new TTS call, and a turn's frames are checked under the send lock against its
``interrupted`` flag, so no frame of it follows its ``interrupt``. Every failure is heard: an
upstream that fails mid-turn gets an ``error`` event and then a fallback sentence on the same
turn (``fallback.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from opentelemetry import trace

from voicebot.common.telemetry import ids, record_content, trace_id_hex, tracer
from voicebot.gateway.active_turn import ActiveTurn, TurnChannel, TurnStart, WaitingTurn
from voicebot.gateway.bargein import IGNORE, Action, BargeInDetector, Decision, Pending, Rules
from voicebot.gateway.call_state import CallState
from voicebot.gateway.events import Interrupted, ReplyCancelled, TranscriptFinal, TurnMetrics, TurnOver
from voicebot.gateway.fallback import FallbackVoice, chime
from voicebot.gateway.metrics import (
    BARGE_IN_FALSE_STARTS,
    BARGE_IN_SECONDS,
    BARGE_INS,
    FALLBACKS,
    REPLIES_CANCELLED_UNHEARD,
    REPLIES_KEPT_UNHEARD,
    TURNS,
)
from voicebot.gateway.playout import FRAME_MS, MESSAGE_MS, Playout
from voicebot.gateway.preemptive import EarlyReply
from voicebot.gateway.resume import Onset, ResumePolicy
from voicebot.gateway.spoken import SpokenTracker
from voicebot.gateway.standby import StandbyCalls
from voicebot.gateway.turn import TurnFailed, TurnRequest, TurnRunner, TurnTimings, cancel_task
from voicebot.v1 import brain_pb2

log = logging.getLogger("voicebot.gateway.call")
TRACER = tracer("voicebot.gateway")
UPSTREAM_NAMES = {"brain": "assistant", "tts": "speech synthesis"}


class TurnDriver:
    """One session's turns and barge-ins."""

    def __init__(self, call: CallState, fallback: FallbackVoice | None) -> None:
        self.call = call
        self.fallback = fallback
        self.turn: ActiveTurn | None = None
        # The turn whose report (what was heard of it) the next brain request carries.
        self._reported: ActiveTurn | None = None
        # Turns recently played, by id: a late report of what was heard still reaches them.
        self._recent: dict[str, ActiveTurn] = {}
        rules = Rules(call.settings.barge_in_min_speech_ms, call.settings.barge_in_min_words_ms)
        self.barge_in = BargeInDetector(rules)
        # What the person said in a turn whose reply was cancelled before they heard any of it
        # (they went on speaking): it leads the next turn's text.
        self.unanswered: str | None = None
        self.resume = ResumePolicy(call.settings.resume_min_interval_s)
        self._waiting: WaitingTurn | None = None  # a turn waiting until that reply was heard

    @property
    def previous_reply(self) -> brain_pb2.SpokenPart | None:
        """The report of the last reply, made when a request takes it (its audio has played by
        then, or the turn was cut off and its record fixed)."""
        turn = self._reported
        return None if turn is None else turn.report(time.perf_counter(), FRAME_MS)

    def may_start_on(self, text_has_words: bool) -> bool:
        """Words the brain may work on before the endpoint: a session, words, and no reply still
        in the air (then it is a barge-in, and what the caller heard is not known yet)."""
        turn = self.turn
        return (text_has_words and self.call.open
                and (turn is None or (not turn.audible(time.perf_counter()) and turn.task.done())))

    def history_settled(self) -> bool:
        """No turn of this call can still be writing the session at the brain: the last one's
        brain call ended whole (the brain returns only after the turn's writes), or there was
        none. Then the brain may read the session for the next turn while the caller speaks."""
        last = self.turn
        return last is None or (last.timings is not None and last.timings.brain_done is not None)

    # ---- the client's reports ------------------------------------------
    def played(self, turn_id: str, played_ms: int) -> None:
        """The client is playing the live turn at ``played_ms``: a barge-in cuts the record there."""
        turn = self.turn
        if turn is not None and turn.turn_id == turn_id and not turn.interrupted:
            turn.played_ms, turn.played_at = played_ms, time.perf_counter()

    def truncated(self, turn_id: str, played_ms: int) -> bool:
        """The client stopped the turn's audio at ``played_ms`` (it cut playback itself, often after
        the gateway's own cut): the record of what was heard becomes that. False: no such turn."""
        turn = self._recent.get(turn_id)
        if turn is None:
            return False
        turn.played_ms, turn.played_at = played_ms, time.perf_counter()
        turn.played_stopped = True  # playback stopped there: no time is added to it
        if turn.record is not None:  # cut off already: the client's figure replaces the estimate
            turn.record = None
            turn.record = turn.report(time.perf_counter(), FRAME_MS)
        return True

    async def cancel(self) -> bool:
        """Stop the reply in progress, as a barge-in would; False: none is."""
        turn = self.turn
        if turn is None or turn.interrupted or not turn.audible(time.perf_counter()):
            return False
        await self.interrupt(turn)
        await cancel_task(turn.task)
        await self.call.emit(ReplyCancelled(turn.turn_id))
        return True

    # ---- barge-in ------------------------------------------------------
    async def apply(self, decision: Decision) -> None:
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
            self.resume.false_start()
            BARGE_IN_FALSE_STARTS.inc()
            log.info("barge-in false start", extra={"turn_id": pending.turn_id,
                                                    "utterance": pending.utterance,
                                                    "reason": decision.reason})
            if live:
                turn.playout.resume()  # the same turn's next frame: nothing stale, nothing replayed

    def speech_started(self, utterance: int, onset_ms: int, received_ms: int, now: float) -> Decision:
        """The caller began to speak: over a reply in the air, a possible barge-in, or (none of
        the reply heard yet) possibly the same turn going on."""
        turn = self.turn
        if turn is None or not turn.audible(now):
            return self.barge_in.speech_started(utterance, onset_ms, audible_turn=None,
                                                received_ms=received_ms, now=now)
        onset = self.resume.onset(turn.turn_id, utterance, spoken_turn=turn.transcribed,
                                  heard=turn.heard_any(now), may_write=turn.may_write, now=now)
        if onset is Onset.KEEP:
            REPLIES_KEPT_UNHEARD.inc()
            return IGNORE
        return self.barge_in.speech_started(utterance, onset_ms, audible_turn=turn.turn_id,
                                            received_ms=received_ms, now=now)

    async def _confirm_barge_in(self, turn: ActiveTurn, pending: Pending, reason: str) -> None:
        confirmed_at = time.perf_counter()
        resumed = self.resume.confirmed(turn.turn_id, pending.utterance, confirmed_at)
        if not resumed:
            BARGE_INS.inc()
        await self.interrupt(turn)
        interrupted_at = time.perf_counter()
        await cancel_task(turn.task)
        if resumed:
            # Not yet heard when the person went on: they were not done ("Actually, | make it
            # three"). The next turn answers both parts instead of the first part alone.
            REPLIES_CANCELLED_UNHEARD.inc()
            self.unanswered = turn.text
            log.info("reply cancelled unheard", extra={"turn_id": turn.turn_id, "reason": reason})
            return
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
        return Playout(spoken, FRAME_MS, self.call.settings.playback_lead_ms, message_ms=MESSAGE_MS)

    def _runner(self, turn: ActiveTurn) -> TurnRunner:
        return TurnRunner(self.call.upstreams, TurnChannel(self.call.out, turn, lambda t: self.turn is t),
                          self.call.settings.turn_timeout_s,
                          first_words=self.call.settings.reply_first_words)

    def start(self, text: str, timings: TurnTimings, transcribed: bool = False,
              span: trace.Span | None = None, early: EarlyReply | None = None,
              standby: StandbyCalls | None = None) -> None:
        """A turn on ``text``; it interrupts the one in flight, except a reply kept although
        speech resumed: a final waits until some of that reply was heard."""
        previous, now = self.turn, time.perf_counter()
        if self._waiting is not None:  # a later turn came first: it takes the waiting words
            waited, self._waiting = self._waiting, None
            text = waited.cancel() + " " + text if transcribed else text
        if (transcribed and previous is not None and self.resume.waits_for(previous.turn_id)
                and previous.audible(now) and not previous.heard_any(now)):
            self._waiting = WaitingTurn(text, timings, span, early, standby)
            self._waiting.task = asyncio.create_task(self._when_heard(previous))
            return
        self._start(text, timings, transcribed, span, early, standby)

    async def _when_heard(self, turn: ActiveTurn) -> None:
        """The waiting turn starts once some of the kept reply was heard, or it is over. (The
        estimate of what the client played moves with its clock: no event marks it.)"""
        while (self.turn is turn and turn.audible(time.perf_counter())  # noqa: ASYNC110
               and not turn.heard_any(time.perf_counter())):
            await asyncio.sleep(FRAME_MS / 1000)
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            self._start(waiting.text, waiting.timings, True, waiting.span, waiting.early, waiting.standby)

    def _start(self, text: str, timings: TurnTimings, transcribed: bool, span: trace.Span | None,
               early: EarlyReply | None, standby: StandbyCalls | None) -> None:
        call = self.call
        assert call.session is not None and call.session_id is not None
        previous = self.turn
        self.barge_in.clear()  # the new turn interrupts the old one anyway
        turn_id = early.turn_id if early is not None else "t_" + uuid.uuid4().hex[:12]
        spoken = SpokenTracker(call.output_rate)
        request = TurnRequest(call.session_id, call.user_id, turn_id, text, call.session.language,
                              call.output_rate, context=call.context)
        turn = ActiveTurn(turn_id, text, transcribed, spoken, self._new_playout(spoken), timings=timings,
                          delivered=[] if call.text_only else None, may_write=self._next_may_write())
        self._recent[turn_id] = turn
        while len(self._recent) > 4:  # a report comes for the last turn or two, never older ones
            self._recent.pop(next(iter(self._recent)))
        span = span or TRACER.start_span("turn", attributes={**ids(call.session_id),
                                                             "voicebot.turn.input": "text"})
        span.set_attributes(ids(call.session_id, turn_id))
        if record_content():  # what people said stays out of traces unless an operator opts in
            span.set_attribute("voicebot.turn.text", text)
        start = TurnStart(early, standby)
        turn.task = asyncio.create_task(self._traced_turn(span, previous, turn, request, timings,
                                                          transcribed, start))
        turn.task.add_done_callback(start.release)
        self.turn = turn
        self.call.wake()  # audio held for STT goes now: speech may barge in

    def _next_may_write(self) -> bool:
        """The next turn may carry out a write: the last reply asked for a yes (the brain writes
        only after one), or it came after such a turn and ended before the brain said."""
        last = self._reported
        if last is None:
            return False
        return last.dialog_state == "confirm" or (last.may_write and not last.dialog_state)

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
                await self.call.emit(TranscriptFinal(request.turn_id, request.text))
        except BaseException:
            brain_call.cancel()  # interrupted before the turn could take the call
            raise
        try:
            await runner.run(request, timings, turn.spoken, turn.playout, brain_call, start.standby,
                             speak=not self.call.text_only)
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
            await self.call.error("upstream_unavailable",
                                  f"the {UPSTREAM_NAMES[exc.stage]} is unavailable right now", turn.turn_id)
            await self._speak_fallback(turn, runner, "unavailable", exc.stage)
            await self.call.emit(TurnOver(turn.turn_id, "error"))
            return "error"
        finally:
            turn.dialog_state = runner.dialog_state  # however the turn ended: what the brain said
        turn.outcome = "completed"
        TURNS.labels("completed").inc()
        await self.call.emit(TurnMetrics(request.turn_id, timings.observe(trace_id_hex())))
        await self.call.emit(TurnOver(turn.turn_id, "completed"))
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
            await self.interrupt(previous)
        await cancel_task(previous.task if previous else None)

    async def _speak_fallback(self, turn: ActiveTurn, runner: TurnRunner, kind: str, failed: str) -> None:
        """After the error event: the fallback sentence, paced after whatever of the reply went out."""
        call = self.call
        assert call.session is not None
        turn.playout.stop()  # what the failed reply left unsent is moot now
        turn.spoken.cut()  # and was never heard: the fallback's audio is none of the reply's words
        if call.text_only:
            return  # a session that asked for text gets no audio: the error event told it
        if self.fallback is not None:
            pcm, source = self.fallback.audio(kind, call.session.language, call.output_rate)
        else:
            pcm, source = chime(call.output_rate), "tone"
        FALLBACKS.labels(failed, source).inc()
        turn.playout = self._new_playout(turn.spoken)
        await runner.speak(pcm, turn.playout)

    def start_fallback(self, kind: str, failed: str) -> None:
        """A fallback with no turn around it (STT failed): a turn of its own, so that speech or
        a typed turn interrupts it like any reply."""
        previous = self.turn
        spoken = SpokenTracker(self.call.output_rate)
        turn = ActiveTurn("t_" + uuid.uuid4().hex[:12], "", False, spoken, self._new_playout(spoken))

        async def say() -> None:
            await self._end_previous(previous)
            await self._speak_fallback(turn, self._runner(turn), kind, failed)

        turn.task = asyncio.create_task(say())
        self.turn = turn
        self.call.wake()  # audio held for STT goes now: speech may barge in

    async def interrupt(self, turn: ActiveTurn) -> None:
        """Stop the turn's audio now and remember what of it was heard."""
        if turn.interrupted:
            return
        turn.interrupted = True
        turn.playout.stop()
        turn.record = turn.report(time.perf_counter(), FRAME_MS)
        if turn.text:  # a fallback turn answers nothing: it leaves no record for the brain
            self._reported = turn
        if turn.announced:
            await self.call.emit(Interrupted(turn.turn_id))

    async def close(self) -> None:
        self.barge_in.clear()
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        if self.turn is not None:
            await cancel_task(self.turn.task)
