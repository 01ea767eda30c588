"""make bench-urgent's cases and judge: enough phrasings of each side, none of them the profile's own."""

from bench.urgent import cases, is_urgent_reply, summary
from voicebot.brain.business.profile import load_profile


def test_the_bench_has_forty_emergencies_and_forty_ordinary_turns_of_every_kind():
    rows = cases(None)
    kinds = {kind for kind, _, urgent in rows if urgent}
    assert kinds == {"direct", "indirect", "with_booking"}
    assert sum(urgent for _, _, urgent in rows) >= 40
    assert sum(not urgent for _, _, urgent in rows) >= 40


def test_no_case_is_one_of_the_clinics_own_examples():
    clinic = load_profile("clinic")
    own = {e.lower().strip(" .!?") for s in clinic.urgent.situations for e in s.examples}
    own |= {e.lower().strip(" .!?") for e in clinic.urgent.routine}
    assert not [text for _, text, _ in cases(None) if text.lower().strip(" .!?") in own]


def test_a_reply_counts_as_urgent_only_when_it_opens_with_a_situations_sentence():
    sentences = ["This sounds like an emergency. Please hang up and call nine one one now."]
    assert is_urgent_reply("This sounds like an emergency! Please hang up and call nine one one now.",
                           sentences)
    assert not is_urgent_reply("Which day would you like to come in?", sentences)
    assert not is_urgent_reply("Sure. This sounds like an emergency. Please hang up and call nine one one "
                               "now.", sentences)


def test_the_summary_counts_right_answers_per_mode_and_kind():
    rows = [{"mode": "typed", "kind": "direct", "text": "a", "ok": True, "alarm": True, "s": 1.0},
            {"mode": "typed", "kind": "direct", "text": "b", "ok": False, "alarm": False, "s": 2.0},
            {"mode": "typed", "kind": "ordinary", "text": "c", "ok": True, "alarm": False, "s": 1.0}]
    [direct, ordinary] = summary(rows)
    assert (direct["cases"], direct["urgent_sentence"], direct["right"]) == (2, 1, 0.5)
    assert direct["wrong"] == ["b"]
    assert (ordinary["cases"], ordinary["urgent_sentence"], ordinary["right"]) == (1, 0, 1.0)
