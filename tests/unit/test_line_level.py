"""The line's level: a frame's power and the line's floor, which the STT link asks on every frame."""

import random

import numpy as np

from voicebot.gateway.line_level import LineFloor, mean_square


def test_the_floor_is_the_quietest_of_the_frames_before_this_one_within_the_window():
    rng = random.Random(7)
    # A line that drifts, with runs of equal powers and sudden drops and rises.
    powers = [rng.choice([0.0, 4.0, 4.0, 100.0, rng.uniform(0, 1e6)]) for _ in range(2000)]
    floor = LineFloor(50)
    heard = [floor.before(p) for p in powers]
    expected = [min(powers[max(0, i - 50):i], default=powers[i]) for i in range(len(powers))]
    assert heard == expected


def test_a_quiet_frame_leaves_the_floor_once_it_is_older_than_the_window():
    floor = LineFloor(3)
    record = [floor.before(p) for p in (1.0, 9.0, 9.0, 9.0, 9.0, 5.0, 7.0)]
    # The 1.0 counts for the three frames after it, then the window holds only louder ones.
    assert record == [1.0, 1.0, 1.0, 1.0, 9.0, 9.0, 5.0]


def test_the_power_of_a_frame_is_its_mean_square_and_an_odd_byte_is_ignored():
    tone = (np.sin(np.arange(320) / 5) * 1000).astype(np.int16)
    expected = float(np.mean(tone.astype(np.float64) ** 2))
    assert abs(mean_square(tone.tobytes()) - expected) < expected * 1e-5
    assert abs(mean_square(tone.tobytes() + b"\x01") - expected) < expected * 1e-5
    assert mean_square(b"") == 0.0
    assert mean_square(bytes(640)) == 0.0
