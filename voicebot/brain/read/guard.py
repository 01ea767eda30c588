"""The topic guard: a separate, short classification call that runs beside the main loop.

It answers one word, ALLOW or BLOCK. Anything it does not clearly block
passes (ambiguous and borderline questions must get through), and so does a
guard that fails or is slow past its timeout: the guard protects the domain,
it must never take the call down.

"Clearly" is a number where the guard's requests ask for token probabilities
(``"logprobs": true, "top_logprobs": 5`` in BRAIN_GUARD_EXTRA_BODY; ``make run`` sets it
for llama-server): the turn is blocked when P(BLOCK) among the first token's
ALLOW/BLOCK alternatives is above ``block_above`` (the profile's ``guard.block_above``).
Without them (llama-cpp-python refuses them unless built with logits_all) the word
it wrote decides.

With a quick screen (``guard_screen.py``, the profile's ``guard.screen``), a turn that is
plainly about the business passes on sentence embeddings in a few milliseconds and the LLM
is not asked; the screen never blocks, so anything it is unsure of is asked as above.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from voicebot.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable
from voicebot.brain.metrics import GUARD_SECONDS, GUARD_VERDICTS
from voicebot.brain.read.guard_screen import ExampleScreen, ScreenResult
from voicebot.common.telemetry import tracer

log = logging.getLogger(__name__)
TRACER = tracer("voicebot.brain")


@dataclass(frozen=True)
class GuardVerdict:
    allowed: bool
    reason: str
    seconds: float
    p_block: float | None = None  # when the server reported token probabilities
    by: str = "llm"  # "screen" when the quick screen passed it and the LLM was not asked


def guard_prompt(purpose: str, allow: list[str] | tuple[str, ...] = (),
                 block: list[str] | tuple[str, ...] = ("writing code", "homework", "politics")) -> str:
    # Fixed text per profile: the guard's own prefix stays cached on the LLM server.
    topics = f" It covers: {', '.join(allow)}." if allow else ""
    return (
        f"You screen calls for a voice assistant that is {purpose}.{topics} "
        "Decide if the caller's message may belong in such a call. ALLOW greetings, small talk, "
        "questions about the business, answers to the assistant's question (yes, no, names, dates, "
        "times, numbers, corrections), requests for a human, and anything ambiguous or partly "
        f"related. BLOCK only requests that are clearly about something else, such as {', '.join(block)}. "
        "Reply with exactly one word: ALLOW or BLOCK."
    )


def block_probability(alternatives: list[tuple[str, float]]) -> float | None:
    """P(BLOCK) given ALLOW or BLOCK, from the first token's alternatives (tokenizers split the
    words differently: "BL"+"OCK" or "BLOCK"); None when neither word is among them."""
    def mass(prefix: str) -> float:
        return sum(math.exp(logprob) for token, logprob in alternatives
                   if token.strip().upper()[:2] == prefix)

    allow, block = mass("AL"), mass("BL")
    return block / (allow + block) if allow + block > 0 else None


class TopicGuard:
    def __init__(self, chat: ChatFunction, purpose: str, timeout_s: float = 4.0,
                 allow: list[str] | tuple[str, ...] = (),
                 block: list[str] | tuple[str, ...] = ("writing code", "homework", "politics"),
                 block_above: float = 0.5, screen: ExampleScreen | None = None,
                 other_screens: tuple[ExampleScreen, ...] = ()) -> None:
        """``other_screens``: the same examples by another encoder, for languages the first
        screen's encoder does not know (Korean turns near the English examples, by meaning)."""
        self.chat = chat
        self.system = guard_prompt(purpose, allow, block)
        self.timeout_s = timeout_s
        self.block_above = block_above
        self.screen = screen
        self.other_screens = other_screens

    async def check(self, text: str, language: str = "en", asking: Callable[[], None] | None = None,
                    before_model: Callable[[], Awaitable[Any]] | None = None) -> GuardVerdict:
        """The caller's words alone. What the assistant said before is left out on purpose:
        with the packaged 1.5B model, "Assistant said: ..." before an ordinary question made it
        block many of them ("Can I bring my own wine?"), which it allows on their own;
        answers inside a task never reach the guard at all (``dialog.is_dialogue_act``).

        ``asking`` is called once the screen has not passed the words, right before the LLM is
        asked: the turn holds its own first model call until then (``SessionRuntime._respond``).
        ``before_model`` is awaited before the LLM is asked: the urgent check's own model call
        goes first and has the LLM server to itself (safety first, within its timeout)."""
        with TRACER.start_as_current_span("guard.check") as span:
            started = time.perf_counter()
            screened = await self.screened(text, language)
            if screened is not None and screened.passed:
                verdict = self._verdict(True, screened.reason, started, by="screen")
            else:
                if asking is not None:
                    asking()
                if before_model is not None:
                    await before_model()
                verdict = await self._check(text, started)
            span.set_attributes({"voicebot.guard.allowed": verdict.allowed,
                                 "voicebot.guard.by": verdict.by,
                                 "voicebot.guard.reason": verdict.reason})
            return verdict

    async def screened(self, text: str, language: str = "en") -> ScreenResult | None:
        """The quick screen's result, or None without a screen (or for a language it does not
        know, or when it fails: then the LLM decides, as without one)."""
        screen = next((s for s in (self.screen, *self.other_screens) if s is not None and s.covers(language)),
                      None)
        if screen is None:
            return None
        try:
            # NumPy matmuls in a worker thread: the event loop keeps serving other turns.
            return await asyncio.to_thread(screen.screen, text)
        except Exception as exc:  # noqa: BLE001 - a broken screen must not take the guard down
            log.warning("guard screen failed; asking the LLM", extra={"error": repr(exc)})
            return None

    async def _check(self, text: str, started: float) -> GuardVerdict:
        messages = self.messages(text)
        try:
            async with asyncio.timeout(self.timeout_s):  # no task of its own, as wait_for makes
                answer, alternatives = await self._ask(messages)
        except (LLMUnavailable, LLMRequestError, TimeoutError) as exc:
            log.warning("guard unavailable; letting the turn through", extra={"error": repr(exc)})
            return self._verdict(True, "guard unavailable", started)
        p_block = block_probability(alternatives) if alternatives else None
        if p_block is not None:
            blocked = p_block > self.block_above
            return self._verdict(not blocked, f"{'BLOCK' if blocked else 'ALLOW'} p={p_block:.2f}", started,
                                 p_block)
        blocked = "BLOCK" in answer.upper() and "ALLOW" not in answer.upper()
        return self._verdict(not blocked, answer.strip()[:20] or "empty", started)

    def messages(self, text: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": f"Caller said: {text}"}]

    async def warm(self) -> GuardVerdict:
        """Ask the LLM itself once (never the screen), so its prompt is cached before the first
        turn the screen leaves to it."""
        return await self._check("Hello.", time.perf_counter())

    async def prefill(self, text: str, language: str = "en") -> None:
        """Have the LLM server cache this check's prompt while the caller is still speaking
        (not needed for words the screen passes: the LLM will not be asked)."""
        screened = await self.screened(text, language)
        if screened is None or not screened.passed:
            await self._ask(self.messages(text), max_tokens=1)

    async def _ask(self, messages, max_tokens: int = 3) -> tuple[str, list[tuple[str, float]]]:
        """The words written, and the first token's alternatives when the server reports them
        (asked for in the guard's request fields: ``localllm.guard_request_fields``).

        Alternatives that name ALLOW or BLOCK decide at once: the stream is closed there (the
        server drops the request) rather than read to its end: on CPU cores each further token of
        the verdict takes time from the reply's prefill, which waits for it."""
        parts: list[str] = []
        alternatives: list[tuple[str, float]] = []
        async for chunk in self.chat(messages, max_tokens=max_tokens):
            parts.append(chunk.text)
            if chunk.top_logprobs and not alternatives:
                alternatives = chunk.top_logprobs
                if block_probability(alternatives) is not None:
                    break
        return "".join(parts), alternatives

    @staticmethod
    def _verdict(allowed: bool, reason: str, started: float, p_block: float | None = None,
                 by: str = "llm") -> GuardVerdict:
        seconds = time.perf_counter() - started
        GUARD_SECONDS.observe(seconds)
        GUARD_VERDICTS.labels(by, "allow" if allowed else "block").inc()
        return GuardVerdict(allowed, reason, seconds, p_block, by)
