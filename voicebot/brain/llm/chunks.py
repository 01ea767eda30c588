"""What an OpenAI-compatible chat stream carries: chunks, the chat function's shape, its errors.

The agent receives a plain chat function (``ChatFunction``), so tests swap in a scripted model
served over the same HTTP API; ``parse_sse_line`` reads one line of the stream and ``merged``
joins the chunks that arrived together.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    timings: dict[str, Any] | None = None  # llama.cpp's server: prompt_n, cache_n, prompt_ms, ...
    # The first token's most likely alternatives in this chunk, (token, logprob), when the request
    # asked for them ("logprobs": true, "top_logprobs": N in its extra body).
    top_logprobs: list[tuple[str, float]] | None = None


class ChatFunction(Protocol):
    def __call__(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
        tool_choice: str | None = None,
    ) -> AsyncIterator[ChatChunk]: ...


def merged(chunks: list[ChatChunk]) -> ChatChunk:
    """Chunks that arrived together, as one. A server streams a token per event; when the brain
    reads them after several have come (it was busy, or the server is faster than it), the rest
    of the turn (cleaning, the guard's hold, the gateway's message) handles them once, not once
    each. Text and tool-call deltas in order; the last finish, usage and timings; the first
    token's alternatives (the guard's verdict reads them)."""
    if len(chunks) == 1:
        return chunks[0]
    one = ChatChunk(text="".join(chunk.text for chunk in chunks))
    for chunk in chunks:
        one.tool_calls += chunk.tool_calls
        one.finish_reason = chunk.finish_reason or one.finish_reason
        one.usage = chunk.usage or one.usage
        one.timings = chunk.timings or one.timings
        if one.top_logprobs is None:
            one.top_logprobs = chunk.top_logprobs
    return one


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
    chunk = ChatChunk(usage=event.get("usage"), timings=event.get("timings"))
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        chunk.text += delta.get("content") or ""
        chunk.tool_calls += delta.get("tool_calls") or []
        chunk.finish_reason = choice.get("finish_reason") or chunk.finish_reason
        tokens = (choice.get("logprobs") or {}).get("content") or []
        if tokens and chunk.top_logprobs is None and tokens[0].get("top_logprobs"):
            chunk.top_logprobs = [(t.get("token", ""), float(t.get("logprob", -1e9)))
                                  for t in tokens[0]["top_logprobs"]]
    return chunk
