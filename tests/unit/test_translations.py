"""A business in each of its languages: the profile's translations over its texts, the language
pack's sentences under them, and each turn answered in the session's language."""

from __future__ import annotations

import json
import uuid

import pytest
import redis.asyncio as aioredis

from tests.fakes.fake_llm import is_guard
from tests.unit.test_agent import PROFILE, ToolLog
from voicebot.brain.business.profile import ProfileError, load_profile, parse_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.lang import language_pack
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.v1 import brain_pb2

KOREAN = {**PROFILE, "languages": ["en", "ko"], "translations": {"ko": {
    "sentences": {"unknown_fact": "죄송하지만 그건 모르겠어요."},
    "tasks": {"book": {"title": "테이블 예약", "fields": {"day": {"ask": "어느 날 오시겠어요?"}}}}}}}


def test_the_restaurant_in_korean_has_its_own_words_then_the_packs_then_the_first_languages():
    restaurant = load_profile("restaurant")
    korean = restaurant.in_language("ko")
    assert korean.sentences.can_help.startswith("테이블 예약")  # the business's own
    assert korean.sentences.goodbye == language_pack("ko").sentences["goodbye"]  # the pack's
    book = korean.tasks["create_reservation"]
    assert book.title == "테이블 예약" and book.fields["people"].ask == "몇 분이세요?"
    assert book.fields["time"].between == ("18:00", "22:00")  # rules stay the first language's
    assert list(book.fields) == list(restaurant.tasks["create_reservation"].fields)
    assert restaurant.in_language("en") is restaurant


@pytest.mark.parametrize(("translations", "error"), [
    ({"fr": {"purpose": "réservations"}}, r"translations: fr is not one of languages"),
    ({"ko": {"tasks": {"dance": {"title": "춤"}}}}, r"translations.ko.tasks: dance is not a task"),
    ({"ko": {"sentences": {"hullo": "안녕"}}}, r"translations.ko: .*hullo"),
    ({"ko": {"greeting_words": ["안녕"]}}, r"translations.ko.greeting_words"),
])
def test_a_translation_that_does_not_fit_the_profile_fails_the_start(translations, error):
    with pytest.raises(ProfileError, match=error):
        parse_profile({**PROFILE, "languages": ["en", "ko"], "translations": translations})


def reads_a_day(body):
    if is_guard(body):
        return "ALLOW"
    return json.dumps({"intent": "book"})


async def test_each_turn_is_answered_in_the_sessions_language(redis_url, scripted_llm):
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    scripted_llm.script = reads_a_day
    agent = Agent(BrainSettings(llm_base_url=scripted_llm.base_url), chat, SessionStore(redis, 60),
                  tools=ToolLog().registry(), profile=parse_profile(KOREAN))

    async def said(text: str, language: str) -> str:
        request = brain_pb2.RespondRequest(session_id=uuid.uuid4().hex, turn_id="t1", user_id="alice",
                                           text=text, language=language)
        events = [e async for e in agent.respond(request)]
        return "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta")

    try:
        assert await said("테이블 예약하고 싶어요", "ko") == "어느 날 오시겠어요?"
        assert await said("I'd like to book a table", "en") == "Which day?"
        assert await said("I'd like to book a table", "fr") == "Which day?"  # not spoken: the first
        assert (await said("안녕하세요", "ko")).startswith("안녕하세요, Joe입니다.")
    finally:
        await chat.aclose()
        await redis.aclose()


def test_a_field_the_first_language_leaves_to_the_schema_can_be_asked_in_another():
    profile = parse_profile({**KOREAN, "translations": {"ko": {"tasks": {"book": {"fields": {
        "party": {"ask": "몇 분이세요?", "counts": ["명"]}}}}}}})
    field = profile.in_language("ko").tasks["book"].fields["party"]
    assert (field.ask, field.counts) == ("몇 분이세요?", ["명"])
    assert "party" not in profile.tasks["book"].fields


def test_a_business_whose_first_language_is_korean_says_the_brains_own_sentences_in_korean():
    hanok = parse_profile({"name": "한옥", "languages": ["ko"], "sentences": {"goodbye": "또 오세요!"}})
    assert hanok.sentences.goodbye == "또 오세요!"  # the business's own
    assert hanok.sentences.fallback == language_pack("ko").sentences["fallback"]  # its language's
    assert parse_profile({"name": "Joe's"}).sentences.fallback == language_pack("en").sentences["fallback"]
