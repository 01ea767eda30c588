"""A turn's audio on its way to the client, paced at real time plus a small lead.

TTS makes audio much faster than real time. Sending it all at once would
fill the client's buffer with seconds of speech that an ``interrupt`` then
has to chase, and would make "what was heard" a guess. So frames leave only
while the client holds less than ``lead_ms`` of unplayed audio (by the
``SpokenTracker``'s model of the client's playback): enough to ride out
network jitter, little enough that stopping the sender stops the voice soon.

Frames go out in messages of up to ``message_ms``: the lead at the start of a reply leaves
at once anyway, and in the steady state a full message waits until the client
holds ``message_ms - frame_ms`` less than the lead, so the most the client ever holds
(``lead_ms`` plus one frame, what may still play after a pause) is what it was with one
message per frame. Fewer, larger messages; no barge-in time.

``pause`` holds the frames (a possible barge-in is being confirmed; the
client keeps playing its lead meanwhile), ``resume`` sends them on from
where they stopped, ``stop`` drops them (the turn was interrupted).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable

from voicebot.gateway.spoken import SpokenTracker

SLACK_MS = 1e-3
# Reply audio is cut into frames of this length (the unit of pacing, and of the slack allowed
# when a whole reply counts as heard) and sent in messages of up to MESSAGE_MS: one message per
# frame (the bench's former ``messages-per-frame`` variant) cost a WebSocket write per 20 ms for
# no gain in barge-in time (see above).
FRAME_MS = 20
MESSAGE_MS = 100
# Sends one frame; False when it was not sent because the playout is paused.
SendFrame = Callable[[bytes], Awaitable[bool]]


class Playout:
    def __init__(self, spoken: SpokenTracker, frame_ms: int, lead_ms: int,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 message_ms: int | None = None) -> None:
        self.spoken = spoken
        self._clock, self._sleep = clock, sleep
        self.frame_bytes = max(2, spoken.sample_rate * frame_ms // 1000 * 2)
        self.frame_ms = frame_ms
        self.message_frames = max(1, (message_ms or frame_ms) // max(1, frame_ms))
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
            count, wait_ms = self._next_message(self.spoken.buffered_ms(self._clock()))
            if wait_ms > 0:
                await self._sleep(wait_ms / 1000)
                continue  # paused or stopped meanwhile? look again
            frames = [self._frames.popleft() for _ in range(count)]
            message = frames[0] if count == 1 else b"".join(frames)
            if await send(message):
                now = self._clock()
                self.spoken.audio_sent(len(message), now)
                self.last_sent_at = now
            elif not self.stopped:
                self._frames.extendleft(reversed(frames))  # paused while it waited: these go first later

    def _next_message(self, buffered_ms: float) -> tuple[int, float]:
        """How many frames to send now, or how long to wait first.

        One frame may go while the client holds at most ``lead_ms`` (so it never holds more
        than the lead plus a frame). A message of k frames may go once the client holds
        (k - 1) frames less; a full message waits for that, a short one (all there is) does not.
        Returns (frames, 0) or (0, ms to wait).
        """
        room = self.lead_ms - buffered_ms
        # Waits overshoot by a microsecond: landing exactly on the boundary, float rounding could
        # leave a wait too small to move a clock, again and again.
        if room < 0:
            return 0, -room + SLACK_MS
        fits = 1 + int(room // self.frame_ms) if self.frame_ms else len(self._frames)
        want = min(self.message_frames, len(self._frames))
        if fits >= want:
            return want, 0.0
        if len(self._frames) < self.message_frames:
            return fits, 0.0  # not a full message's worth: no frame waits for more
        return 0, (want - 1) * self.frame_ms - room + SLACK_MS
