"""A Korean caller's questions are answered from the restaurant's Korean knowledge, found by the
packaged multilingual encoder (voicebot/brain/read/multilingual_encoder.py), which also picks
the Korean caller's task: a question is not taken for a booking."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from tests.fakes.fake_llm import is_guard
from tests.integration.test_restaurant_dialogs import reservations_url  # noqa: F401  (fixture)
from voicebot.brain.act.toolbox import build_registry
from voicebot.brain.business.profile import load_profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.llm import OpenAIChatClient
from voicebot.brain.read.sentence_encoder import CachingEncoder, MiniLMEncoder
from voicebot.brain.runtime.agent import Agent
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.brain.startup import knowledge_in_languages, knowledge_index
from voicebot.v1 import brain_pb2

pytestmark = pytest.mark.integration


def reads_a_question(body):
    if is_guard(body):
        return "ALLOW"
    return '{"intent": "question"}'


@pytest.fixture(scope="module")
def minilm():
    return CachingEncoder(MiniLMEncoder())


async def test_korean_knowledge_gets_its_own_index_and_min_score(minilm):
    others = await knowledge_in_languages(load_profile("restaurant"), minilm)
    profile, indexes = others.profile, others.knowledge
    try:
        assert others.encoders["ko"].name == "universal-sentence-encoder-multilingual-3"
        assert list(indexes) == ["ko"]
        assert profile.in_language("ko").knowledge.min_score == pytest.approx(0.2)
        assert profile.knowledge.min_score == load_profile("restaurant").knowledge.min_score  # English's own
        [top, *_] = await indexes["ko"].search("혹시 주차할 데 있어요?")
        assert "주차" in top.text
    finally:
        for index in indexes.values():
            await index.aclose()


@pytest.mark.parametrize(("question", "answer_holds"), [
    ("혹시 주차할 데 있어요?", "주차장은 없습니다"),
    ("채식 메뉴도 있나요?", "채식"),
    ("강아지 데리고 가도 돼요?", "강아지"),
    ("공휴일에도 영업하세요? 몇 시에 열어요?", "오후 여섯 시부터"),  # the question word mid-sentence
])
async def test_a_korean_question_is_answered_from_the_korean_knowledge(
        minilm, redis_url, scripted_llm, reservations_url, monkeypatch, question, answer_holds):  # noqa: F811
    monkeypatch.setenv("RESERVATIONS_MCP_URL", reservations_url)
    base = load_profile("restaurant")
    registry, sources = await build_registry(base, wait_s=5)
    english = await knowledge_index(base, minilm)
    others = await knowledge_in_languages(base, minilm)
    profile, indexes = others.profile, others.knowledge
    redis = aioredis.Redis.from_url(redis_url)
    chat = OpenAIChatClient(scripted_llm.base_url, "m", deadline_s=0.5)
    scripted_llm.script = reads_a_question
    agent = Agent(BrainSettings(llm_base_url=scripted_llm.base_url), chat, SessionStore(redis, 60),
                  tools=registry, profile=profile, knowledge=english, encoder=minilm, knowledge_in=indexes,
                  encoders_in=others.encoders)
    try:
        request = brain_pb2.RespondRequest(session_id=uuid.uuid4().hex, turn_id="t1", user_id="alice",
                                           text=question, language="ko")
        said = "".join(e.delta.text for e in [e async for e in agent.respond(request)]
                       if e.WhichOneof("event") == "delta")
        assert answer_holds in said, said
    finally:
        await chat.aclose()
        await redis.aclose()
        for index in [english, *indexes.values()]:
            await index.aclose()
        for source in sources:
            await source.aclose()


@pytest.mark.parametrize(("words", "passed"), [
    ("그 전에, 주차 되나요?", True), ("채식 메뉴도 있나요?", True), ("혹시 주차할 데 있어요?", True),
    ("파이썬으로 정렬 코드 좀 짜 줘", False), ("두통이 심한데 무슨 약 먹어야 해요?", False),
    ("이번 대선 누구 찍어야 돼?", False),
])
async def test_a_korean_turn_is_screened_by_meaning_against_the_english_examples(minilm, words, passed):
    """The guard's quick screen by the multilingual encoder: a Korean question near the
    restaurant's (English) examples passes without the LLM; an off-topic one is left to it."""
    from voicebot.brain.read.guard import TopicGuard
    from voicebot.brain.read.guard_screen import ExampleScreen

    profile = load_profile("restaurant")
    others = await knowledge_in_languages(profile, minilm)
    try:
        korean = ExampleScreen.from_settings(others.encoders["ko"], profile.guard.screen)
        guard = TopicGuard(chat=None, purpose=profile.purpose,
                           screen=ExampleScreen.from_settings(minilm, profile.guard.screen),
                           other_screens=(korean,))
        result = await guard.screened(words, "ko")
        assert result is not None and result.passed is passed, result
        assert await guard.screened(words, "vi") is None  # a language neither encoder knows: the LLM's
    finally:
        for index in others.knowledge.values():
            await index.aclose()
