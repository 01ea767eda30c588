"""The OpenAI-compatible streaming client against a scripted model over real HTTP."""

import pytest

from voicebot.brain.llm import LLMRequestError, LLMUnavailable, OpenAIChatClient
from voicebot.devstack import free_port


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self):
        return self.now

    async def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def client(url, clock=None, deadline=8.0):
    clock = clock or FakeClock()
    return OpenAIChatClient(url, "m", deadline_s=deadline, sleep=clock.sleep, clock=clock)


async def collect(chat):
    return "".join([c.text async for c in chat([{"role": "user", "content": "hi"}])])


async def test_streams_text(scripted_llm):
    scripted_llm.script = lambda _b: "one two three four five"
    assert await collect(client(scripted_llm.base_url)) == "one two three four five"
    assert scripted_llm.requests[-1]["stream"] is True


async def test_5xx_is_retried_with_backoff(scripted_llm):
    scripted_llm.fail_next = 2
    clock = FakeClock()
    assert await collect(client(scripted_llm.base_url, clock)) == "Sure, I can help with that."
    assert clock.sleeps == [0.25, 0.5]


async def test_server_down_until_the_deadline_is_unavailable():
    clock = FakeClock()
    with pytest.raises(LLMUnavailable):
        await collect(client(f"http://127.0.0.1:{free_port()}/v1", clock, deadline=3.0))
    assert sum(clock.sleeps) <= 3.0 and len(clock.sleeps) >= 3


async def test_4xx_is_not_retried(scripted_llm):
    scripted_llm.fail_next, scripted_llm.fail_status = 1, 400
    clock = FakeClock()
    try:
        with pytest.raises(LLMRequestError):
            await collect(client(scripted_llm.base_url, clock))
    finally:
        scripted_llm.fail_status = 503
    assert clock.sleeps == []


async def test_server_specific_fields_go_with_every_request(scripted_llm):
    chat = OpenAIChatClient(scripted_llm.base_url, "m", extra_body={"id_slot": 1, "grammar": 'root ::= "A"'})
    await collect(chat)
    await chat.aclose()
    body = scripted_llm.requests[-1]
    assert body["id_slot"] == 1 and body["grammar"] == 'root ::= "A"' and body["model"] == "m"


async def test_a_structured_answer_is_asked_for_greedily_and_speech_at_the_set_temperature(scripted_llm):
    chat = OpenAIChatClient(scripted_llm.base_url, "m", temperature=0.3)
    scripted_llm.script = lambda _body: '{"decision": "yes"}'
    await collect(chat)
    assert scripted_llm.requests[-1]["temperature"] == 0.3
    async for _ in chat([{"role": "user", "content": "hi"}], response_format={"type": "json_object"}):
        pass
    await chat.aclose()
    assert scripted_llm.requests[-1]["temperature"] == 0.0
