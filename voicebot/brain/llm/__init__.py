"""The brain's client for any OpenAI-compatible chat-completions server (streamed): chunks.py
(what a stream carries), plain_http.py (a minimal HTTP/1.1 client), client.py (retries, deadline,
liveness)."""


from voicebot.brain.llm.chunks import (
    ChatChunk,
    ChatFunction,
    LLMRequestError,
    LLMUnavailable,
    merged,
    parse_sse_line,
)
from voicebot.brain.llm.client import OpenAIChatClient
from voicebot.brain.llm.plain_http import KEEPALIVE_EXPIRY_S, PlainHTTP, _Closed

__all__ = [
    "KEEPALIVE_EXPIRY_S",
    "ChatChunk",
    "ChatFunction",
    "LLMRequestError",
    "LLMUnavailable",
    "OpenAIChatClient",
    "PlainHTTP",
    "_Closed",
    "merged",
    "parse_sse_line",
]
