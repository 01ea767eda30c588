"""A turn's audio on its way to the client, paced at real time plus a small lead.

TTS makes audio much faster than real time. Sending it all at once would
fill the client's buffer with seconds of speech that an ``interrupt`` then
has to chase, and would make "what was heard" a guess. So frames leave only
while the client holds less than ``lead_ms`` of unplayed audio (by the
``SpokenTracker``'s model of the client's playback): enough to ride out
network jitter, little enough that stopping the sender stops the voice soon.

``pause`` holds the frames (a possible barge-in is being confirmed; the
client keeps playing its lead meanwhile), ``resume`` sends them on from
where they stopped, ``stop`` drops them (the turn was interrupted).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable

from gateway.turn import SpokenTracker

# Sends one frame; False when it was not sent because the playout is paused.
SendFrame = Callable[[bytes], Awaitable[bool]]


class Playout:
    def __init__(self, spoken: SpokenTracker, frame_ms: int, lead_ms: int,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.spoken = spoken
        self._clock, self._sleep = clock, sleep
        self.frame_bytes = max(2, spoken.sample_rate * frame_ms // 1000 * 2)
        self.lead_ms = lead_ms
        self.last_sent_at: float | None = None
        self.stopped = False
        self._frames: deque[bytes] = deque()
        self._more = asyncio.Event()
        self._go = asyncio.Event()
        self._go.set()
        self._ended = False

    # ---- producer side (TTS) -------------------------------------------
    def feed(self, pcm: bytes) -> None:
        if self.stopped:
            return
        for start in range(0, len(pcm), self.frame_bytes):
            self._frames.append(pcm[start:start + self.frame_bytes])
        self._more.set()

    def end(self) -> None:
        """No more audio for this turn."""
        self._ended = True
        self._more.set()

    # ---- control (barge-in) --------------------------------------------
    @property
    def paused(self) -> bool:
        return not self._go.is_set()

    def pause(self) -> None:
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    def stop(self) -> None:
        self.stopped = True
        self._frames.clear()
        self._more.set()
        self._go.set()

    # ---- the sender -----------------------------------------------------
    async def run(self, send: SendFrame) -> None:
        """Send every frame at its time; returns when all are sent or the playout is stopped."""
        while not self.stopped:
            if not self._frames:
                if self._ended:
                    return
                self._more.clear()
                await self._more.wait()
                continue
            await self._go.wait()
            ahead = self.spoken.buffered_ms(self._clock()) - self.lead_ms
            if ahead > 0:
                await self._sleep(ahead / 1000)
                continue  # paused or stopped meanwhile? look again
            frame = self._frames.popleft()
            if await send(frame):
                now = self._clock()
                self.spoken.audio_sent(len(frame), now)
                self.last_sent_at = now
            elif not self.stopped:
                self._frames.appendleft(frame)  # paused while it waited to go: it goes first later
