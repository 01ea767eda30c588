"""make bench-dialog's summary per profile: a profile none of whose dialogues ran (``--only``
picked none of them) has no task success, not 0 %."""

from bench.dialog import DialogResult, summary


def test_task_success_is_the_share_of_dialogues_that_succeeded():
    results = [DialogResult("a", success=True, turns=[{"s": 1.0}]), DialogResult("b", turns=[{"s": 3.0}])]
    row = summary("clinic", results)
    assert (row["dialogs"], row["task_success"], row["failed"]) == (2, 0.5, ["b"])


def test_a_profile_without_dialogues_of_the_kind_has_no_task_success():
    row = summary("restaurant-ko", [])
    assert (row["dialogs"], row["task_success"], row["turn_s_p50"]) == (0, None, None)
