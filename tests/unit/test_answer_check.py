"""A passage is spoken only when it answers the question (voicebot/brain/act/answerable.py,
act/answers.py): the check's no means the business's unknown sentence; a check that gives no
verdict lets the nearest passage be spoken, as without a check."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.fakes.fake_llm import is_answer_check
from voicebot.brain.act.answerable import ModelAnswerCheck, Verdict
from voicebot.brain.act.answers import Answers
from voicebot.brain.business.profile import Sentences
from voicebot.brain.lang import language_pack
from voicebot.brain.llm import OpenAIChatClient

UNKNOWN = "Sorry, I don't know that."
PAYMENT = "We accept Visa, Mastercard and American Express."
BOOKINGS = "Tables seat up to four people."


@dataclass
class Found:
    text: str
    score: float
    kind: str = "faq"
    title: str = ""


class Shelf:
    """A knowledge index that finds the same passages for any question, best first."""

    def __init__(self, *passages: Found) -> None:
        self.passages = list(passages)

    async def search(self, text, k=None):
        return list(self.passages)

    def prefetch(self, text):
        pass


class Judge:
    """An answer check that answers from a table of passage -> verdict, and records what it saw."""

    def __init__(self, verdicts: dict[str, bool | None]) -> None:
        self.verdicts = verdicts
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, question: str, passage: str) -> Verdict:
        self.seen.append((question, passage))
        return Verdict(self.verdicts[passage], 5.0)


def answers(check, *passages: Found, check_passages: int = 2) -> Answers:
    sentences = Sentences(**{**language_pack("en").sentences, "unknown_fact": UNKNOWN})
    return Answers(Shelf(*passages), sentences, lambda: "I can help you book a table.", check=check,
                   check_passages=check_passages)


async def test_a_passage_judged_not_to_answer_is_never_spoken_the_unknown_sentence_is():
    check = Judge({PAYMENT: False})
    answer = await answers(check, Found(PAYMENT, 0.62)).answer("Do you sell gift cards?")
    assert (answer.text, answer.known) == (f"{UNKNOWN} I can help you book a table.", False)
    assert answer.record["check"] == ["no"]
    assert check.seen == [("Do you sell gift cards?", PAYMENT)]


async def test_the_next_passage_is_spoken_when_it_answers_and_the_best_does_not():
    check = Judge({PAYMENT: False, BOOKINGS: True})
    answer = await answers(check, Found(PAYMENT, 0.7), Found(BOOKINGS, 0.6)).answer("Can four of us come?")
    assert (answer.text, answer.known) == ("Tables seat up to four people.", True)
    assert answer.record["check"] == ["no", "yes"]


async def test_no_more_passages_are_checked_than_the_setting_allows():
    check = Judge({PAYMENT: False, BOOKINGS: True})
    answer = await answers(check, Found(PAYMENT, 0.7), Found(BOOKINGS, 0.6),
                           check_passages=1).answer("Can four of us come?")
    assert not answer.known and len(check.seen) == 1


async def test_a_document_chunk_is_checked_with_its_heading():
    check = Judge({"Parking: Free after 6 pm on the street.": True})
    found = Found("Free after 6 pm on the street.", 0.5, "document", "Parking")
    answer = await answers(check, found).answer("Is there parking?")
    assert answer.known and answer.text.startswith("Free after six")


async def test_a_check_that_gives_no_verdict_lets_the_nearest_passage_be_spoken():
    # Why: the passage is the business's own true words, the nearest the search found; knowledge
    # answers keep working while the model is away, and nothing false is said.
    answer = await answers(Judge({PAYMENT: None}), Found(PAYMENT, 0.62)).answer("Do you take Amex?")
    assert (answer.text, answer.known) == ("We accept Visa, Mastercard and American Express.", True)
    assert answer.record["check"] == ["none"]


async def test_without_a_check_the_best_passage_is_spoken():
    answer = await answers(None, Found(PAYMENT, 0.62)).answer("Do you sell gift cards?")
    assert answer.known and "check" not in answer.record


# ---- the model's check, over the real client and a scripted server --------------------------

@pytest.fixture
async def model(scripted_llm):
    client = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=1.0)
    yield ModelAnswerCheck(client, timeout_s=1.0), scripted_llm
    await client.aclose()


@pytest.mark.parametrize(("reply", "verdict"), [('"yes"', True), ('"no"', False), ('"maybe"', None),
                                                ("yes", None), ('{"answers": "yes"}', None)])
async def test_the_model_says_yes_or_no_under_a_schema_and_anything_else_is_no_verdict(model, reply, verdict):
    check, llm = model
    llm.script = lambda body: reply
    assert (await check("Do you sell gift cards?", PAYMENT)).answers is verdict
    [body] = llm.requests
    assert is_answer_check(body) and body["temperature"] == 0.0
    assert body["response_format"]["json_schema"]["schema"] == {"type": "string", "enum": ["yes", "no"]}
    assert body["messages"][-1]["content"] == f"Question: Do you sell gift cards?\nPassage: {PAYMENT}"


async def test_a_model_that_is_down_or_too_slow_gives_no_verdict(model):
    check, llm = model
    llm.fail_next = 10  # 503 until the client's deadline
    assert (await check("Do you sell gift cards?", PAYMENT)).answers is None
    llm.fail_next = 0
    llm.script = lambda body: {"content": '"no"', "delay_s": 3.0}
    verdict = await check("Do you sell gift cards?", PAYMENT)
    assert verdict.answers is None and verdict.ms < 2900  # the timeout (1 s) cut it, not the reply
