"""The event loop a service runs on: uvloop (the loop in C) when it is installed.

``make bench-gateway`` measured less CPU per audio frame in the gateway with it, and a shorter
brain request -> first delta in the brain. ``loop="asyncio"``
forces asyncio's own loop (to compare, or to rule uvloop out).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def run(main: Coroutine[Any, Any, None], loop: str = "auto", setting: str = "LOOP") -> None:
    """Run ``main`` on the loop ``loop`` names: "auto" (uvloop when installed), "uvloop" (an
    error, naming ``setting``, when it is not installed) or "asyncio"."""
    if loop != "asyncio" and uvloop_available():
        import uvloop

        uvloop.run(main)
        return
    if loop == "uvloop":
        main.close()
        raise SystemExit(f"{setting}=uvloop but uvloop is not installed")
    asyncio.run(main)
