"""What code says on the test stack (tests/conftest.py ``services``): the business's FAQ answers,
spoken verbatim, and its fixed sentences (tests/fakes/profiles/stack.yaml). The model only reads."""

from __future__ import annotations

from tests.conftest import STACK_PROFILE
from voicebot.brain.business.profile import load_profile

PROFILE = load_profile(str(STACK_PROFILE))
PARKING = "Do you have parking?"
HOURS = "What are your opening hours?"
MENU = "Tell me about the menu."  # its answer is long: barge-in tests talk over it
TABLE = "A table for two, please."
# No question and no task: the brain needs the model's reading of these words, so with the
# model down (or slow, or killed) the caller hears the fallback (or waits for the reading).
NEEDS_READING = "My cousin says hello to the chef."
FALLBACK = PROFILE.sentences.fallback
# How code's reply to words the knowledge has no answer for begins.
UNKNOWN_FACT = PROFILE.sentences.unknown_fact


def answer(question: str) -> str:
    """The FAQ answer the brain speaks for one of the profile's questions."""
    for entry in PROFILE.knowledge.faq:
        if question in ([entry.q] if isinstance(entry.q, str) else entry.q):
            return " ".join(entry.a.split())
    raise KeyError(question)
