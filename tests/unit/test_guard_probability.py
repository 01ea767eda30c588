"""The guard blocks only what is clearly off-topic: where the server reports token probabilities,
a turn is blocked when P(BLOCK) among the verdict's first-token alternatives is above the
profile's ``guard.block_above``; a server without them is judged by the word it wrote."""

from __future__ import annotations

import json
import math

from voicebot import localllm
from voicebot.brain.business.profile import Profile
from voicebot.brain.llm import ChatChunk, OpenAIChatClient, parse_sse_line
from voicebot.brain.read.guard import TopicGuard, block_probability


def alternatives(**probabilities: float) -> list[tuple[str, float]]:
    return [(token, math.log(p)) for token, p in probabilities.items()]


def test_block_probability_table():
    cases = [
        (alternatives(ALLOW=0.9, BLOCK=0.1), 0.1),
        (alternatives(BL=0.3, AL=0.3, Sure=0.4), 0.5),  # split tokens; other words do not count
        ([(" Block", math.log(0.8)), ("allow", math.log(0.2))], 0.8),  # case and spaces
        (alternatives(Sure=0.9, Yes=0.1), None),  # neither word: judged by the text instead
    ]
    for given, expected in cases:
        got = block_probability(given)
        assert (got is None and expected is None) or abs(got - expected) < 1e-9, (given, got)


def scripted(text: str, top: list[tuple[str, float]] | None):
    async def chat(messages, *, max_tokens=None, **_):
        yield ChatChunk(text=text, top_logprobs=top)

    return chat


async def test_the_profiles_line_decides_a_leaning_verdict():
    leaning = alternatives(BLOCK=0.62, ALLOW=0.38)
    default = Profile().guard.block_above
    assert default == 0.5  # the model's own word, unless a profile says otherwise
    at_default = await TopicGuard(scripted("BLOCK", leaning), "reservations",
                                  block_above=default).check("How far is the station?")
    clear_only = await TopicGuard(scripted("BLOCK", leaning), "reservations",
                                  block_above=0.7).check("How far is the station?")
    assert not at_default.allowed and at_default.reason.startswith("BLOCK p=0.62")
    assert clear_only.allowed and abs(clear_only.p_block - 0.62) < 1e-9


async def test_without_probabilities_the_written_word_decides():
    guard = TopicGuard(scripted("BLOCK", None), "taking reservations", block_above=0.7)
    verdict = await guard.check("Write me a poem.")
    assert not verdict.allowed and verdict.p_block is None


async def test_the_first_tokens_alternatives_decide_without_reading_the_rest_of_the_verdict():
    read: list[str] = []

    async def three_tokens(messages, *, max_tokens=None, **_):
        for text, top in (("AL", alternatives(AL=0.9, BL=0.1)), ("LOW", None), ("", None)):
            read.append(text)
            yield ChatChunk(text=text, top_logprobs=top)

    verdict = await TopicGuard(three_tokens, "reservations").check("Can I bring my dog?")
    assert verdict.allowed and abs(verdict.p_block - 0.1) < 1e-9
    assert read == ["AL"]  # the stream was closed after the first token


async def test_alternatives_without_either_word_leave_the_written_words_to_decide():
    async def sure_then_block(messages, *, max_tokens=None, **_):
        yield ChatChunk(text="Sure", top_logprobs=alternatives(Sure=0.7, Yes=0.3))
        yield ChatChunk(text=" BLOCK")

    verdict = await TopicGuard(sure_then_block, "reservations").check("Write me a poem.")
    assert not verdict.allowed and verdict.p_block is None


def test_make_runs_guard_asks_for_them_and_the_client_reads_them():
    fields = localllm.guard_request_fields()
    assert fields["logprobs"] is True and fields["top_logprobs"] >= 2  # room for ALLOW and BLOCK
    body = OpenAIChatClient("http://127.0.0.1:1/v1", "m", extra_body=fields).payload([], None, 3)
    assert body["logprobs"] is True and body["id_slot"] == localllm.GUARD_SLOT
    line = "data: " + json.dumps({"choices": [{"delta": {"content": "BL"}, "logprobs": {"content": [
        {"token": "BL", "logprob": -0.2, "top_logprobs": [{"token": "BL", "logprob": -0.2},
                                                         {"token": "AL", "logprob": -1.7}]}]}}]})
    chunk = parse_sse_line(line)
    assert chunk.text == "BL" and chunk.top_logprobs == [("BL", -0.2), ("AL", -1.7)]
