"""A Korean caller at the restaurant: the same real reservation server, profile and safety as an
English caller, read and answered by the Korean language pack (voicebot/brain/lang/ko.yaml).

The scripted model reads nothing, so every value here is read by the pack's words: "내일 저녁
7시", "다음 주 금요일", "두 명", "조금 늦게". Each dialogue is judged by what the reservation
server recorded.
"""

from __future__ import annotations

import random

import pytest
import yaml

from tests.integration.test_restaurant_dialogs import (  # noqa: F401  (fixtures)
    Caller,
    encoder,
    reservations_url,
    restaurant,
)
from voicebot.brain.read.confirm import Answer, answer_to_read_back
from voicebot.brain.read.multilingual_encoder import UseMultilingualEncoder
from voicebot.devstack import ROOT
from voicebot.v1 import brain_pb2

pytestmark = pytest.mark.integration


class KoreanCaller(Caller):
    def __init__(self, agent) -> None:
        super().__init__(agent)
        # A name nobody else books under: three Hangul syllables.
        self.name = "".join(chr(0xAC00 + random.randrange(11172)) for _ in range(3))

    async def say(self, text: str, ahead=None, context=None) -> str:
        previous = brain_pb2.SpokenPart(turn_id=f"t{self.turns}", text=self.played()) if self.turns else None
        self.turns += 1
        request = brain_pb2.RespondRequest(session_id=self.session, turn_id=f"t{self.turns}",
                                           user_id="alice", text=text.replace("NAME", self.name),
                                           language="ko", previous_reply=previous)
        self.events = [event async for event in self.agent.respond(request)]
        return "".join(e.delta.text for e in self.events if e.WhichOneof("event") == "delta")


@pytest.fixture(scope="module")
def multilingual():
    return UseMultilingualEncoder()  # as the brain reads a Korean caller's turns (brain/startup.py)


@pytest.fixture
def korean(restaurant, multilingual):  # noqa: F811  (the restaurant dialogues' fixture)
    make, booked, _ = restaurant

    def make_korean() -> KoreanCaller:
        caller = make(encoders_in={"ko": multilingual})
        korean_caller = KoreanCaller(caller.agent)
        caller.name = korean_caller.name  # the fixture cancels what this name booked
        return korean_caller

    return make_korean, booked


async def test_a_booking_in_one_korean_line_is_read_back_in_korean_and_booked_after_a_plain_yes(korean):
    make, booked = korean
    caller = make()
    said = await caller.say("내일 저녁 7시에 두 명 자리 예약하고 싶어요.")
    assert said == "어느 분 성함으로 예약할까요?"
    said = await caller.say("NAME입니다.")
    read_back = f"{caller.name} 님 이름으로 12월 1일 화요일 오후 일곱 시에 두 명 테이블"
    assert said == f"확인하겠습니다: {read_back}. 진행할까요?"
    assert await booked(caller) == []
    said = await caller.say("네, 맞아요.")
    [booking] = await booked(caller)
    assert (booking["day"], booking["time"], booking["people"]) == ("2026-12-01", "19:00", 2)
    assert said.startswith(f"{read_back}이 예약되었습니다.")


async def test_a_korean_booking_over_several_turns_asks_one_field_at_a_time(korean):
    make, booked = korean
    caller = make()
    assert await caller.say("테이블 예약하고 싶어요.") == "어느 날 오시겠어요?"
    assert await caller.say("다음 주 금요일이요.") == "몇 시에 오시겠어요?"
    assert await caller.say("여덟 시 반이요.") == "몇 분이세요?"
    assert await caller.say("넷이요.") == "어느 분 성함으로 예약할까요?"
    said = await caller.say("제 이름은 NAME이에요.")
    assert "12월 11일 금요일 오후 여덟 시 30분에 네 명" in said
    await caller.say("네")
    [booking] = await booked(caller)
    assert (booking["day"], booking["time"], booking["people"]) == ("2026-12-11", "20:30", 4)


@pytest.mark.parametrize(("change", "field", "value"), [
    ("조금 늦게 해 주세요.", "time", "19:30"),
    ("아니요, 세 명으로 해 주세요.", "people", 3),
    ("한 명 더 와요.", "people", 3),
    ("목요일로 바꿔 주세요.", "day", "2026-12-03"),
    ("아니, 아홉 시로요.", "time", "21:00"),
    ("7시 30분으로 해 주세요.", "time", "19:30"),  # 분: the minutes, not a party of thirty
    # a correction names the old value first and the new one last
    ("두 명 말고 세 명으로 해 주세요.", "people", 3),
    ("아니요, 수요일이 아니라 목요일이에요.", "day", "2026-12-03"),
    ("일곱 시 말고 일곱 시 반으로요.", "time", "19:30"),
    ("세 명이요, 아 아니다 네 명이요.", "people", 4),
])
async def test_a_korean_change_is_read_back_anew_and_only_the_new_one_is_booked(korean, change, field, value):
    make, booked = korean
    caller = make()
    said = await caller.say("수요일 저녁 7시에 두 명, NAME 이름으로 예약해 주세요.")
    assert said.endswith("진행할까요?"), said
    said = await caller.say(change)
    assert said.endswith("진행할까요?") and await booked(caller) == [], said
    await caller.say("네")
    [booking] = await booked(caller)
    assert booking[field] == value


@pytest.mark.parametrize("answer", ["음, 글쎄요.", "테라스 자리인가요?", "잘 모르겠어요"])
async def test_a_korean_hedge_or_question_hears_the_read_back_again_and_books_nothing(korean, answer):
    make, booked = korean
    caller = make()
    await caller.say("수요일 저녁 7시에 두 명, NAME 이름으로 예약해 주세요.")
    said = await caller.say(answer)
    assert "12월 2일 수요일 오후 일곱 시에 두 명" in said and await booked(caller) == []
    await caller.say("아니요")
    assert await booked(caller) == []


KOREAN_DIALOGS = yaml.safe_load((ROOT / "examples/restaurant/dialogs.ko.yaml").read_text())


@pytest.mark.parametrize("dialog", KOREAN_DIALOGS["dialogs"], ids=lambda d: d["name"])
async def test_the_korean_bench_dialogues_are_carried_by_the_pack_alone(korean, dialog):
    """``make bench-dialog``'s Korean dialogues with a model that reads nothing: the pack's words
    carry every booking, change and cancel, and nothing is written without a plain yes."""
    make, booked = korean
    caller = make()
    for text in dialog["turns"]:
        before = await booked(caller)
        said = await caller.say(text.replace("{name}", "NAME"))
        print(f"caller: {text}\nbot:    {said}")  # shown when the dialogue fails
        if await booked(caller) != before:
            assert answer_to_read_back(text, "ko") is Answer.YES, (text, said)
    wanted = [{k: str(v) for k, v in w.items()} for w in dialog["expect"]]
    got = [{k: str(b[k]) for k in ("people", "weekday", "time")} for b in await booked(caller)]
    assert sorted(got, key=str) == sorted(wanted, key=str)


async def test_a_korean_party_larger_than_any_table_hears_the_reason_in_korean_not_the_servers_english(
        korean):
    """The reservation server refuses in English; the profile's rule for that error has a Korean
    sentence (translations.ko.tool_errors), and no English reaches a Korean caller."""
    make, booked = korean
    caller = make()
    said = await caller.say("수요일 저녁 7시에 여섯 명, NAME 이름으로 예약해 주세요.")
    assert "가장 큰 테이블이 네 분까지" in said, said
    assert "table" not in said.lower() and await booked(caller) == []
