"""The topic guard's quick screen: a turn plainly about the business passes without an LLM call;
everything else is asked of the LLM, as without a screen. The screen never blocks.

With the real encoder and the shipped profiles: no request of the off-topic corpus (mixes of a
booking and an off-topic request, near-domain medical questions included) passes the screen, and
a good share of the in-domain questions do. With a fake encoder: who decided, what the LLM was
asked, and what happens when the screen cannot judge.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.fakes.engines import FakeSentenceEncoder
from voicebot.brain.business.profile import load_profile
from voicebot.brain.llm import ChatChunk
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.read.guard_screen import ExampleScreen
from voicebot.brain.read.sentence_encoder import MiniLMEncoder

CORPORA = Path(__file__).resolve().parents[1] / "guard_corpora"


def corpus(name: str, profile: str) -> list[str]:
    data = yaml.safe_load((CORPORA / f"{name}.yaml").read_text())
    return [item["text"] for item in data[profile] if not item.get("act")]


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return MiniLMEncoder()


def profile_screen(encoder: MiniLMEncoder, name: str) -> ExampleScreen:
    return ExampleScreen.from_settings(encoder, load_profile(name).guard.screen)


@pytest.mark.parametrize("name", ["restaurant", "clinic"])
def test_no_off_topic_request_passes_the_screen(encoder, name):
    screen = profile_screen(encoder, name)
    results = {text: screen.screen(text) for text in corpus("off_topic", name)}
    assert {text: r.reason for text, r in results.items() if r.passed} == {}


@pytest.mark.parametrize(("name", "at_least"), [("restaurant", 0.6), ("clinic", 0.4)])
def test_most_plain_questions_about_the_business_pass_the_screen(encoder, name, at_least):
    screen = profile_screen(encoder, name)
    questions = corpus("in_domain", name)
    passed = [text for text in questions if screen.screen(text).passed]
    assert len(passed) >= at_least * len(questions), (len(passed), len(questions))


def test_only_the_encoders_languages_are_screened(encoder):
    screen = profile_screen(encoder, "restaurant")
    assert screen.covers("en") and screen.covers("en-GB") and screen.covers("")
    assert not screen.covers("ko")


# The logic, with a fake encoder: "booking" is close to the allowed example, "mixed" is as close to a
# blocked one, "code" is the blocked one.
VECTORS = {"I'd like a table.": [1, 0, 0], "Write code.": [0, 1, 0],
           "booking": [0.95, 0.05, 0.3], "mixed": [0.7, 0.7, 0.1], "code": [0, 1, 0]}


def recording_llm(word: str = "ALLOW"):
    asked: list[str] = []

    async def chat(messages, *, max_tokens=None, **_):
        asked.append(messages[-1]["content"])
        yield ChatChunk(text=word)

    return chat, asked


def guard_with(encoder: FakeSentenceEncoder, word: str = "ALLOW"):
    chat, asked = recording_llm(word)
    screen = ExampleScreen(encoder, ["I'd like a table."], ["Write code."], above=0.6, margin=0.15,
                           common_blocks=())  # the fake knows no vectors for the core's own list
    return TopicGuard(chat, "taking reservations", screen=screen), asked


async def test_who_decides_each_turn():
    guard, asked = guard_with(FakeSentenceEncoder(VECTORS), word="BLOCK")
    cases = [  # (words, language, allowed, decided by, the LLM asked)
        ("booking", "en", True, "screen", False),
        ("mixed", "en", False, "llm", True),
        ("code", "en", False, "llm", True),
        ("booking", "ko", False, "llm", True),
        ("never seen", "en", False, "llm", True),
    ]
    for words, language, allowed, by, llm_asked in cases:
        asked.clear()
        verdict = await guard.check(words, language)
        assert (verdict.allowed, verdict.by, bool(asked)) == (allowed, by, llm_asked), words
        if by == "screen":
            assert verdict.reason.startswith("screen: 'I'd like a table.'")


async def test_a_broken_screen_leaves_the_verdict_to_the_llm():
    encoder = FakeSentenceEncoder(VECTORS)
    guard, asked = guard_with(encoder, word="ALLOW")
    encoder.fail = True
    verdict = await guard.check("booking")
    assert verdict.allowed and verdict.by == "llm" and asked == ["Caller said: booking"]


async def test_words_the_screen_passes_need_no_llm_prefill():
    guard, asked = guard_with(FakeSentenceEncoder(VECTORS))
    await guard.prefill("booking")
    assert asked == []
    await guard.prefill("mixed")
    assert asked == ["Caller said: mixed"]


def test_a_screen_needs_examples():
    with pytest.raises(ValueError, match="at least one allowed example"):
        ExampleScreen(FakeSentenceEncoder(VECTORS), [])


async def test_the_warm_up_asks_the_llm_even_for_words_the_screen_would_pass():
    encoder = FakeSentenceEncoder({**VECTORS, "Hello.": [1, 0, 0]})
    guard, asked = guard_with(encoder)
    assert (await guard.check("Hello.")).by == "screen" and asked == []
    await guard.warm()
    assert asked == ["Caller said: Hello."]


@pytest.mark.xfail(strict=True, reason="known: the screen reads the words' topic, not whose table; "
                   "0.76 to 'I'd like to reserve a table for dinner.' A block example for it cost "
                   "three plain booking questions (make bench-guard judges the screen against the "
                   "model's own verdicts).")
def test_a_booking_at_another_restaurant_is_left_to_the_llm(encoder):
    screen = profile_screen(encoder, "restaurant")
    assert not screen.screen("Can you book me a table at another restaurant?").passed
