"""How the gateway process serves: the event loop.

uvloop runs the event loop in C; ``make bench-gateway`` measured less gateway CPU per audio
frame with it than with asyncio's (its former ``asyncio-loop`` variant), so it is used whenever
it is installed. uvicorn's WebSocket protocol pauses reading after every message and hands it
over through a queue; a variant that paused only on a full queue made no difference measurable
under uvloop, while handing audio frames to the call where they are read
(voicebot/gateway/ws_direct.py) did.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from voicebot.common import event_loop
from voicebot.common.event_loop import uvloop_available

__all__ = ["run", "uvloop_available"]


def run(main: Coroutine[Any, Any, None]) -> None:
    event_loop.run(main)
