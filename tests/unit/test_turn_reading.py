"""The read stage: the words against the session's state into one reading, the model only when
rules and embeddings cannot read them."""

from __future__ import annotations

import datetime as dt

from voicebot.brain.business.tasks import FieldSpec, TaskSpec
from voicebot.brain.decide.state import FormState, PendingAction, SessionState
from voicebot.brain.read.confirm import Answer
from voicebot.brain.read.reading import QUESTION, Reader, Reading
from voicebot.brain.read.turn_reading import TurnReader

BOOK = TaskSpec(name="book_visit", title="booking a visit", lookup=False,
                fields=(FieldSpec("day", "date", "Which day?", True),
                        FieldSpec("name", "name", "Your name?", True)), arguments=("day", "name"))


class Picker:
    """Embeddings stand-in: the nearest intent is named per sentence."""

    def __init__(self, picks: dict[str, tuple[str, float]]) -> None:
        self.picks = picks

    def pick(self, text: str) -> tuple[str | None, float]:
        return self.picks.get(text, (None, 0.0))


class CountingReader(Reader):
    def __init__(self, picker: Picker) -> None:
        super().__init__(chat=None, tasks={"book_visit": BOOK}, business="a garage", picker=picker)
        self.asked: list[str] = []

    async def model_reading(self, text, question, fields, with_intent=True) -> Reading:
        self.asked.append(text)
        return Reading("book_visit", {}, "model")


def reader(picks: dict[str, tuple[str, float]]) -> tuple[TurnReader, CountingReader]:
    model = CountingReader(Picker(picks))

    async def nearest_knowledge(_text: str) -> float:
        return 0.7

    return TurnReader(model, nearest_knowledge, "Anything else?", lambda: dt.date(2026, 12, 7)), model


def waiting() -> SessionState:
    state = SessionState(form=FormState(task="book_visit", values={"day": "2026-12-09", "name": "Kim"}))
    state.propose(PendingAction(tool="book_visit", args={}, action="a visit", read_back_turn="t1"))
    return state


async def test_a_plain_yes_to_the_read_back_is_read_by_rules_alone():
    turns, model = reader({})
    reading = await turns.read(waiting(), "Yes, please.")
    assert reading.answer is Answer.YES and model.asked == []


async def test_a_question_about_the_business_while_a_read_back_waits_needs_no_model():
    turns, model = reader({"Before I say yes, where exactly are you?": (QUESTION, 0.5)})
    reading = await turns.read(waiting(), "Before I say yes, where exactly are you?")
    assert reading.intent == QUESTION and reading.question
    assert model.asked == []


async def test_a_change_the_rules_cannot_read_while_a_read_back_waits_asks_the_model():
    turns, model = reader({"Could we do it under my wife's name instead?": ("book_visit", 0.8)})
    await turns.read(waiting(), "Could we do it under my wife's name instead?")
    assert model.asked == ["Could we do it under my wife's name instead?"]


async def test_a_korean_question_while_a_read_back_waits_needs_no_model_and_a_korean_change_is_read():
    """Korean values are read by the pack's rules, so a question in which they find none asks
    about the business; a change they read is the change, without the model either."""
    turns, model = reader({})
    reading = await turns.read(waiting(), "그 전에, 주차 되나요?", language="ko")
    assert reading.intent == QUESTION and reading.question
    korean_booking = TaskSpec(name="book_visit", title="방문 예약", lookup=False, fields=(
        FieldSpec("day", "date", "어느 날요?", True, language="ko"),
        FieldSpec("name", "name", "성함이요?", True, language="ko")), arguments=("day", "name"))
    model.tasks = turns.tasks = {"book_visit": korean_booking}
    reading = await turns.read(waiting(), "아, 목요일로 바꿔 주실 수 있나요?", language="ko")
    assert reading.values == {"day": "아, 목요일로 바꿔 주실 수 있나요?"}
    assert model.asked == []


async def test_a_request_for_a_person_is_read_without_anything_else():
    turns, model = reader({})
    reading = await turns.read(waiting(), "Can I talk to a real person?")
    assert reading.for_person and model.asked == []


def test_a_value_is_the_callers_words_in_any_script():
    from voicebot.brain.read.reading import said_in

    assert said_in("김민수", "김민수로 예약해 주세요")  # a particle attached to the name
    assert not said_in("박지성", "김민수로 예약해 주세요")
    assert said_in("Jordan Blake", "it's jordan blake") and not said_in("John Doe", "it's Jordan")
