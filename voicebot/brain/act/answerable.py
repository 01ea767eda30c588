"""Whether a passage answers the caller's question: the model's yes or no under a JSON schema.

Retrieval finds the passage nearest the question, and a question the business never answered
still has a nearest passage: true, in the business's words, and beside the point ("Do you sell
gift cards?" -> the payment methods). Before a passage is spoken, the model is asked whether it
states the answer, on the side slot (``side_chat``), constrained to ``"yes"`` or ``"no"``.
A check that fails (timeout, an unreachable server, an unreadable reply) gives no verdict
(``Verdict.answers is None``); what the caller then hears is ``answers.py``'s rule.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from voicebot.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable

log = logging.getLogger(__name__)

SYSTEM = (
    "You check a phone assistant's answer before it is spoken. The business wrote the passage. "
    "Answer yes only if the passage itself states the answer to the caller's question "
    "(a yes, a no, a price, a time, a place, a name). Answer no if the passage is about another "
    "matter, or only about a related topic and leaves the question open.\n"
    "Examples (a bakery):\n"
    "Question: Is there parking? Passage: Parking: free spaces behind the shop. -> yes\n"
    "Question: Do you deliver? Passage: We are open Monday to Saturday, 7 am to 6 pm. -> no\n"
    "Question: How big is the shop? Passage: Orders of more than two cakes need a day's notice. -> no\n"
    "Question: Do you bake on Sundays? Passage: The bakery is closed on Sundays. -> yes"
)
# A bare string, not an object: the reply is "yes" or "no" with its quotes, three or four tokens;
# each token decoded is a visible share of the check's time on CPU cores.
SCHEMA = {"type": "string", "enum": ["yes", "no"]}


@dataclass(frozen=True)
class Verdict:
    answers: bool | None  # None: the check gave no verdict
    ms: float = 0.0


class AnswerCheck(Protocol):
    async def __call__(self, question: str, passage: str) -> Verdict: ...


class ModelAnswerCheck:
    """The model's yes/no on (question, passage), within ``timeout_s``."""

    def __init__(self, chat: ChatFunction, timeout_s: float = 4.0) -> None:
        self.chat = chat
        self.timeout_s = timeout_s

    @staticmethod
    def messages(question: str, passage: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Question: {question.strip()}\nPassage: {passage.strip()}"}]

    async def __call__(self, question: str, passage: str) -> Verdict:
        started = time.perf_counter()
        parts: list[str] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                async for chunk in self.chat(self.messages(question, passage), max_tokens=6,
                                             response_format={"type": "json_schema", "json_schema": {
                                                 "name": "answers", "schema": SCHEMA}}):
                    parts.append(chunk.text)
            said = json.loads("".join(parts))
        except (LLMUnavailable, LLMRequestError, ValueError, TimeoutError) as exc:
            log.warning("the answer check got no verdict", extra={"error": str(exc)[:200]})
            said = None
        ms = (time.perf_counter() - started) * 1000
        return Verdict({"yes": True, "no": False}.get(said) if isinstance(said, str) else None, ms)
