"""What the stages of a conversation share: the session, its formats, and the outlet.

The conversation (``conversation.py``: the session) owns one; the speech input
(``speech_input.py``) and the turn driver (``turn_driver.py``) read it, so none of them holds
another's attributes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from voicebot.gateway.active_turn import Outlet
from voicebot.gateway.config import GatewaySettings
from voicebot.gateway.events import Error, Event
from voicebot.gateway.metrics import CLIENT_ERRORS
from voicebot.gateway.protocol import SessionStart
from voicebot.gateway.upstreams import Upstreams


@dataclass
class CallState:
    out: Outlet
    user_id: str
    settings: GatewaySettings
    upstreams: Upstreams
    session: SessionStart | None = None
    session_id: str | None = None
    # The call's metadata for the brain (a phone bridge's custom parameters), shown to the
    # model as data; never the user id, which comes from auth alone.
    context: dict[str, str] = field(default_factory=dict)
    # The rate of the audio sent to this client (a codec may fix its own).
    output_rate: int = 16000
    text_only: bool = False  # the session asked for text replies only: no TTS, no audio
    # When the client last sent anything (perf_counter), for GATEWAY_IDLE_TIMEOUT_S.
    input_at: float = field(default_factory=time.perf_counter)
    # Sends the audio held for STT now (the speech input's link, while it has one).
    wake_input: Callable[[], None] | None = None

    @property
    def open(self) -> bool:
        return self.session is not None and self.session_id is not None

    def wake(self) -> None:
        """Something started (speech, a turn): audio held for STT goes now, not after its hold."""
        if self.wake_input is not None:
            self.wake_input()

    async def emit(self, event: Event) -> None:
        await self.out.emit((event,))

    async def error(self, code: str, message: str, turn_id: str | None = None) -> None:
        CLIENT_ERRORS.labels(code).inc()
        await self.emit(Error(code, message, turn_id))
