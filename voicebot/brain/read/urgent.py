"""Urgent situations the business names, recognised before anything else in a turn.

A profile's ``urgent:`` lists situations in words (a clinic's medical emergency, a
caller who may harm themselves, a gas leak at a plumber's), each with examples of
how callers say it and the sentence to say. Every turn is checked first, by meaning:

1. the quick screen: the turn, and each of its sentences and clauses (a booking request
   may carry the emergency in its second half), as sentence embeddings against every
   situation's examples and the profile's ``routine`` ones (close-sounding turns that are
   not urgent: a past symptom, a routine check);
2. at or above ``sure_above`` to a situation's example: urgent, without the model;
   below ``ask_above`` to every example: not urgent;
3. in between, the model reads the words under a schema with one label (a situation's
   name or ``none``), beside the turn's other work.

What the check cannot finish (the model failed or timed out) counts as urgent when the
screen put the turn nearer to a situation than to anything routine: a false alarm costs a
sentence, a missed emergency costs more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voicebot.brain.business.profile import UrgentSettings, UrgentSituation
from voicebot.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable
from voicebot.brain.metrics import URGENT_CHECKS
from voicebot.brain.read.sentence_encoder import SentenceEncoder

log = logging.getLogger(__name__)
NONE = "none"
# Sentence and clause ends in any script: "…, I'm having chest pain right now."
_CLAUSE_END = re.compile(r"(?<=[.?!;:,。？！、])\s*")
MIN_CLAUSE_CHARS = 8
_ABBREVIATION = re.compile(r"(?:^|\s)[A-Z][a-z]{0,2}\.$")  # "Dr.", "St.", "Mr.": not a sentence end


@dataclass(frozen=True)
class UrgentCheck:
    situation: UrgentSituation | None  # None: nothing urgent
    score: float  # the nearest situation example's cosine similarity
    routine_score: float
    by: str  # "screen" | "model" | "model-failed"
    ms: float = 0.0
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def urgent(self) -> bool:
        return self.situation is not None


def clauses(text: str) -> list[str]:
    """The whole turn, then each sentence or clause long enough to mean something alone."""
    parts: list[str] = []
    for part in (p.strip() for p in _CLAUSE_END.split(text.strip())):
        if parts and _ABBREVIATION.search(parts[-1]):  # "Dr. Kim" is not two clauses
            parts[-1] = f"{parts[-1]} {part}"
        else:
            parts.append(part)
    found = [text.strip()]
    for part in parts:
        if len(part) >= MIN_CLAUSE_CHARS and part not in found:
            found.append(part)
    return found


def urgent_prompt(business: str, situations: list[UrgentSituation]) -> str:
    """The model's instructions: fixed per profile, so the LLM server keeps them cached."""
    lines = "\n".join(f"- {s.name}: {' '.join(s.describe.split())}" for s in situations)
    return (f"You check what a caller to {business} says for an urgent situation happening now. "
            f"Write compact JSON with one key, situation, one of:\n{lines}\n"
            f"- {NONE}: anything else (a booking, a question, or a problem that is routine, mild "
            f"or in the past)")


class UrgentScreen:
    def __init__(self, settings: UrgentSettings, encoder: SentenceEncoder, business: str,
                 chat: ChatFunction | None = None, timeout_s: float = 8.0) -> None:
        self.settings = settings
        self.situations = list(settings.situations)
        self.encoder = encoder
        self.chat = chat
        self.timeout_s = timeout_s
        self._owner = [s for s in self.situations for _ in s.examples]
        self._examples = encoder.encode([e for s in self.situations for e in s.examples])
        self._routine = encoder.encode(list(settings.routine)) if settings.routine else None
        self.system = urgent_prompt(business, self.situations)

    def screen(self, text: str) -> tuple[UrgentSituation, float, float, str]:
        """The nearest situation, its score, the nearest routine example's score, and the part of
        the words (the whole turn or one clause) nearest to the situation."""
        parts = clauses(text)
        vectors = self.encoder.encode(parts)
        scores = vectors @ self._examples.T  # clause x example
        row, column = np.unravel_index(int(np.argmax(scores)), scores.shape)
        routine = float((vectors @ self._routine.T).max()) if self._routine is not None else 0.0
        return self._owner[int(column)], float(scores[row, column]), routine, parts[int(row)]

    def _sure(self, score: float, routine: float) -> bool:
        settings = self.settings
        if score >= settings.sure_above:
            return True
        clear = score >= settings.near_above and score - routine >= settings.margin
        return self._routine is not None and clear

    async def check(self, text: str) -> UrgentCheck:
        started = time.perf_counter()
        if not text.strip():
            return UrgentCheck(None, 0.0, 0.0, "screen")
        nearest, score, routine, part = await asyncio.to_thread(self.screen, text)
        if self._sure(score, routine):
            return self._checked(nearest, score, routine, "screen", started)
        if score < self.settings.ask_above or self.chat is None:
            return self._checked(None, score, routine, "screen", started)
        # The clause nearest a situation, alone: "Could I come in today? My wife collapsed." is
        # read for the collapse, not for the booking around it.
        label, failed = await self._model_label(part)
        if failed:  # unsure and unread: nearer a situation than anything routine is urgent
            nearer = score > routine
            return self._checked(nearest if nearer else None, score, routine, "model-failed", started)
        chosen = next((s for s in self.situations if s.name == label), None)
        return self._checked(chosen, score, routine, "model", started)

    def _checked(self, situation: UrgentSituation | None, score: float, routine: float, by: str,
                 started: float) -> UrgentCheck:
        URGENT_CHECKS.labels(by, "urgent" if situation is not None else "not_urgent").inc()
        ms = (time.perf_counter() - started) * 1000
        record = {"urgent": situation.name if situation else None, "by": by,
                  "score": round(score, 3), "routine": round(routine, 3), "ms": round(ms)}
        return UrgentCheck(situation, score, routine, by, ms, record)

    async def _model_label(self, text: str) -> tuple[str, bool]:
        """The situation's name the model reads in the words (``none``); failed: no reading."""
        assert self.chat is not None
        schema = {"type": "object", "properties": {"situation": {
            "type": "string", "enum": [NONE, *(s.name for s in self.situations)]}},
            "required": ["situation"], "additionalProperties": False}
        messages = [{"role": "system", "content": self.system},
                    {"role": "user", "content": f"The caller said: {text}"}]
        parts: list[str] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                async for chunk in self.chat(messages, max_tokens=40, response_format={
                        "type": "json_schema", "json_schema": {"name": "urgent", "schema": schema}}):
                    parts.append(chunk.text)
            label = json.loads("".join(parts)).get("situation")
        except (LLMUnavailable, LLMRequestError, ValueError, TimeoutError, AttributeError) as exc:
            log.warning("the urgent check got no reading from the model", extra={"error": str(exc)[:200]})
            return NONE, True
        return (label, False) if isinstance(label, str) else (NONE, True)
