"""The brain's client for any OpenAI-compatible chat-completions server (streamed).

chunks.py: what a stream carries; plain_http.py: a minimal HTTP/1.1 client; client.py: the client.

The agent receives it as a plain chat function (``ChatFunction``), so tests
swap in a scripted model served over the same HTTP API. Connection errors,
5xx and 429 answers (honouring Retry-After) are retried with backoff inside a
deadline that bounds every attempt, not only the gaps between them; once it
runs out the caller gets ``LLMUnavailable`` and speaks a fallback. A first
token may take long on a CPU, so a slow answer is waited for as long as the
server still answers a liveness probe (any HTTP answer on the same port); a
server that stops answering is given up after one probe timeout. Anything
else (a bug, a 4xx caused by a bad request we built) is raised as it is.
"""


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
