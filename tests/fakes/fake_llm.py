"""A scripted model behind the OpenAI-compatible HTTP API, so tests exercise the real client.

``FakeLLM.script`` decides each reply from the request; ``fail_next`` makes the
next N requests answer 503; every request body is recorded in ``requests``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from voicebot.devstack import free_port


def default_reply(body: dict[str, Any]) -> str:
    """A reading (the brain's only kind of model call) reads nothing; anything else gets a line."""
    if body.get("response_format"):
        return '{"intent": "other"}'
    return "Sure, I can help with that."


@dataclass
class FakeLLM:
    """``script(body)`` returns the reply: a string, or a dict with optional "content",
    "tool_calls" ([{"name", "arguments"}], arguments a string or an object) and "delay_s"."""

    script: Callable[[dict[str, Any]], str | dict[str, Any]] = default_reply
    fail_next: int = 0
    fail_status: int = 503
    fail_headers: dict[str, str] = field(default_factory=dict)  # e.g. {"Retry-After": "1"} with 429
    delay_s: float = 0.0
    chunk_words: int = 2
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    _server: uvicorn.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def app(self) -> Starlette:
        async def completions(request: Request):
            body = await request.json()
            self.requests.append(body)
            if self.fail_next > 0:
                self.fail_next -= 1
                return JSONResponse({"error": "scripted failure"}, status_code=self.fail_status,
                                    headers=self.fail_headers)
            reply = self.script(body)
            if isinstance(reply, str):
                reply = {"content": reply}
            content = reply.get("content") or ""
            delay = reply.get("delay_s", self.delay_s)

            async def stream():
                if delay:
                    await asyncio.sleep(delay)
                for index, call in enumerate(reply.get("tool_calls") or []):
                    for fragment in _call_fragments(index, call):
                        yield _sse({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]},
                                                 "finish_reason": None}]})
                words = content.split(" ") if content else []
                for i in range(0, len(words), self.chunk_words):
                    last = i + self.chunk_words >= len(words)
                    piece = " ".join(words[i:i + self.chunk_words]) + ("" if last else " ")
                    yield _sse({"choices": [{"index": 0, "delta": {"content": piece},
                                             "finish_reason": None}]})
                yield _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": len(words)}})
                yield "data: [DONE]\n\n"

            return StreamingResponse(stream(), media_type="text/event-stream")

        async def models(_request: Request):
            return JSONResponse({"data": [{"id": "fake"}]})

        return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]),
                                 Route("/v1/models", models)])

    def start(self) -> FakeLLM:
        self.port = free_port()
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_config=None,
                                access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        threading.Thread(target=self._server.run, daemon=True).start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake LLM did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server:
            self._server.should_exit = True


def _call_fragments(index: int, call: dict[str, Any]) -> list[dict[str, Any]]:
    """A structured call split the way real servers stream it: name first, arguments in pieces."""
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    head = {"index": index, "id": call.get("id", f"call_{index}_{time.monotonic_ns()}"),
            "type": "function", "function": {"name": call["name"], "arguments": ""}}
    middle = len(arguments) // 2
    return [head] + [{"index": index, "function": {"arguments": piece}}
                     for piece in (arguments[:middle], arguments[middle:]) if piece]


def is_guard(body: dict[str, Any]) -> bool:
    return body["messages"][0]["content"].startswith("You screen calls")


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def last_user_text(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


def is_answer_check(body: dict[str, Any]) -> bool:
    """The brain's answer check (act/answerable.py): yes/no under the ``answers`` schema."""
    return ((body.get("response_format") or {}).get("json_schema") or {}).get("name") == "answers"
