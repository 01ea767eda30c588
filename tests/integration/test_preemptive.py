"""Preemptive replies through the real gateway, STT (Whisper) and brain: spoken turns at real pace.

The brain starts on the STT's speculative transcript before the endpoint; the turn is committed
when the final has the same words, and a start on words the caller then went on from is
discarded without a trace in the history.
"""

from __future__ import annotations

import re

import httpx
import numpy as np
import pytest
import redis.asyncio as aioredis

from tests.audio import silence, speech
from tests.fakes.fake_llm import is_guard, last_user_text
from tests.fakes.stack_profile import PARKING, answer
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.common.audio import float_to_pcm16, write_wav
from voicebot.gateway.cli import call

pytestmark = pytest.mark.integration


def preemptive_counts(services) -> dict[str, float]:
    text = httpx.get(f"{services.http_url}/metrics").text
    return {m[1]: float(m[2]) for m in re.finditer(
        r'^voicebot_gateway_preemptive_replies_total\{outcome="(\w+)"\} (\S+)$', text, re.M)}


def wav(tmp_path, *parts) -> str:
    path = tmp_path / "speech.wav"
    write_wav(path, float_to_pcm16(np.concatenate([silence(400), *parts, silence(300)])), 16000)
    return str(path)


async def history(services, session_id: str):
    redis = aioredis.Redis.from_url(services.redis_url)
    try:
        return (await SessionStore(redis, 60).load("alice", session_id)).turns
    finally:
        await redis.aclose()


async def test_a_spoken_question_is_answered_once_whether_or_not_a_start_was_made_early(
        services, scripted_llm, tmp_path):
    before = preemptive_counts(services)
    result = await call(services.ws_url, "tok-alice", wav=wav(tmp_path, speech(PARKING)))
    after = preemptive_counts(services)
    assert result.replies == [answer(PARKING)] and len(result.audio) > 0
    # Whether the speculative decode came before the endpoint depends on the decode's speed;
    # every start made was either committed or discarded, never left running.
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in ("started", "committed", "discarded")}
    assert delta["started"] == delta["committed"] + delta["discarded"] and delta["committed"] <= 1
    [turn] = await history(services, result.session_id)
    assert turn.assistant == answer(PARKING)


async def test_a_start_on_words_the_caller_went_on_from_leaves_no_trace(services, scripted_llm, tmp_path):
    scripted_llm.script = lambda body: "ALLOW" if is_guard(body) else f"You said: {last_user_text(body)}"
    audio = wav(tmp_path, speech("I would like a table."), silence(220), speech("For two people, please."))
    result = await call(services.ws_url, "tok-alice", wav=audio)
    said = [last_user_text(r) for r in scripted_llm.requests if not is_guard(r)]
    [turn] = await history(services, result.session_id)  # one turn: the whole utterance
    assert "two people" in turn.user.lower() and result.replies == [turn.assistant]
    # Whatever was started on the first words alone (if the decode came in time) was discarded:
    # the history holds only the committed turn.
    assert all("two people" in s.lower() for s in said[-1:])
