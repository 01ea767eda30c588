"""What the brain builds from the profile at start besides its tools: the sentence encoders,
the knowledge index of each language, the guard's quick screen. A language the default encoder
was not trained on (Korean) gets the multilingual encoder for its task picker and knowledge."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from voicebot.brain.business.knowledge import KnowledgeIndex, open_knowledge
from voicebot.brain.business.profile import Profile, ProfileError
from voicebot.brain.business.translations import Translation
from voicebot.brain.config import BrainSettings
from voicebot.brain.read.guard_screen import ExampleScreen
from voicebot.brain.read.multilingual_encoder import UseMultilingualEncoder
from voicebot.brain.read.sentence_encoder import (
    CachingEncoder,
    EncoderUnavailable,
    MiniLMEncoder,
    SentenceEncoder,
)

log = logging.getLogger("brain")


def sentence_encoder(settings: BrainSettings, profile: Profile) -> SentenceEncoder | None:
    """The packaged sentence encoder (the guard's screen, the task picker, the knowledge index).
    Missing: a profile with knowledge cannot start; without knowledge the brain runs on rules
    and the model, and the log says why."""
    try:
        # One turn's words are encoded once for the picker, the screens and the knowledge search.
        return CachingEncoder(MiniLMEncoder(settings.guard_encoder_dir or None))
    except EncoderUnavailable as exc:
        if profile.knowledge.faq or profile.knowledge.files:
            raise ProfileError(f"knowledge: the sentence encoder is needed: {exc}") from None
        log.warning("sentence encoder unavailable: %s", exc)
        return None


LEXICAL_FLOOR = 0.3


async def knowledge_index(profile: Profile, encoder: SentenceEncoder | None) -> KnowledgeIndex | None:
    """The profile's knowledge in its index (embedded, or the Qdrant server it names), with
    retrieval started early on the caller's words so far."""
    settings = profile.knowledge
    if encoder is None or not (settings.faq or settings.files):
        return None
    # The index returns passages down to LEXICAL_FLOOR; the brain keeps those below the profile's
    # min_score only when they share the question's own words (answers.shares_words).
    floor = settings.model_copy(update={"min_score": min(settings.min_score, LEXICAL_FLOOR)})
    index = await open_knowledge(floor, Path(profile.base_dir or "."), encoder)
    log.info("knowledge ready", extra={"store": settings.store_url or "embedded"})
    return index


@dataclass
class OtherLanguages:
    """What a profile's languages beyond the default encoder's need of their own."""

    profile: Profile  # with their knowledge's min_score on the multilingual encoder's scale
    knowledge: dict[str, KnowledgeIndex] = field(default_factory=dict)
    encoders: dict[str, SentenceEncoder] = field(default_factory=dict)


async def knowledge_in_languages(profile: Profile, encoder: SentenceEncoder | None) -> OtherLanguages:
    """For each other language of the profile the default encoder was not trained on (Korean):
    the multilingual encoder, which picks its tasks and searches its knowledge (its
    translation's files, else the first language's), and the profile with that language's
    ``min_score`` on the multilingual encoder's scale where its translation sets none. Without
    the multilingual encoder those languages use the default's, and the log says so."""
    others = [code for code in profile.languages[1:] if encoder is None or code not in encoder.languages]
    if not others:
        return OtherLanguages(profile)
    try:
        multilingual = CachingEncoder(UseMultilingualEncoder())
    except EncoderUnavailable as exc:
        log.warning("multilingual encoder unavailable: %s", exc)
        return OtherLanguages(profile)
    indexes, translations = {}, dict(profile.translations)
    for code in others:
        text = translations.get(code) or Translation()
        knowledge = profile.in_language(code).knowledge
        if (text.knowledge is None or "min_score" not in text.knowledge.model_fields_set) \
                and multilingual.min_score is not None:
            knowledge = knowledge.model_copy(update={"min_score": multilingual.min_score})
        translations[code] = text.model_copy(update={"knowledge": knowledge})
        speaking = profile.model_copy(update={"translations": translations}).in_language(code)
        if (index := await knowledge_index(speaking, multilingual)) is not None:
            indexes[code] = index
    return OtherLanguages(profile.model_copy(update={"translations": translations}), indexes,
                          dict.fromkeys(others, multilingual))


def guard_screen(settings: BrainSettings, profile: Profile,
                 encoder: SentenceEncoder | None) -> ExampleScreen | None:
    """The profile's quick screen, or None (no examples, turned off, or no encoder: then the LLM
    guard judges every screened turn, as without a screen)."""
    screen = profile.guard.screen
    if not settings.guard_screen or not screen.examples or encoder is None:
        return None
    result = ExampleScreen.from_settings(encoder, screen, profile.languages[0])
    log.info("guard screen ready", extra={"encoder": encoder.name, "examples": len(result.examples),
                                          "block_examples": len(result.block_examples)})
    return result
