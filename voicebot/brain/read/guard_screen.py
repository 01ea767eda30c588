"""The topic guard's quick screen: clear in-domain turns pass without asking the LLM.

The LLM guard reads every screened turn on the same server as the reply, and on a CPU its
prefill is compute the reply waits for (~0.3 s of both cores per question on the development
machine). Most turns are plainly about the business, so they are compared first, as sentence
embeddings, with what callers of this business say (the profile's ``guard.screen.examples``)
and with requests the guard exists to block (the language pack's ``examples.blocked``, plus the
profile's ``guard.screen.block_examples``, near-domain requests such as a clinic's dosage questions).

The screen can only let a turn through, never block it: a turn is passed only when it is
close to an allowed example (cosine ``above``) and clearly closer to it than to any blocked
one (``margin``). Everything else, including a sentence that mixes a booking with an
off-topic request, goes to the LLM guard as before. ``make bench-guard`` shows, per
profile, how many in-domain turns the screen passes and that it passes no off-topic one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voicebot.brain.business.profile import ScreenSettings
from voicebot.brain.lang import pack_or_default
from voicebot.brain.read.sentence_encoder import SentenceEncoder


@dataclass(frozen=True)
class ScreenResult:
    passed: bool  # clearly in the domain: the LLM guard is not asked
    allow_similarity: float
    nearest_allow: str
    block_similarity: float
    nearest_block: str

    @property
    def reason(self) -> str:
        return (f"screen: '{self.nearest_allow}' {self.allow_similarity:.2f}, "
                f"blocked '{self.nearest_block}' {self.block_similarity:.2f}")


class ExampleScreen:
    def __init__(self, encoder: SentenceEncoder, examples: list[str] | tuple[str, ...],
                 block_examples: list[str] | tuple[str, ...] = (), above: float = 0.6,
                 margin: float = 0.15, common_blocks: list[str] | tuple[str, ...] = ()) -> None:
        if not examples:
            raise ValueError("the guard's screen needs at least one allowed example")
        self.encoder = encoder
        self.examples = list(examples)
        self.block_examples = [*common_blocks, *block_examples]
        self.above, self.margin = above, margin
        self._allow = encoder.encode(self.examples)
        self._block = encoder.encode(self.block_examples) if self.block_examples else None

    @classmethod
    def from_settings(cls, encoder: SentenceEncoder, settings: ScreenSettings,
                      language: str = "en") -> ExampleScreen | None:
        """A profile's ``guard.screen``, with the requests no business is for in the profile's
        ``language`` (its pack's ``examples.blocked``); None when it lists no examples (no screen)."""
        if not settings.examples:
            return None
        return cls(encoder, settings.examples, settings.block_examples, settings.above, settings.margin,
                   pack_or_default(language).examples.blocked)

    def covers(self, language: str) -> bool:
        """Only languages the encoder knows are screened; others always go to the LLM guard."""
        primary = (language or "en").split("-")[0].lower()
        return primary in self.encoder.languages

    def screen(self, text: str) -> ScreenResult:
        vector = self.encoder.encode([text])[0]
        allow = self._allow @ vector
        best_allow = int(np.argmax(allow))
        allow_sim, block_sim, nearest_block = float(allow[best_allow]), -1.0, ""  # nothing to block
        if self.block_examples:
            block = self._block @ vector
            best_block = int(np.argmax(block))
            block_sim, nearest_block = float(block[best_block]), self.block_examples[best_block]
        passed = allow_sim >= self.above and allow_sim - block_sim >= self.margin
        return ScreenResult(passed, allow_sim, self.examples[best_allow], block_sim, nearest_block)
