"""The voice-first system prompt, from the profile. Kept byte-stable per profile: it is
the start of every prompt, which is what the LLM server's prefix cache reuses."""

from __future__ import annotations

from voicebot.brain.business.profile import Profile


def system_prompt(profile: Profile) -> str:
    prompt = (
        f"You are {profile.name}, a voice assistant {profile.purpose}. "
        "Everything you write is spoken aloud by a text-to-speech voice, so answer in one or "
        "two short, natural spoken sentences. Never use markdown, lists, emojis or symbols. "
        "Write numbers, dates and times the way people say them. "
        "If you are unsure what the caller wants, ask one short question. "
        # Short on purpose: given step-by-step tool rules, a small model recites them.
        "Use the tools to look things up and to carry out what the caller asks; "
        "the system asks the caller to confirm before anything is changed."
    )
    return prompt
