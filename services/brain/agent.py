"""The agent loop: one turn in, a streamed reply out.

Context is assembled in a fixed order (system prompt, earlier turns, the new
question) so the LLM server's prefix cache reuses everything but the tail.
The turn is written to history only when it completes: a cancelled turn
(barge-in) stores nothing, and the next request says what of this reply the
person actually heard.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from services.brain.config import BrainSettings
from services.brain.llm import ChatFunction, LLMRequestError, LLMUnavailable
from services.brain.metrics import LLM_CALL_SECONDS, LLM_FALLBACKS, LLM_TOKENS, LLM_TTFT_SECONDS
from services.brain.prompts import system_prompt
from services.brain.session_store import SessionStore, Turn
from services.brain.text_cleanup import SpokenTextCleaner
from voicebot.v1 import brain_pb2

log = logging.getLogger(__name__)


def build_messages(system: str, turns: list[Turn], text: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in turns:
        messages.append({"role": "user", "content": turn.user})
        # An interrupted reply is kept as far as it was heard, marked as cut off.
        spoken = turn.assistant + (" ..." if turn.interrupted else "")
        messages.append({"role": "assistant", "content": spoken})
    messages.append({"role": "user", "content": text})
    return messages


class Agent:
    def __init__(self, settings: BrainSettings, chat: ChatFunction, store: SessionStore) -> None:
        self.settings = settings
        self.chat = chat
        self.store = store
        self.system = system_prompt(settings.bot_name, settings.domain)

    async def respond(self, request: brain_pb2.RespondRequest) -> AsyncIterator[brain_pb2.RespondEvent]:
        user, session = request.user_id, request.session_id
        previous = request.previous_reply
        if previous.turn_id:
            await self.store.update(
                user, session,
                lambda h: h.mark_spoken(previous.turn_id, previous.text, previous.interrupted),
            )
        history = await self.store.load(user, session)
        turns = history.turns[-self.settings.history_turns:]
        messages = build_messages(self.system, turns, request.text)

        parts: list[str] = []
        fallback = False
        async for text in self._stream_reply(messages):
            if text is None:
                fallback = True
                continue
            parts.append(text)
            yield brain_pb2.RespondEvent(turn_id=request.turn_id, delta=brain_pb2.TextDelta(text=text))
        reply = "".join(parts).strip()
        if not reply:
            reply = self.settings.fallback_text
            yield brain_pb2.RespondEvent(turn_id=request.turn_id, delta=brain_pb2.TextDelta(text=reply))
        # Reached only if the turn was not cancelled: nothing half-finished is stored.
        await self.store.append_turn(user, session, Turn(request.turn_id, request.text, reply))
        yield brain_pb2.RespondEvent(
            turn_id=request.turn_id,
            final=brain_pb2.Final(text=reply, dialog_state="listen", fallback=fallback),
        )

    async def _stream_reply(self, messages: list[dict[str, Any]]) -> AsyncIterator[str | None]:
        """Yield cleaned text deltas; on LLM failure yield None then the fallback sentence."""
        cleaner = SpokenTextCleaner()
        started = time.perf_counter()
        first = True
        try:
            async for chunk in self.chat(messages):
                if chunk.usage:
                    self._record_usage(chunk.usage)
                text = cleaner.clean(chunk.text)
                if not text:
                    continue
                if first:
                    LLM_TTFT_SECONDS.observe(time.perf_counter() - started)
                    first = False
                yield text
        except (LLMUnavailable, LLMRequestError) as exc:
            level = logging.ERROR if isinstance(exc, LLMRequestError) else logging.WARNING
            log.log(level, "llm failed; speaking the fallback", extra={"error": str(exc)})
            LLM_FALLBACKS.inc()
            yield None
            yield ("" if first else " ") + self.settings.fallback_text
        finally:
            LLM_CALL_SECONDS.observe(time.perf_counter() - started)

    @staticmethod
    def _record_usage(usage: dict[str, Any]) -> None:
        LLM_TOKENS.labels("input").inc(usage.get("prompt_tokens") or 0)
        LLM_TOKENS.labels("output").inc(usage.get("completion_tokens") or 0)
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached:
            LLM_TOKENS.labels("cached").inc(cached)
