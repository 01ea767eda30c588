"""Urgent situations the business names are recognised first, by meaning, in any phrasing.

The screen is the real packaged sentence encoder (the check is about meaning); the model
is a scripted chat function, so each rule of the decision is shown on its own: sure by the
screen alone, far from every example without the model, in between by the model's label,
and a model that cannot answer.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from voicebot.brain.business.profile import ProfileError, UrgentSettings, load_profile, parse_profile
from voicebot.brain.llm import ChatChunk, LLMUnavailable
from voicebot.brain.read.sentence_encoder import MiniLMEncoder
from voicebot.brain.read.urgent import UrgentScreen, clauses, urgent_prompt

SETTINGS = UrgentSettings.model_validate({
    "situations": [
        {"name": "emergency", "describe": "a medical emergency now: chest pain, trouble breathing",
         "say": "Please hang up and call 911 now.",
         "examples": ["I have chest pain right now.", "I can't breathe.", "Someone collapsed."]},
        {"name": "gas", "describe": "a smell of gas in the building", "say": "Leave the building now.",
         "examples": ["I can smell gas in my kitchen."]},
    ],
    "routine": ["I'd like an appointment about my back pain."],
})


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return MiniLMEncoder()


class ScriptedChat:
    """Answers the urgent schema with ``label`` (or fails), and records what it was asked."""

    def __init__(self, label: str | None = "none", delay_s: float = 0.0) -> None:
        self.label, self.delay_s, self.asked = label, delay_s, []

    async def __call__(self, messages, **kwargs):
        self.asked.append((messages, kwargs))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.label is None:
            raise LLMUnavailable("down")
        yield ChatChunk(text=json.dumps({"situation": self.label}))


def screen(encoder, chat, **changes) -> UrgentScreen:
    return UrgentScreen(SETTINGS.model_copy(update=changes), encoder, "Ava, a clinic", chat, timeout_s=0.5)


async def test_words_close_to_an_example_are_urgent_without_asking_the_model(encoder):
    chat = ScriptedChat("none")
    check = await screen(encoder, chat, sure_above=0.7).check("I have chest pain right now, please help.")
    assert check.urgent and check.situation.name == "emergency" and check.by == "screen"
    assert chat.asked == []


async def test_words_far_from_every_example_are_not_urgent_without_asking_the_model(encoder):
    chat = ScriptedChat("emergency")
    check = await screen(encoder, chat).check("What are your opening hours on Saturday?")
    assert not check.urgent and check.by == "screen"
    assert chat.asked == []


async def test_in_between_the_models_label_decides(encoder):
    text = "My husband just fell over in the kitchen and he isn't answering me."
    yes = await screen(encoder, ScriptedChat("emergency"), sure_above=0.99, ask_above=0.1).check(text)
    no = await screen(encoder, ScriptedChat("none"), sure_above=0.99, ask_above=0.1).check(text)
    assert yes.urgent and yes.by == "model" and yes.situation.name == "emergency"
    assert not no.urgent and no.by == "model"


async def test_the_model_is_asked_under_a_schema_that_only_allows_a_situation_or_none(encoder):
    chat = ScriptedChat("gas")
    check = await screen(encoder, chat, sure_above=0.99, ask_above=0.0).check("There's a funny smell.")
    assert check.situation.name == "gas"
    [(messages, kwargs)] = chat.asked
    schema = kwargs["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["situation"]["enum"] == ["none", "emergency", "gas"]
    assert messages[0]["content"] == urgent_prompt("Ava, a clinic", list(SETTINGS.situations))
    assert messages[-1]["content"].endswith("There's a funny smell.")


async def test_a_label_outside_the_schema_is_no_situation(encoder):
    check = await screen(encoder, ScriptedChat("fire"), sure_above=0.99, ask_above=0.0).check("Help me.")
    assert not check.urgent


async def test_a_model_that_cannot_answer_errs_on_the_side_of_urgent_when_nearer_a_situation(encoder):
    near = await screen(encoder, ScriptedChat(None), sure_above=0.99, near_above=0.99, ask_above=0.1).check(
        "My chest hurts a lot.")
    routine = await screen(encoder, ScriptedChat(None), sure_above=0.99, ask_above=0.1).check(
        "I'd like to book a visit about my back pain next week.")
    assert near.urgent and near.by == "model-failed"
    assert not routine.urgent and routine.by == "model-failed"


async def test_a_slow_model_is_not_waited_for_past_the_timeout(encoder):
    slow = screen(encoder, ScriptedChat("none", delay_s=5.0), sure_above=0.99, near_above=0.99, ask_above=0.1)
    started = asyncio.get_running_loop().time()
    check = await slow.check("My chest hurts a lot.")
    assert asyncio.get_running_loop().time() - started < 3.0  # timeout 0.5 s, with margin
    assert check.by == "model-failed"


async def test_clearly_nearer_a_situation_than_anything_routine_is_urgent_without_the_model(encoder):
    chat = ScriptedChat("none")
    check = await screen(encoder, chat, sure_above=0.99, near_above=0.5, margin=0.2).check(
        "My chest hurts a lot.")
    assert check.urgent and check.by == "screen" and check.score - check.routine_score >= 0.2
    assert chat.asked == []


async def test_the_model_reads_the_clause_nearest_a_situation(encoder):
    chat = ScriptedChat("emergency")
    text = "Could I come in this afternoon with Dr. Kim? My wife collapsed and I can't wake her."
    await screen(encoder, chat, sure_above=0.99, near_above=0.99, ask_above=0.1).check(text)
    [(messages, _)] = chat.asked
    assert messages[-1]["content"] == "The caller said: My wife collapsed and I can't wake her."


async def test_an_emergency_in_the_second_half_of_a_booking_request_is_found(encoder):
    text = "Can I book an appointment with Dr. Kim for Thursday morning? I have chest pain right now."
    assert clauses(text)[1:] == ["Can I book an appointment with Dr. Kim for Thursday morning?",
                                 "I have chest pain right now."]
    check = await screen(encoder, ScriptedChat("none"), sure_above=0.9).check(text)
    assert check.urgent and check.by == "screen"


def test_a_situation_without_a_sentence_fails_the_start_naming_it():
    raw = {"urgent": {"situations": [{"name": "emergency", "describe": "a medical emergency",
                                      "examples": ["I can't breathe."], "say": " "}]}}
    with pytest.raises(ProfileError, match=r"urgent\.situations\.0\.say"):
        parse_profile(raw)
    del raw["urgent"]["situations"][0]["say"]
    with pytest.raises(ProfileError, match=r"urgent\.situations\.0\.say"):
        parse_profile(raw)


def test_a_situation_without_examples_fails_the_start():
    raw = {"urgent": {"situations": [{"name": "emergency", "describe": "a medical emergency",
                                      "examples": [], "say": "Call 911."}]}}
    with pytest.raises(ProfileError, match=r"urgent\.situations\.0\.examples"):
        parse_profile(raw)


def test_the_clinic_ships_with_its_emergencies(encoder):
    clinic = load_profile("clinic")
    names = [s.name for s in clinic.urgent.situations]
    assert names == ["emergency", "crisis"]
    assert all("nine one one" in s.say for s in clinic.urgent.situations)


def test_instructions_in_an_old_profile_are_ignored_with_a_warning(caplog):
    profile = parse_profile({"name": "Ava", "instructions": "Be nice."})
    assert profile.name == "Ava" and not hasattr(profile, "instructions")
    assert "'instructions' is not read" in caplog.text
