"""Sentence segmentation of streamed text (English and Korean)."""

import pytest

from services.tts.segmenter import SentenceSegmenter


def segment(deltas, max_clause=120):
    seg = SentenceSegmenter(max_clause)
    out = []
    for delta in deltas:
        out += seg.push(delta)
    return out, seg.flush()


@pytest.mark.parametrize(("deltas", "streamed", "flushed"), [
    (["Hello there. How ", "are you?"], ["Hello there."], ["How are you?"]),
    (["It costs 3.", "5 dollars. Ok"], ["It costs 3.5 dollars."], ["Ok"]),
    (["Dr. Smith is in. Yes."], ["Dr. Smith is in."], ["Yes."]),
    (["We open at 7.30 tomorrow. See you"], ["We open at 7.30 tomorrow."], ["See you"]),
    (["Well... I think so. Yes"], ["Well... I think so."], ["Yes"]),
    (["Wait... Really? Sure"], ["Wait...", "Really?"], ["Sure"]),
    (["예약하시겠어요? 네 알겠습니다. "], ["예약하시겠어요?", "네 알겠습니다."], []),
    (["Great! ", "Two people."], ["Great!"], ["Two people."]),
])
def test_sentences(deltas, streamed, flushed):
    assert segment(deltas) == (streamed, flushed)


def test_long_clause_is_cut_at_a_comma():
    text = "For a party of eight on a Saturday evening, we would need a deposit, " * 2
    streamed, _ = segment([text], max_clause=60)
    assert streamed and streamed[0].endswith(",")
