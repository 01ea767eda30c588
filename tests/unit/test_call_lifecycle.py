"""A call that ended is freed at once, by reference counting, not by the cycle collector.

The services raise the collector's thresholds (voicebot/common/gc_tuning.py), so a call left
in a reference cycle (the call holds its STT link, the link holds the call's methods) stayed
in memory until a rare full collection: ``make bench-gateway`` saw the gateway grow by ~28 MiB
with every 200 callers (132 -> 243 MiB over five rounds), flat once the call let go of its link.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

from tests.unit.test_bargein_logic import FakeBrain, FakeTts, make_call, until
from tests.unit.test_gateway_standby import say

SILENCE = bytes(640)  # 20 ms of 16 kHz PCM16


async def a_call_that_took_a_turn_and_ended() -> weakref.ref:
    call, ws = make_call(FakeBrain(), FakeTts())
    await call.speech.on_audio(SILENCE)  # the STT link opens with the first audio
    await say(call, 0, "When do you open?")
    await until(lambda: "turn.metrics" in ws.kinds())
    await call.close()
    await asyncio.sleep(0.05)  # the call's tasks finish ending
    return weakref.ref(call)


async def test_an_ended_call_is_freed_without_the_cycle_collector():
    gc.collect()
    gc.disable()
    try:
        ended = await a_call_that_took_a_turn_and_ended()
        assert ended() is None, [type(r).__qualname__ for r in gc.get_referrers(ended())]
    finally:
        gc.enable()
