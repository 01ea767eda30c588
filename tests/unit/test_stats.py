"""The benchmarks' figures: nearest-rank percentiles and the p50 ratio with its interval."""

from __future__ import annotations

import random

from bench.stats import p50_interval, p50_ratio_interval, percentile


def test_a_percentile_is_always_a_measured_value():
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0
    assert percentile([], 0.5) is None


def test_the_same_latencies_on_both_sides_give_no_difference_within_the_interval():
    rng = random.Random(1)
    base = [7.0 + rng.random() * 3 for _ in range(50)]
    point, low, high = p50_ratio_interval(list(base), base)
    assert point == 0.0 and low <= 0.0 <= high


def test_a_clearly_slower_variant_has_its_whole_interval_above_zero():
    rng = random.Random(2)
    base = [7.0 + rng.random() * 2 for _ in range(50)]
    slower = [v + 2.0 for v in base]
    point, low, high = p50_ratio_interval(slower, base)
    assert 0.2 < point < 0.3
    assert 0.0 < low <= point <= high


def test_the_interval_is_seeded_and_needs_both_samples():
    base, other = [5.0, 6.0, 7.0, 8.0], [6.0, 7.0, 8.0, 9.0]
    assert p50_ratio_interval(other, base) == p50_ratio_interval(other, base)
    assert p50_ratio_interval([], base) is None and p50_ratio_interval(other, []) is None


def test_a_p50s_interval_holds_it_and_narrows_with_more_samples():
    rng = random.Random(3)
    few = [4.0 + rng.random() * 2 for _ in range(33)]
    many = [4.0 + rng.random() * 2 for _ in range(330)]
    low, high = p50_interval(few)
    assert low <= percentile(few, 0.5) <= high
    many_low, many_high = p50_interval(many)
    assert many_high - many_low < (high - low) / 1.5
    assert p50_interval(few) == p50_interval(few)  # seeded
    assert p50_interval([]) is None
