"""Percentiles for the benchmarks' tables (nearest rank: every figure is a measured value)."""

from __future__ import annotations

import random
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0 to 1) by nearest rank; None when there is nothing to rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def p50_ratio_interval(values: Sequence[float], base: Sequence[float], draws: int = 2000,
                       seed: int = 0) -> tuple[float, float, float] | None:
    """p50(values) / p50(base) - 1, with a 90 % bootstrap interval drawing each sample with
    replacement on its own (the two are not paired); seeded, so the same samples give the same
    interval. None when either is empty."""
    if not values or not base:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        on, off = _resampled_p50(values, rng), _resampled_p50(base, rng)
        ratios.append(on / off - 1)
    point = percentile(values, 0.5) / percentile(base, 0.5) - 1
    return round(point, 3), round(percentile(ratios, 0.05), 3), round(percentile(ratios, 0.95), 3)


def p50_interval(values: Sequence[float], draws: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """A 90 % bootstrap interval of p50(values): how far another run's p50 of as many samples
    could fall from this one's; seeded, so the same samples give the same interval. None when
    there is nothing to rank."""
    if not values:
        return None
    rng = random.Random(seed)
    p50s = [_resampled_p50(values, rng) for _ in range(draws)]
    return percentile(p50s, 0.05), percentile(p50s, 0.95)


def _resampled_p50(values: Sequence[float], rng: random.Random) -> float:
    """The p50 of one bootstrap draw: as many samples as ``values``, with replacement."""
    return percentile(rng.choices(values, k=len(values)), 0.5)
