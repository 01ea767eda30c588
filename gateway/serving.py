"""How the gateway process serves: the event loop.

uvloop runs the event loop in C; ``make bench-gateway`` measured 5-13 % less gateway CPU per
audio frame with it (README, "Gateway capacity"), so it is used when installed. uvicorn's
default WebSocket protocol pauses reading after every message; a variant that paused only on
a full queue made no difference measurable under uvloop, so the default stays.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def run(main: Coroutine[Any, Any, None], loop: str) -> None:
    if loop != "asyncio" and uvloop_available():
        import uvloop

        uvloop.run(main)
        return
    if loop == "uvloop":
        raise SystemExit("GATEWAY_LOOP=uvloop but uvloop is not installed")
    asyncio.run(main)
