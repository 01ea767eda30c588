"""Korean values read by the Korean pack's words (voicebot/brain/lang/ko.yaml ``values``), not by
code: number words before counters, relative days, weekdays of this and next week, hours with
their morning or evening word, changes relative to a read-back, names with their particles."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from voicebot.brain.lang import LanguageError, load_pack
from voicebot.brain.read.numbers import number_words, said_number, without_numbers
from voicebot.brain.read.numerals import numerals_to_digits
from voicebot.brain.read.values import (
    normalise,
    parse_date,
    parse_integer,
    parse_name,
    parse_time,
    relative_change,
)
from voicebot.brain.speak.readback import render

MONDAY = dt.date(2030, 1, 7)


@pytest.mark.parametrize(("words", "digits"), [
    ("두 명이요", "2 명이요"), ("넷이요", "4이요"), ("열두 시", "12 시"), ("스물세 명", "23 명"),
    ("삼십 분", "30 분"), ("십이월 이십오일", "12월 25일"), ("이십일일", "21일"),
    ("한 시간 늦게", "1 시간 늦게"),
    # the same syllables as other words stay words: yes, "please do", this time, a name
    ("네", "네"), ("하세요", "하세요"), ("이번 주", "이번 주"), ("이명수", "이명수"), ("오세일", "오세일"),
    ("열어 주세요", "열어 주세요"), ("천천히", "천천히"),
])
def test_number_words_become_digits_only_where_they_count_something(words, digits):
    assert numerals_to_digits(words, "ko") == digits


@pytest.mark.parametrize(("words", "day"), [
    ("내일", "2030-01-08"), ("모레요", "2030-01-09"), ("오늘 저녁", "2030-01-07"), ("금요일", "2030-01-11"),
    ("이번 주 토요일", "2030-01-12"), ("다음 주 금요일", "2030-01-18"), ("다음주 월요일", "2030-01-14"),
    ("25일", "2030-01-25"), ("12월 25일", "2030-12-25"), ("십이월 이십오일에요", "2030-12-25"),
    ("주말에", "2030-01-12"), ("내일 저녁 7시에 두 명 자리 예약하고 싶어요.", "2030-01-08"),
])
def test_a_korean_day_is_read_from_the_packs_words(words, day):
    assert parse_date(words, MONDAY, "ko") == dt.date.fromisoformat(day)


@pytest.mark.parametrize("words", ["예약하고 싶어요", "두 명이요", "일곱 시", "네"])
def test_korean_words_without_a_day_give_none(words):
    assert parse_date(words, MONDAY, "ko") is None


@pytest.mark.parametrize(("words", "evening", "plain"), [
    ("저녁 7시", "19:00", "19:00"), ("오후 3시 30분", "15:30", "15:30"), ("7시 반", "19:30", "07:30"),
    ("일곱 시 반이요", "19:30", "07:30"), ("여덟 시쯤", "20:00", "08:00"), ("아침 9시", "09:00", "09:00"),
    ("19:30", "19:30", "19:30"), ("정오", "12:00", "12:00"), ("저녁 여덟 시 삼십 분", "20:30", "20:30"),
])
def test_a_korean_time_is_read_with_its_morning_or_evening_word_or_inside_the_hours(words, evening, plain):
    assert parse_time(words, ("18:00", "22:00"), "ko") == evening
    assert parse_time(words, None, "ko") == plain


@pytest.mark.parametrize("words", ["두 명이요", "한 시간", "내일이요"])
def test_a_party_or_a_duration_is_no_korean_time(words):
    assert parse_time(words, ("18:00", "22:00"), "ko") is None


def test_a_number_alone_is_an_hour_only_as_the_answer_to_what_time():
    assert parse_time("넷이요", ("18:00", "22:00"), "ko") == "16:00"
    assert parse_time("넷이요", ("18:00", "22:00"), "ko", bare=False) is None
    assert parse_time("Four.", ("12:00", "22:00"), "en", bare=False) is None


@pytest.mark.parametrize(("words", "number"), [("두 명이요", 2), ("넷이요", 4), ("2명", 2), ("네", None),
                                               ("세 명하고 아이 둘", None)])
def test_korean_numbers(words, number):
    assert parse_integer(words, "ko") == number


@pytest.mark.parametrize(("kind", "words", "current", "changed"), [
    ("time", "조금 늦게 해 주세요", "19:00", "19:30"), ("time", "한 시간 일찍", "19:00", "18:00"),
    ("time", "30분 늦게요", "19:00", "19:30"), ("date", "다음 날로 해 주세요", "2030-01-08", "2030-01-09"),
    ("date", "하루 전으로요", "2030-01-08", "2030-01-07"), ("time", "네 좋아요", "19:00", None),
])
def test_a_korean_change_relative_to_the_read_back(kind, words, current, changed):
    assert relative_change(kind, words, current, "ko") == changed


@pytest.mark.parametrize(("words", "name"), [
    ("김민수입니다", "김민수"), ("제 이름은 김민수예요", "김민수"), ("김민수로 해주세요", "김민수"),
    ("이지은", "이지은"),
    ("예약하고 싶어요", None), ("두 명이요", None), ("토요일로 해 주세요", None), ("같은 이름으로", None),
])
def test_a_korean_name_without_its_lead_and_particles(words, name):
    assert parse_name(words, frozenset(), "ko") == name


def test_a_korean_value_is_said_back_the_korean_way():
    said = render("{name} 님 이름으로 {day} {time}에 {people}명", {
        "name": "김민수", "day": normalise("date", "다음 주 금요일", today=MONDAY, language="ko"),
        "time": normalise("time", "저녁 일곱 시 반", today=MONDAY, between=("18:00", "22:00"), language="ko"),
        "people": normalise("integer", "두 명", today=MONDAY, language="ko")}, "ko")
    assert said == "김민수 님 이름으로 1월 18일 금요일 오후 7시 30분에 2명"


def test_a_pack_whose_values_do_not_fit_fails_naming_the_key(tmp_path):
    pack = tmp_path / "xx.yaml"
    pack.write_text("language: xx\nname: X\nacts: {'yes': [y], 'no': [n], person: [p]}\nsame: {word: s}\n"
                    "values: {dates: {days: {tomorrow: soon}}}\n", encoding="utf-8")
    with pytest.raises(LanguageError, match=r"xx.yaml: values.dates.days.tomorrow"):
        load_pack(pack)


def test_the_minutes_of_a_clock_time_are_never_a_count_of_people():
    """분 counts minutes after an hour and, politely, people: "7시 30분" is half past seven."""
    people = SimpleNamespace(counts=["명", "분"], said_as=["{n}명", "{n}분"], words_for={}, more=[], fewer=[])
    counted = number_words(people, "ko")
    assert said_number("7시 30분으로 해 주세요", counted) is None
    assert said_number("일곱 시 삼십 분에 네 분이요", counted) == 4
    assert said_number("세 분이요", counted) == 3
    assert "30" in without_numbers("7시 30분에 두 명", [counted])
