"""How loud the caller's line is, frame by frame: a frame's power and the line's floor.

The STT link asks both on every 20 ms frame of every call (which frames may wait for an STT
message, voicebot/gateway/stt_link.py), so both cost a constant, small time: a ``min()`` over
the last 50 powers per frame showed up in a loaded gateway's profile.
"""

from __future__ import annotations

from collections import deque

import numpy as np

# Below this (RMS 10 of PCM16, about -70 dBFS) a frame is never an onset, however quiet the line:
# dither and a digital line's near-silence.
SOFT_ONSET_SQUARE = 10.0 ** 2

_PCM16 = np.dtype(np.int16)
_FLOAT32 = np.dtype(np.float32)


def mean_square(pcm16: bytes) -> float:
    """The frame's power (the square of its RMS), PCM16 samples; an odd last byte is ignored."""
    samples = np.frombuffer(pcm16, _PCM16, len(pcm16) // 2).astype(_FLOAT32)
    return float(samples.dot(samples)) / (len(samples) or 1)


class LineFloor:
    """The quietest of the last ``frames`` powers: the line's own floor, which "quiet" and a soft
    onset are measured from.

    Kept as an ascending queue of (frame number, power): a power leaves it once it is older than
    the window or a quieter one came after it (it can never be the minimum again), so each
    frame is pushed and popped at most once."""

    def __init__(self, frames: int = 50) -> None:
        self._frames = frames
        self._count = 0
        self._ascending: deque[tuple[int, float]] = deque()

    def before(self, power: float) -> float:
        """The floor over the frames before this one (this one's power when there are none);
        this one then counts for the next."""
        ascending = self._ascending
        if ascending and ascending[0][0] < self._count - self._frames:
            ascending.popleft()  # one frame enters per call, so at most one falls out of the window
        floor = ascending[0][1] if ascending else power
        while ascending and ascending[-1][1] >= power:
            ascending.pop()
        ascending.append((self._count, power))
        self._count += 1
        return floor
