"""The voice-first system prompt. Kept byte-stable per configuration: it is
the start of every prompt, which is what the LLM server's prefix cache reuses."""

from __future__ import annotations

BOOKING_STEPS = (
    "\n\nTools (use them; do not describe them to the caller):\n"
    "- When the caller has given a day, a time and the number of people, your whole answer is "
    'a find_slots tool call, for example {"name": "find_slots", "arguments": {"day": "friday", '
    '"time": "19:00", "people": 2}}.\n'
    "- With a slot reference from its result (S1, S2) and the caller's name, your whole answer "
    "is a propose_reservation tool call. Then read the proposal back and ask: shall I book it?\n"
    "- You never book anything yourself; the system books after the caller says yes.\n"
    "- To cancel: find_reservation, then propose_cancellation. For a person: transfer_to_human."
)


def system_prompt(bot_name: str, domain: str, tool_names: frozenset[str] = frozenset()) -> str:
    prompt = (
        f"You are {bot_name}, a voice assistant {domain}. "
        "Everything you write is spoken aloud by a text-to-speech voice, so answer in one or "
        "two short, natural spoken sentences. Never use markdown, lists, emojis or symbols. "
        "Write numbers, dates and times the way people say them. "
        "If you are unsure what the caller wants, ask one short question."
    )
    if {"find_slots", "propose_reservation"} <= tool_names:
        prompt += BOOKING_STEPS
    return prompt
