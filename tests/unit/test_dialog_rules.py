"""The answer to a read-back by code's rule alone (English and Korean), and handoff requests.

Only a plain yes runs the action: a yes that carries anything else is a change, a
question or a hedge hears the read-back again. No model output enters this rule.
"""

import pytest

from voicebot.brain.read.confirm import Answer, answer_to_read_back
from voicebot.brain.read.dialog import asks_for_human, is_dialogue_act


@pytest.mark.parametrize(("text", "answer"), [
    ("yes", Answer.YES), ("Yes, please.", Answer.YES), ("yeah go ahead", Answer.YES),
    ("that's right", Answer.YES), ("Sure, thanks!", Answer.YES),
    ("Okay.", Answer.YES), ("Perfect, go ahead.", Answer.YES), ("Yes, that's perfect.", Answer.YES),
    ("no", Answer.NO), ("No.", Answer.NO), ("nope", Answer.NO),
    ("Wait.", Answer.NO), ("No, thank you.", Answer.NO),
    ("Okay?", Answer.UNSURE), ("Yes?", Answer.UNSURE), ("Hmm, maybe.", Answer.UNSURE),
    ("I guess so", Answer.UNSURE), ("I'm not sure", Answer.UNSURE), ("", Answer.UNSURE),
    ("Yes at nine.", Answer.CHANGE), ("Sure, but for three.", Answer.CHANGE),
    ("yes, and add one more person", Answer.CHANGE), ("no, half past two", Answer.CHANGE),
    ("No, make it Wednesday", Answer.CHANGE), ("actually make it 8", Answer.CHANGE),
    ("Hmmmm.", Answer.UNSURE), ("Could you make it at nine instead?", Answer.CHANGE),
    ("what's the weather like", Answer.OTHER), ("We are four people", Answer.OTHER),
])
def test_the_answer_to_a_read_back(text, answer):
    assert answer_to_read_back(text) is answer


@pytest.mark.parametrize(("text", "answer"), [
    ("네", Answer.YES), ("네, 예약해주세요", Answer.YES), ("네 맞아요.", Answer.YES),
    ("해 주세요", Answer.YES), ("네, 다 맞아요.", Answer.YES), ("좋아요, 그걸로 해 주세요.", Answer.YES),
    ("아니요", Answer.NO), ("아뇨.", Answer.NO), ("음, 글쎄요", Answer.UNSURE),
    ("아니요, 수요일로 해주세요", Answer.CHANGE), ("네, 근데 세 명이에요", Answer.CHANGE),
    ("주차 돼요?", Answer.UNSURE), ("내일 저녁 일곱 시요", Answer.OTHER),
])
def test_the_answer_to_a_read_back_in_korean(text, answer):
    assert answer_to_read_back(text, "ko") is answer


def test_a_language_reads_its_own_words_only():
    """An English session's yes is the English pack's: "네" there is no yes (and the reverse)."""
    assert answer_to_read_back("네") is Answer.OTHER
    assert answer_to_read_back("yes", "ko") is Answer.OTHER


@pytest.mark.parametrize("text", ["Yes at nine.", "Okay?", "yes but later", "sure, for three",
                                  "Yes, I think so?", "yes... maybe", "ok ok ok wait"])
def test_nothing_but_a_plain_yes_is_a_yes(text):
    assert answer_to_read_back(text) is not Answer.YES


@pytest.mark.parametrize(("text", "human"), [
    ("let me talk to a person", True), ("I want a human", True), ("can I speak to someone", True),
    ("a table for one person", False), ("two people please", False),
])
def test_handoff_requests(text, human):
    assert asks_for_human(text) is human


@pytest.mark.parametrize(("text", "human"), [
    ("상담원 연결해 주세요", True), ("사람이랑 통화하고 싶어요", True), ("두 사람 예약이요", False),
])
def test_handoff_requests_in_korean(text, human):
    assert asks_for_human(text, "ko") is human


@pytest.mark.parametrize(("text", "act"), [
    ("No.", True), ("Seven thirty.", True), ("Jordan Blake", True), ("yes please", True),
    ("Put it under Alex Yzgyvq, please.", True), ("My name is Priya Raman and it is for a check-up.", True),
    ("Write me a poem about the sea.", False), ("What is the capital of France?", False),
])
def test_short_dialogue_acts_skip_the_guard_but_requests_do_not(text, act):
    assert is_dialogue_act(text) is act
