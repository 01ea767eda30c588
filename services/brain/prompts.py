"""The voice-first system prompt. Kept byte-stable per configuration: it is
the start of every prompt, which is what the LLM server's prefix cache reuses."""

from __future__ import annotations

# Short on purpose: given step-by-step tool instructions, the embedded 1.5B model recites
# them to the caller; with this sentence it sometimes calls find_slots (not reliably).
BOOKING_STEPS = " Use tools to check availability and to propose bookings."


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
