"""Yes/no/correction rules (English and Korean), handoff requests, misunderstanding detection."""

import pytest

from services.brain.dialog import Decision, asks_for_human, classify_confirmation, is_clarification


@pytest.mark.parametrize(("text", "decision"), [
    ("yes", Decision.YES), ("Yes, please.", Decision.YES), ("yeah go ahead", Decision.YES),
    ("that's right", Decision.YES), ("네", Decision.YES), ("네, 예약해주세요", Decision.YES),
    ("no", Decision.NO), ("No.", Decision.NO), ("nope", Decision.NO), ("아니요", Decision.NO),
    ("no, half past two", Decision.CORRECTION), ("No, make it Wednesday", Decision.CORRECTION),
    ("no, three people", Decision.CORRECTION), ("actually make it 8", Decision.CORRECTION),
    ("아니요, 수요일로 해주세요", Decision.CORRECTION),
    ("Could you make it a little later in the evening please", Decision.CORRECTION),
    ("What about the same time on Saturday instead", Decision.CORRECTION),
    ("Could you push the booking back by an hour?", Decision.CORRECTION),
    ("Can we bring it forward a little?", Decision.CORRECTION),
    ("How about eight?", Decision.CORRECTION), ("We'd like a different day", Decision.CORRECTION),
    ("what's the weather like", None), ("hmm", None), ("Could you say that again?", None),
    ("What about parking?", None),
])
def test_confirmation_rules(text, decision):
    assert classify_confirmation(text) == decision


@pytest.mark.parametrize(("text", "human"), [
    ("let me talk to a person", True), ("I want a human", True), ("can I speak to someone", True),
    ("상담원 연결해 주세요", True), ("a table for one person", False), ("two people please", False),
])
def test_handoff_requests(text, human):
    assert asks_for_human(text) is human


def test_clarification_detection():
    assert is_clarification("Sorry, I didn't catch that. Which day?")
    assert not is_clarification("Tuesday at seven works.")
