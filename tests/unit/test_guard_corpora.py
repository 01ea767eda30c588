"""The guard corpora (tests/guard_corpora): what code lets through without asking the model.

Dialogue acts inside an ongoing task are never screened, so no model can block
them; every off-topic request, even mid-task, still goes to the guard. The model's
own block rates on both corpora are measured by ``make bench-guard``.
"""

from pathlib import Path

import pytest
import yaml

from voicebot.brain.read.dialog import is_dialogue_act

CORPORA = Path(__file__).resolve().parents[1] / "guard_corpora"


def items(name: str) -> list[tuple[str, dict]]:
    data = yaml.safe_load((CORPORA / f"{name}.yaml").read_text())
    return [(profile, item) for profile, entries in data.items() for item in entries]


@pytest.mark.parametrize(("profile", "item"), [i for i in items("in_domain") if i[1].get("act")],
                         ids=lambda v: v if isinstance(v, str) else v["text"])
def test_a_dialogue_act_in_a_task_is_never_screened(profile, item):
    assert is_dialogue_act(item["text"]), (profile, item["text"])


@pytest.mark.parametrize(("profile", "item"), items("off_topic"),
                         ids=lambda v: v if isinstance(v, str) else v["text"])
def test_an_off_topic_request_always_goes_to_the_guard(profile, item):
    assert not is_dialogue_act(item["text"]), (profile, item["text"])


def test_the_corpora_are_big_enough_to_mean_something():
    assert len(items("in_domain")) >= 30 and len(items("off_topic")) >= 20
    assert sum(1 for _, item in items("in_domain") if item.get("act")) >= 15
