"""The garbage collector once a service has started (voicebot.common.gc_tuning).

Scenario: a service finishes start-up and settles the collector; what start-up made is frozen
(never walked again) and collections come at the configured thresholds. "python" keeps
Python's own behaviour; anything else that is not three positive integers stops the service
with the reason, not a traceback.
"""

from __future__ import annotations

import gc

import pytest
from prometheus_client import REGISTRY

from voicebot.common import gc_tuning


@pytest.fixture
def restore_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.parametrize(("setting", "parsed"), [
    ("5000,20,100", (5000, 20, 100)),
    (" 700, 10 ,10", (700, 10, 10)),
    ("python", None),
    ("PYTHON", None),
])
def test_a_setting_is_three_thresholds_or_python(setting, parsed):
    assert gc_tuning.parse(setting) == parsed


@pytest.mark.parametrize("setting", ["", "5000", "5000,20", "5000,20,100,1", "a,b,c", "0,10,10", "-1,10,10"])
def test_anything_else_stops_the_service_with_the_reason(setting, restore_gc):
    with pytest.raises(SystemExit) as stopped:
        gc_tuning.configured(setting)  # read before the service starts anything
    assert "VOICEBOT_GC" in str(stopped.value) and "5000,20,100" in str(stopped.value)
    assert gc.get_freeze_count() == 0  # nothing was changed


def test_settling_freezes_what_startup_made_and_sets_the_thresholds(restore_gc):
    made_at_startup = [{"config": i} for i in range(1000)]
    gc_tuning.settle(gc_tuning.configured("4000,15,50"))
    assert gc.get_threshold() == (4000, 15, 50)
    assert gc.get_freeze_count() >= len(made_at_startup)
    # A collection no longer walks them: they are in no generation.
    assert not any(obj is made_at_startup for obj in gc.get_objects())


def test_python_keeps_pythons_own_collector(restore_gc):
    gc.set_threshold(700, 10, 10)
    gc_tuning.settle(gc_tuning.configured("python"))
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_the_setting_comes_from_voicebot_gc(monkeypatch):
    monkeypatch.setenv("VOICEBOT_GC", "3000,12,40")
    assert gc_tuning.configured() == (3000, 12, 40)
    monkeypatch.delenv("VOICEBOT_GC")
    assert gc_tuning.configured() == (5000, 20, 100)


def test_each_collection_is_timed_by_generation_once_settled(restore_gc):
    """Whatever the setting, a settled service reports how long each collection stopped it
    (voicebot_gc_pause_seconds), once per collection however often it was settled."""
    def timed(generation: int) -> tuple[float, float]:
        labels = {"generation": str(generation)}
        return (REGISTRY.get_sample_value("voicebot_gc_pause_seconds_count", labels) or 0.0,
                REGISTRY.get_sample_value("voicebot_gc_pause_seconds_sum", labels) or 0.0)

    gc_tuning.settle(gc_tuning.configured("python"))
    gc_tuning.settle(gc_tuning.configured("5000,20,100"))
    (young, _), (full, full_s) = timed(0), timed(2)
    cycles = [[] for _ in range(2000)]
    for cycle in cycles:
        cycle.append(cycle)  # garbage only the collector frees
    del cycles
    gc.collect(0)
    gc.collect()
    assert timed(0)[0] >= young + 1
    assert timed(2)[0] == full + 1 and timed(2)[1] > full_s  # once, though settled twice
