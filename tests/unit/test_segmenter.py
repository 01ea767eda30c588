"""Sentence segmentation of streamed text (English and Korean)."""

import pytest

from voicebot.tts.config import TtsSettings
from voicebot.tts.segmenter import SentenceSegmenter, WordCut, voiced


def segment(deltas, max_clause=120):
    seg = SentenceSegmenter(max_clause)
    out = []
    for delta in deltas:
        out += seg.push(delta)
    return out, seg.flush()


@pytest.mark.parametrize(("deltas", "streamed", "flushed"), [
    # English
    (["Hello there. How ", "are you?"], ["Hello there."], ["How are you?"]),
    (["It costs 3.", "5 dollars. Ok"], ["It costs 3.5 dollars."], ["Ok"]),
    (["Dr. Smith is in. Yes."], ["Dr. Smith is in."], ["Yes."]),
    (["Dr.", " ", "Smith is in. Yes."], ["Dr. Smith is in."], ["Yes."]),
    (["We open at 7.30 tomorrow. See you"], ["We open at 7.30 tomorrow."], ["See you"]),
    (["Well... I think so. Yes"], ["Well... I think so."], ["Yes"]),
    (["Wait... Really? Sure"], ["Wait...", "Really?"], ["Sure"]),
    (["Wait...", " ", "Really? Sure"], ["Wait...", "Really?"], ["Sure"]),
    (["so… maybe later. Ok"], ["so… maybe later."], ["Ok"]),
    (["Great! ", "Two people."], ["Great!"], ["Two people."]),
    (["Table No. 5 is free. Say no. Then"], ["Table No. 5 is free.", "Say no."], ["Then"]),
    (["See you at 7 p.m. Thanks!"], ["See you at 7 p.m."], ["Thanks!"]),
    (["Bring plates, cups, etc. and a cake. Ok"], ["Bring plates, cups, etc. and a cake."], ["Ok"]),
    (["J. Smith booked it. Fine"], ["J. Smith booked it."], ["Fine"]),
    (["I said \"yes.\" Then I left"], ["I said \"yes.\""], ["Then I left"]),
    (["Options:\n- a window seat\n- the bar"], ["Options:", "- a window seat"], ["- the bar"]),
    (["It is $1,500 in total. Ok"], ["It is $1,500 in total."], ["Ok"]),
    (["Wait..."], [], ["Wait..."]),
    # Korean
    (["예약하시겠어요? 네 알겠습니다. "], ["예약하시겠어요?", "네 알겠습니다."], []),
    (["네. 알겠습니다. "], ["네.", "알겠습니다."], []),
    (["3.5킬로미터예요. 네"], ["3.5킬로미터예요."], ["네"]),
    (["7시 30분", "에 뵙겠습니다! 감사합니다"], ["7시 30분에 뵙겠습니다!"], ["감사합니다"]),
    (["예약했습니다。다음 주에 봬요！"], ["예약했습니다。", "다음 주에 봬요！"], []),
    (["음... 잠시만요. 네"], ["음... 잠시만요."], ["네"]),
])
def test_sentences(deltas, streamed, flushed):
    assert segment(deltas) == (streamed, flushed)


def test_long_clause_is_cut_at_a_comma():
    text = "For a party of eight on a Saturday evening, we would need a deposit, " * 2
    streamed, _ = segment([text], max_clause=60)
    assert streamed[0] == "For a party of eight on a Saturday evening,"


def test_long_clause_streamed_word_by_word_is_cut_as_soon_as_it_is_long():
    words = "Our terrace on the river side, which we heat in winter, seats twelve people easily".split(" ")
    seg = SentenceSegmenter(max_clause_chars=40)
    cuts = []
    for word in words:
        cuts += [(word, sentence) for sentence in seg.push(word + " ")]
    # The first comma is before the limit: cut there as soon as the text reaches 40 characters.
    assert cuts[0] == ("we", "Our terrace on the river side,")


def test_a_long_clause_without_an_early_comma_is_cut_at_the_first_one_after_the_limit():
    text = "The private dining room upstairs with the long oak table, seats twelve, and more"
    streamed, flushed = segment([text], max_clause=30)
    assert streamed == ["The private dining room upstairs with the long oak table,"]
    assert flushed == ["seats twelve, and more"]  # under the limit: not cut again


def test_no_cut_inside_a_number_or_a_short_clause():
    streamed, flushed = segment(["It is 1,000,000 dollars or so, they say, and"], max_clause=10)
    assert streamed == ["It is 1,000,000 dollars or so,"]
    assert flushed == ["they say, and"]


def test_korean_long_clause_is_cut_at_a_comma():
    text = "창가 자리는 이미 예약되어 있어서, 안쪽 자리로 준비해 드릴 수 있는데 괜찮으실까요"
    streamed, flushed = segment([text], max_clause=20)
    assert streamed == ["창가 자리는 이미 예약되어 있어서,"]
    assert flushed == ["안쪽 자리로 준비해 드릴 수 있는데 괜찮으실까요"]


def stream_words(segmenter: SentenceSegmenter, text: str) -> list[str]:
    pieces = []
    for word in text.split(" "):
        pieces += segmenter.push(word + " ")
    return pieces + segmenter.flush()


def test_the_first_clause_starts_at_its_comma_before_the_sentence_ends():
    seg = SentenceSegmenter(first_clause_chars=12, first_clause_words=8)
    pieces = stream_words(seg, "I have a table for two on Friday, December fourth at seven. Shall I book it?")
    assert pieces == ["I have a table for two on Friday,", "December fourth at seven.", "Shall I book it?"]


def test_a_long_first_clause_without_a_comma_is_cut_at_a_word_boundary():
    seg = SentenceSegmenter(first_clause_chars=12, first_clause_words=8)
    pieces = stream_words(seg, "Our kitchen serves vegetarian and vegan dishes every single day of the week.")
    assert pieces[0] == "Our kitchen serves vegetarian and vegan dishes every"
    assert " ".join(pieces) == "Our kitchen serves vegetarian and vegan dishes every single day of the week."
    # Voiced with a comma (a rise and a short pause, not a full stop's fall); a sentence as written.
    assert voiced(pieces[0]) == pieces[0] + "," and voiced(pieces[1]) == pieces[1]


def test_without_a_comma_the_first_piece_ends_before_a_word_that_opens_a_phrase():
    """Cut where a speaker would pause, once five words are said (voiced with a comma, ``voiced``);
    too early, or without an opener, the word count decides; other pieces are never cut at words."""
    def pieces(text: str) -> list[str]:
        return stream_words(SentenceSegmenter(first_clause_chars=3, first_clause_words=8,
                                              first_clause_min_words=5), text)

    cases = {
        "I'm located about one mile from the train station.":
            ["I'm located about one mile", "from the train station."],
        "We close at ten p m on weekdays and six p m on weekends.":  # "at" comes too early
            ["We close at ten p m", "on weekdays and six p m on weekends."],
        "Our kitchen serves vegetarian and vegan dishes every single day of the week.":  # "and": 4th
            ["Our kitchen serves vegetarian and vegan dishes every", "single day of the week."],
        "Nepokin is located in the city center.": ["Nepokin is located in the city center."],
        "Absolutely everybody here really likes our seasonal tasting menus a lot.":
            ["Absolutely everybody here really likes our seasonal tasting", "menus a lot."],
        "Yes, we have a terrace for the summer.": ["Yes,", "we have a terrace for the summer."],
        "We plan to open at six. We close at ten in the evening on Sundays.":
            ["We plan to open at six.", "We close at ten in the evening on Sundays."],
    }
    for text, expected in cases.items():
        got = pieces(text)
        assert got == expected and " ".join(got) == text, text
        word_cut = len(got) > 1 and not got[0].endswith((",", "."))
        assert [isinstance(piece, WordCut) for piece in got] == [word_cut] + [False] * (len(got) - 1), text


def test_a_short_first_sentence_and_an_early_comma_are_left_whole():
    seg = SentenceSegmenter(first_clause_chars=12, first_clause_words=8)
    pieces = stream_words(seg, "Sure, we open at noon. Anything else?")
    assert pieces == ["Sure, we open at noon.", "Anything else?"]


def test_by_default_a_reply_opening_with_yes_is_spoken_from_its_comma():
    settings = TtsSettings()
    seg = SentenceSegmenter(settings.max_clause_chars, settings.first_clause_chars,
                            settings.first_clause_words)
    pieces = stream_words(seg, "Yes, we offer vegetarian dishes. Anything else?")
    assert pieces == ["Yes,", "we offer vegetarian dishes.", "Anything else?"]


def test_the_first_comma_after_a_word_cuts_without_waiting_for_the_next_token():
    seg = SentenceSegmenter(first_clause_chars=3, first_clause_words=8)
    assert seg.push("Yes") == [] and seg.push(",") == ["Yes,"]
    seg = SentenceSegmenter(first_clause_chars=3, first_clause_words=8)
    assert seg.push("It costs 1") == [] and seg.push(",") == []  # "1," may become "1,000"
    assert seg.push("000 dollars, yes.") == ["It costs 1,000 dollars,"]


def test_only_the_first_piece_is_cut_early():
    seg = SentenceSegmenter(first_clause_chars=12, first_clause_words=8)
    later = "We also have a terrace, which is heated in winter."
    pieces = stream_words(seg, "Yes, we certainly do, every day. " + later)
    assert pieces == ["Yes, we certainly do,", "every day.", later]
