"""Streaming client for any OpenAI-compatible chat-completions server.

The agent receives it as a plain chat function (``ChatFunction``), so tests
swap in a scripted model served over the same HTTP API. Connection errors and
5xx answers are retried with backoff inside a deadline; once that runs out the
caller gets ``LLMUnavailable`` and speaks a fallback. Anything else (a bug,
a 4xx caused by a bad request we built) is raised as it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

log = logging.getLogger(__name__)


class LLMUnavailable(Exception):
    """The LLM server could not be reached or kept failing within the deadline."""


class LLMRequestError(Exception):
    """The server rejected the request (4xx): a configuration or programming problem."""


@dataclass
class ChatChunk:
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None


class ChatFunction(Protocol):
    def __call__(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> AsyncIterator[ChatChunk]: ...


class _Retryable(Exception):
    pass


class OpenAIChatClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "not-needed",
        max_tokens: int = 120,
        temperature: float = 0.3,
        deadline_s: float = 8.0,
        first_token_timeout_s: float = 20.0,
        http: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.deadline_s = deadline_s
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(first_token_timeout_s, connect=2.0)
        )
        self._sleep = sleep
        self._clock = clock

    async def aclose(self) -> None:
        await self._http.aclose()

    def payload(self, messages, tools, max_tokens, response_format=None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "max_tokens": max_tokens or self.max_tokens,
            "temperature": self.temperature,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = tools
        if response_format:
            body["response_format"] = response_format
        return body

    async def __call__(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> AsyncIterator[ChatChunk]:
        body = self.payload(messages, tools, max_tokens, response_format)
        give_up_at = self._clock() + self.deadline_s
        delay = 0.25
        while True:
            yielded = False
            try:
                async for chunk in self._stream_once(body):
                    yielded = True
                    yield chunk
                return
            except _Retryable as exc:
                # Once text reached the person we cannot take it back and retry.
                if yielded:
                    raise LLMUnavailable(f"stream broke: {exc}") from exc
                if self._clock() + delay > give_up_at:
                    raise LLMUnavailable(str(exc)) from exc
                log.warning("llm retry", extra={"error": str(exc), "delay_s": delay})
                await self._sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _stream_once(self, body: dict[str, Any]) -> AsyncIterator[ChatChunk]:
        try:
            async with self._http.stream("POST", self.url, json=body, headers=self._headers) as resp:
                if resp.status_code >= 500:
                    raise _Retryable(f"HTTP {resp.status_code}")
                if resp.status_code >= 400:
                    detail = (await resp.aread()).decode(errors="replace")[:300]
                    raise LLMRequestError(f"HTTP {resp.status_code}: {detail}")
                async for line in resp.aiter_lines():
                    chunk = parse_sse_line(line)
                    if chunk is not None:
                        yield chunk
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc


def parse_sse_line(line: str) -> ChatChunk | None:
    """One ``data:`` line of an OpenAI stream to a chunk; None for keep-alives and [DONE]."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if not data or data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        log.warning("unparseable stream line", extra={"line": data[:200]})
        return None
    chunk = ChatChunk(usage=event.get("usage"))
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        chunk.text += delta.get("content") or ""
        chunk.tool_calls += delta.get("tool_calls") or []
        chunk.finish_reason = choice.get("finish_reason") or chunk.finish_reason
    return chunk
