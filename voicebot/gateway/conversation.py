"""A session's conversation: the session, and its two stages; no socket, no wire format.

Inputs come decoded (``events.py``: audio, a typed turn, a playback report...) and events go
out through an ``Outlet`` (the transport, which encodes them with the session's codec). Inputs
are handled one at a time; STT events and turns run in their own tasks. Three units, each
readable alone, sharing one ``CallState`` (``call_state.py``):

- the **session** (this module): its start or resume, its formats, typed turns and their rate,
  the idle timer;
- the **speech input** (``speech_input.py``): the STT stream (and the fallback turn when it
  fails), the calls opened at an onset, transcripts;
- the **turn driver** (``turn_driver.py``): turns, barge-in, playout, what was heard, fallbacks.

The decisions live in pure modules: barge-in in ``bargein.py``, what was heard in
``spoken.py``, the STT stream's merging and backoff in ``stt_link.py``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import replace
from typing import Any

from redis.exceptions import OutOfMemoryError, RedisError

from voicebot.common.metrics import REDIS_ERRORS
from voicebot.gateway.active_turn import ActiveTurn, Outlet
from voicebot.gateway.admission import TokenBucket
from voicebot.gateway.call_state import CallState
from voicebot.gateway.capacity import Capacity
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import (
    Audio,
    Cancel,
    Commit,
    Configure,
    End,
    Event,
    Hangup,
    Input,
    Played,
    Say,
    SessionStarted,
    Start,
    Truncated,
)
from voicebot.gateway.fallback import FallbackVoice
from voicebot.gateway.metrics import IDLE_CLOSED, TURNS_RATE_LIMITED
from voicebot.gateway.protocol import ProtocolError, SessionStart
from voicebot.gateway.sessions import SessionRegistry
from voicebot.gateway.speech_input import SpeechInput
from voicebot.gateway.stt_link import DEFAULT_HOLDS, Holds
from voicebot.gateway.turn import TurnTimings
from voicebot.gateway.turn_driver import TurnDriver
from voicebot.gateway.upstreams import Upstreams
from voicebot.v1 import brain_pb2

log = logging.getLogger("voicebot.gateway.call")
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
        self.call = CallState(out, user_id, settings, upstreams, output_rate=settings.output_sample_rate)
        self.sessions = sessions
        self.fallback = fallback
        self.capacity = capacity
        self.turns = TurnDriver(self.call, fallback)
        self.speech = SpeechInput(self.call, self.turns, holds, capacity)
        # The frame sink (ws_direct.py) is the speech input's own method: no call in between.
        self.audio_now = self.speech.audio_now
        self._typed_turns = TokenBucket(settings.turn_rate_per_s, settings.turn_burst)
        self._idle_timer: asyncio.TimerHandle | None = None

    # The session's state, as the transport and the tests read and set it.
    out = property(lambda self: self.call.out)
    user_id = property(lambda self: self.call.user_id)
    settings = property(lambda self: self.call.settings)
    upstreams = property(lambda self: self.call.upstreams)
    session = property(lambda self: self.call.session, lambda self, v: setattr(self.call, "session", v))
    session_id = property(lambda self: self.call.session_id,
                          lambda self, v: setattr(self.call, "session_id", v))
    session_context = property(lambda self: self.call.context,
                               lambda self, v: setattr(self.call, "context", v))
    output_rate = property(lambda self: self.call.output_rate,
                           lambda self, v: setattr(self.call, "output_rate", v))
    text_only = property(lambda self: self.call.text_only,
                         lambda self, v: setattr(self.call, "text_only", v))

    @property
    def turn(self) -> ActiveTurn | None:
        return self.turns.turn

    @property
    def previous_reply(self) -> brain_pb2.SpokenPart | None:
        return self.turns.previous_reply

    # ---- sending -------------------------------------------------------
    async def emit(self, event: Event) -> None:
        await self.call.emit(event)

    async def send_error(self, code: str, message: str, in_turn: bool = True) -> None:
        """An error event; ``in_turn``: it fails the live turn (a codec may end that turn's reply
        as failed), not so a refusal of new input."""
        turn = self.turns.turn
        await self.call.error(code, message, turn.turn_id if in_turn and turn is not None else None)

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
                self.call.context = dict(item.context)
            await self.start_session(item.session)
        elif isinstance(item, Audio):
            await self.speech.on_audio(item.pcm)
        elif self.session is None:
            raise ProtocolError("bad_request", "send session.start first")
        elif isinstance(item, End):
            return Outcome.END
        elif isinstance(item, Say):
            if await self.typed_turn_allowed():
                self.turns.unanswered = None
                self.start_turn(item.text, TurnTimings())
        elif isinstance(item, Played):
            self.turns.played(item.turn_id, item.played_ms)
        elif isinstance(item, Truncated):
            return Outcome.DONE if self.turns.truncated(item.turn_id, item.played_ms) else Outcome.REFUSED
        elif isinstance(item, Configure):
            await self._configure(item)
        elif isinstance(item, Cancel):
            return Outcome.DONE if await self.turns.cancel() else Outcome.REFUSED
        elif isinstance(item, Commit):
            return await self._commit(item.silence_ms)
        return Outcome.DONE

    def start_turn(self, text: str, timings: TurnTimings, **how: Any) -> None:
        """A turn on ``text`` that STT did not hand over with its calls (a typed turn): a session
        read at an onset may be older than the turn, so it is dropped first."""
        if how.get("standby") is None:
            self.speech.drop_stale_read_ahead()
        self.turns.start(text, timings, **how)

    async def _configure(self, config: Configure) -> None:
        """New formats or language: a new input rate or language needs a new STT stream."""
        assert self.session is not None
        language = self._spoken(config.language)
        if language != config.language:
            await self._unsupported(config.language, language)
        if (config.input_rate, language) != (self.session.sample_rate, self.session.language):
            self.session = SessionStart(self.session_id, language, config.input_rate)
            await self.speech.restart()
            if self.fallback is not None:
                self.fallback.warm(language)
        self.output_rate, self.text_only = config.output_rate, config.text_only

    async def _commit(self, silence_ms: int) -> Outcome:
        """Close the open utterance now by giving the endpointer the silence it waits for."""
        if not self.speech.utterance_open or self.session is None:
            return Outcome.REFUSED
        silence = bytes(2 * self.session.sample_rate * silence_ms // 1000)
        step = self.settings.max_audio_frame_bytes // 2 * 2
        for start in range(0, len(silence), step):
            await self.speech.on_audio(silence[start:start + step])
        return Outcome.DONE

    def touch(self) -> None:
        """Something came from the client (for GATEWAY_IDLE_TIMEOUT_S)."""
        self.call.input_at = time.perf_counter()

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
        turn = self.turns.turn
        if turn is not None and turn.audible(now):
            self.call.input_at = now  # a reply being made or heard is not an idle line
        idle_s = now - self.call.input_at
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

    # ---- the session ---------------------------------------------------
    async def start_session(self, start: SessionStart) -> None:
        if self.session is not None:
            raise ProtocolError("bad_request", "session already started")
        session_id = await self._open_session(start.session_id)
        language = self._spoken(start.language)
        self.session, self.session_id = replace(start, language=language), session_id
        self.text_only = start.output == "text"
        if self.fallback is not None and not self.text_only:
            self.fallback.warm(language)
        await self.emit(SessionStarted(session_id, self.output_rate, start.output))
        if language != start.language:
            await self._unsupported(start.language, language)

    def _spoken(self, asked: str) -> str:
        """The session's language: the one asked for where the business speaks it (a region such
        as "en-GB" is its language's), otherwise the business's first."""
        languages = self.settings.language_codes
        return asked if asked.lower().replace("_", "-").split("-")[0] in languages else languages[0]

    async def _unsupported(self, asked: str, language: str) -> None:
        spoken = ", ".join(self.settings.language_codes)
        await self.send_error("unsupported_language", f"language {asked!r} is not one this business speaks "
                                                      f"({spoken}); the session goes on in {language!r}",
                              in_turn=False)

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

    async def close(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        await self.speech.close()
        await self.turns.close()
        await self.speech.restart()
