"""One StreamingRecognize call without the gRPC: audio in, RecognizeEvents out.

Three things happen per stream:

- ``feed`` (the caller's task) runs the VAD; ``SpeechStarted`` and
  ``EndOfUtterance`` are queued at once, ended utterances go to the finals task.
- The partials task keeps at most one decode of the open utterance in the
  pool. The job reads the utterance's audio only when a worker takes it, so
  the newest audio wins and stale partials are never queued. It runs every
  ``partial_interval`` frames of new speech (when interim results are on), and
  once speech pauses for ``speculative_silence`` frames (always): that
  speculative decode usually holds exactly the audio the final needs, and it
  runs while the endpointer is still waiting out the silence. With
  ``speculative_results`` its text is sent too (``Transcript.speculative``), so
  the gateway can start the reply before the endpoint.
- The finals task answers each ended utterance in order: with the text of a
  finished decode that already covered it, by awaiting the running decode
  that covers it, or else with a fresh decode ahead of every partial. With
  ``final_with_end_of_utterance``, a final already known as the utterance
  ends (a finished decode covered it, and no earlier final is still owed)
  goes inside the ``EndOfUtterance`` itself: one message at the endpoint.

With an end-of-turn model, a longer pause (``Paused``) also hands the utterance so far to
the model on its own thread; feeding goes on meanwhile. A "finished" verdict for a pause the
caller has not broken ends the utterance at once (reason "model"); otherwise the endpointer
waits for more speech or its longer limit. The reply side needs nothing new: the speculative
decode above already ran at the pause, and the endpoint only comes sooner.

Queues are bounded: a reader that does not keep up blocks ``feed`` (and so,
through gRPC flow control, its own client) and loses partials, never finals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import numpy as np

from voicebot.stt.engine import DraftDiscarded
from voicebot.stt.metrics import ENDPOINT_TO_FINAL_SECONDS, ENDPOINTS_TOTAL, FINALS_TOTAL, PARTIALS_TOTAL
from voicebot.stt.recognizer import (
    FINAL,
    PARTIAL,
    SPECULATIVE,
    DecodeJob,
    DecodePool,
    Ended,
    Paused,
    Segment,
    Started,
    StreamRecognizer,
)
from voicebot.stt.turn_model import WINDOW_SAMPLES, TurnModelBusy, TurnScorer, Verdict
from voicebot.stt.turn_text import unfinished
from voicebot.v1 import stt_pb2

log = logging.getLogger("stt")

async def _none() -> None:
    return None


EVENT_BUFFER = 64
_DONE = object()
# EndOfUtterance.reason -> voicebot_stt_endpoints_total's label ("silence" is the fixed timer).
ENDPOINT_LABEL = {"silence": "timer"}


@dataclass(frozen=True)
class StreamOptions:
    language: str
    session_id: str = ""
    interim_results: bool = False
    speculative_results: bool = False  # send the decode made at a pause (a reply may start on it)
    partial_interval_frames: int = 12  # ~400 ms of new speech
    speculative_silence_frames: int = 2  # ~64 ms of pause
    # A final known at the endpoint rides in the EndOfUtterance (EndOfUtterance.final).
    final_with_end_of_utterance: bool = False
    # The end-of-turn model's probability at or above which a pause ends the turn
    # (None: no model for this stream, the fixed silence ends it).
    turn_threshold: float | None = None
    # Also read the decode made at the pause: words that go on ("my name is...") hold the turn.
    turn_text: bool = False
    # The silence the model hears after the last speech, whenever it is asked (32 ms frames).
    turn_tail_frames: int = 5


class RecognitionStream:
    def __init__(self, recognizer: StreamRecognizer, pool: DecodePool, options: StreamOptions,
                 turn: TurnScorer | None = None) -> None:
        self._recognizer = recognizer
        self._pool = pool
        self._options = options
        self._turn = turn if options.turn_threshold is not None else None
        self._judging: asyncio.Task | None = None  # the model's verdict on the latest pause
        self.verdicts: dict[int, Verdict] = {}  # the latest verdict per utterance (for its span)
        self._decoded = asyncio.Condition()  # a partial or speculative decode landed
        # Held while the recognizer changes state and its events are queued, so an end the
        # model decides and the audio's own events go out in the order they happened.
        self._decide = asyncio.Lock()
        self._events: asyncio.Queue = asyncio.Queue(maxsize=EVENT_BUFFER)
        self._ended: asyncio.Queue = asyncio.Queue(maxsize=2)
        # Utterance whose SpeechStarted went out and whose EndOfUtterance did not yet.
        self._open: int | None = None
        self._wake = asyncio.Event()
        self._want: int | None = None  # priority of the partial decode asked for
        self._job: DecodeJob | None = None  # this stream's partial decode in the pool
        self._periodic_from = 0  # speech end frame of the last periodic ask
        self._speculated_end = -1  # speech end frame the last speculative ask was for
        self._latest: dict[int, tuple[Segment, str]] = {}  # newest decode per utterance
        self._partial_text = ""
        self._finals_owed = 0  # ended utterances handed to the finals task, not yet answered
        self._tasks = [
            asyncio.create_task(self._run_finals()),
            asyncio.create_task(self._run_partials()),
        ]

    # ---- input -----------------------------------------------------------
    async def feed(self, pcm16: bytes) -> None:
        async with self._decide:
            for event in self._recognizer.feed(pcm16):
                await self._publish(event)
        self._ask_for_partial()

    async def finish(self) -> None:
        """The client half-closed: close an open utterance; events end after its final."""
        async with self._decide:
            self._stop_judging()
            for event in self._recognizer.finish():
                await self._publish(event)
        await self._ended.put(_DONE)

    def fail(self, error: BaseException) -> None:
        """End the call with ``error``; events not yet sent are moot."""
        while not self._events.empty():
            self._events.get_nowait()
        self._events.put_nowait(error)

    # ---- output ----------------------------------------------------------
    async def events(self) -> AsyncIterator[stt_pb2.RecognizeEvent]:
        while (item := await self._events.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item

    async def close(self) -> None:
        """Stop both tasks; their queued decodes are dropped before they run."""
        self._set_open(None)
        self._stop_judging()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ---- VAD decisions ---------------------------------------------------
    def _set_open(self, utterance: int | None) -> None:
        # The pool counts speaking streams to share partial decodes fairly.
        self._pool.speaking += (utterance is not None) - (self._open is not None)
        self._open = utterance

    async def _publish(self, event: Started | Ended | Paused) -> None:
        if isinstance(event, Paused):
            self._judge(event)
        elif isinstance(event, Started):
            self._set_open(event.utterance)
            self._periodic_from = self._recognizer.start_frame
            self._partial_text = ""
            await self._events.put(self._event(
                event.utterance, speech_started=stt_pb2.SpeechStarted(offset_ms=event.offset_ms)))
        else:
            self._set_open(None)
            self._stop_judging()  # a verdict still out is about an utterance that has ended
            ENDPOINTS_TOTAL.labels(ENDPOINT_LABEL.get(event.reason, event.reason)).inc()
            segment = event.segment
            end = stt_pb2.EndOfUtterance(end_ms=segment.end_ms, reason=event.reason)
            # Finals go out in order: only with none owed may this one skip the finals task.
            known = None
            if self._options.final_with_end_of_utterance and not self._finals_owed:
                known = self._reused_text(segment)
            if known is not None:
                end.final.CopyFrom(self._transcript_of(segment, known, final=True))
                ENDPOINT_TO_FINAL_SECONDS.observe(0.0)
            await self._events.put(self._event(event.utterance, end_of_utterance=end))
            if known is None:
                self._finals_owed += 1
                await self._ended.put((event, time.perf_counter()))

    def _event(self, utterance: int, **event) -> stt_pb2.RecognizeEvent:
        return stt_pb2.RecognizeEvent(session_id=self._options.session_id, utterance_index=utterance, **event)

    def _transcript(self, segment: Segment, text: str, final: bool) -> stt_pb2.RecognizeEvent:
        return self._event(segment.utterance, transcript=self._transcript_of(segment, text, final))

    def _transcript_of(self, segment: Segment, text: str, final: bool) -> stt_pb2.Transcript:
        return stt_pb2.Transcript(text=text, is_final=final, start_ms=segment.start_ms,
                                  end_ms=segment.end_ms, language=self._options.language)

    # ---- end of turn -----------------------------------------------------
    def _judge(self, paused: Paused) -> None:
        """Ask the model about this pause; a verdict on an earlier pause is moot now."""
        if self._options.turn_threshold is None:
            return
        self._stop_judging()
        audio = None
        if self._turn is not None:
            end = paused.pause.speech_end + self._options.turn_tail_frames
            audio = self._recognizer.turn_audio(WINDOW_SAMPLES, end)
        self._judging = asyncio.create_task(self._verdict(paused, audio))

    def _stop_judging(self) -> None:
        if self._judging is not None and self._judging is not asyncio.current_task():
            self._judging.cancel()
        self._judging = None

    async def _verdict(self, paused: Paused, audio: np.ndarray | None) -> None:
        try:
            verdict = await self._judge_pause(paused, audio)
        except asyncio.CancelledError:
            raise
        except TurnModelBusy:
            verdict = None  # the model's queue was full and there are no words: the timer
        except Exception:
            log.warning("end-of-turn model failed; this utterance ends on the silence timer", exc_info=True)
            verdict = None
        if verdict is not None:
            self.verdicts[paused.utterance] = verdict
            for old in [u for u in self.verdicts if u < paused.utterance - 2]:
                del self.verdicts[old]  # utterances whose span never asked
            if not (verdict.finished or verdict.words_finished):
                return  # not finished: more speech, or the endpointer's limit, ends it
        async with self._decide:
            if verdict is None:
                events = self._recognizer.use_timer(paused.utterance)
            elif verdict.finished:
                events = self._recognizer.end_turn(paused)
            else:  # the words are done, the model unsure: a shorter wait (endpointer.py)
                events = self._recognizer.words_done(paused)
            for event in events:
                await self._publish(event)

    async def _judge_pause(self, paused: Paused, audio: np.ndarray | None) -> Verdict:
        """The audio model's probability and the pause's words, both at once: the words come
        from the speculative decode, which the final needs anyway."""
        assert self._options.turn_threshold is not None
        score = self._score(audio) if self._turn is not None and audio is not None else None
        words = self._pause_words(paused) if self._options.turn_text else None
        verdict, text = await asyncio.gather(score or _none(), words or _none())
        verdict = verdict or Verdict(1.0, 0.0, 0.0)  # words alone (STT_TURN_MODEL=text)
        if verdict.model_busy and text is None:
            raise TurnModelBusy("no words to judge the pause by")  # the silence timer
        held = text is not None and unfinished(text, self._options.language)
        return replace(verdict, finished=verdict.probability >= self._options.turn_threshold and not held,
                       words_unfinished=held, words_finished=bool(text and text.strip()) and not held)

    async def _score(self, audio: np.ndarray) -> Verdict:
        """The model's verdict; with its queue full, an unsure one: the words decide alone, a
        finished sentence after the shorter wait, one that goes on at the limit."""
        assert self._turn is not None
        try:
            return await self._turn.score(audio)
        except TurnModelBusy:
            return Verdict(0.0, 0.0, 0.0, model_busy=True)

    async def _pause_words(self, paused: Paused) -> str:
        """The text of the decode that ends where this pause began (waiting for it if need be)."""
        def ready() -> bool:
            latest = self._latest.get(paused.utterance)
            return latest is not None and latest[0].speech_end_frame == paused.pause.speech_end

        async with self._decoded:
            await self._decoded.wait_for(ready)
        return self._latest[paused.utterance][1]

    # ---- partials --------------------------------------------------------
    def _ask_for_partial(self) -> None:
        r, o = self._recognizer, self._options
        if not r.in_speech or r.utterance_index != self._open:
            return
        end = r.speech_end_frame
        if r.silence_frames >= o.speculative_silence_frames and end != self._speculated_end:
            self._speculated_end = end
            self._want_decode(SPECULATIVE)
        elif (o.interim_results and r.silence_frames == 0
              and end - self._periodic_from >= o.partial_interval_frames * self._pool.partial_share()):
            self._periodic_from = end
            self._want_decode(PARTIAL)

    def _want_decode(self, priority: int) -> None:
        job = self._job
        if job is not None and not job.started and not job.future.done():
            # Already waiting for a worker, and it will read the newest audio then.
            self._pool.raise_priority(job, priority)
            return
        self._want = priority if self._want is None else min(self._want, priority)
        self._wake.set()

    async def _run_partials(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            priority, self._want = self._want, None
            if priority is None:
                continue
            self._job = self._pool.submit(self._partial_segment, self._options.language, priority)
            try:
                result = await self._job.future
            except asyncio.CancelledError:
                raise
            except DraftDiscarded:
                continue  # not kept either, so the final never reuses it
            except Exception:
                # The final for this utterance will try again and report a real failure.
                log.warning("partial decode failed", exc_info=True)
                continue
            finally:
                self._job = None
            if result is not None:
                self._on_partial(*result, speculative=priority == SPECULATIVE)

    def _partial_segment(self) -> Segment | None:
        """Called when a worker is free: the newest audio, unless it was decoded already."""
        segment = self._recognizer.snapshot()
        if segment is None or segment.utterance != self._open:
            return None
        latest = self._latest.get(segment.utterance)
        if latest is not None and latest[0].covers(segment):
            return None
        self._periodic_from = max(self._periodic_from, segment.speech_end_frame)
        return segment

    def _on_partial(self, segment: Segment, text: str, speculative: bool = False) -> None:
        self._latest[segment.utterance] = (segment, text)
        asyncio.get_running_loop().create_task(self._notify_decoded())
        if speculative and self._options.speculative_results and text and segment.utterance == self._open:
            # The words up to this pause: the final reuses this decode when speech does not go on.
            with contextlib.suppress(asyncio.QueueFull):
                event = self._transcript(segment, text, final=False)
                event.transcript.speculative = True
                self._events.put_nowait(event)
        if not self._options.interim_results or segment.utterance != self._open:
            return  # a speculative decode only, or the utterance already ended
        if not text or text == self._partial_text:
            return
        with contextlib.suppress(asyncio.QueueFull):  # a slow reader loses partials, not finals
            self._events.put_nowait(self._transcript(segment, text, final=False))
            self._partial_text = text
            PARTIALS_TOTAL.inc()

    async def _notify_decoded(self) -> None:
        async with self._decoded:
            self._decoded.notify_all()

    # ---- finals ----------------------------------------------------------
    async def _run_finals(self) -> None:
        try:
            while (item := await self._ended.get()) is not _DONE:
                ended, decided_at = item
                text = await self._final_text(ended.segment)
                await self._events.put(self._transcript(ended.segment, text, final=True))
                self._finals_owed -= 1
                ENDPOINT_TO_FINAL_SECONDS.observe(time.perf_counter() - decided_at)
            await self._events.put(_DONE)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("stt final decode failed")
            self.fail(exc)

    def _reused_text(self, segment: Segment) -> str | None:
        """The text of a finished decode that covered the ended ``segment`` (None: there is
        none); the utterance's decodes and older ones are forgotten either way."""
        latest = self._latest.pop(segment.utterance, None)
        for old in [u for u in self._latest if u < segment.utterance]:
            del self._latest[old]
        if latest is None or not latest[0].covers(segment):
            return None
        FINALS_TOTAL.labels("reused").inc()
        return latest[1]

    async def _final_text(self, segment: Segment) -> str:
        reused = self._reused_text(segment)
        if reused is not None:
            return reused
        job, result = self._job, None
        if job is not None and job.segment is not None and job.segment.covers(segment):
            # Shielded: the partials task awaits the same future. If it failed, decode afresh.
            with contextlib.suppress(Exception):
                result = await asyncio.shield(job.future)
            if result is not None:
                FINALS_TOTAL.labels("awaited").inc()
                return result[1]
        FINALS_TOTAL.labels("decoded").inc()
        return await self._pool.decode(segment, self._options.language, FINAL)
