"""``python -m tests.fakes.llm_server``: a scripted LLM in a process of its own, for benchmarks.
The guard allows; every question gets the same two-sentence reply (``FAKE_LLM_REPLY``), one
word per streamed delta (as a real server streams tokens), all of it at once. Prints
``READY fake-llm http=PORT``.

It speaks just enough HTTP/1.1 for an OpenAI-compatible client (keep-alive, Content-Length
requests, chunked Server-Sent Events), on a bare asyncio protocol: the benchmarks measure
what the brain and the gateway add, and a Starlette app under uvicorn in a thread
(tests/fakes/fake_llm.py, which the tests use) cost about 1 ms and 3.6 ms of CPU per turn of
its own, on the same cores.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from typing import Any

from tests.fakes.fake_llm import is_guard
from voicebot.common import event_loop, gc_tuning

REPLY = os.environ.get("FAKE_LLM_REPLY", "Sure, a table for two. Shall I book it for you?")
MAX_HEADER_BYTES = 64 * 1024


def reply_for(body: dict[str, Any]) -> str:
    return "ALLOW" if is_guard(body) else REPLY


def sse_events(content: str) -> list[bytes]:
    """The stream of one reply: a delta per word, then the finish with usage, then [DONE]."""
    words = content.split(" ")
    events = [{"choices": [{"index": 0, "delta": {"content": word + ("" if i == len(words) - 1 else " ")},
                            "finish_reason": None}]} for i, word in enumerate(words)]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": len(words)}})
    return [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@functools.cache
def _stream_body(content: str) -> tuple[bytes, ...]:
    """The chunked body that streams ``content``, made once per reply: the replies are fixed, and
    serialising 12 events again for every request cost ~60 us of a just-woken process."""
    return (*(_chunk(event) for event in sse_events(content)), b"0\r\n\r\n")


def _response(status: str, content_type: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
            f"\r\n").encode() + body


class ScriptedLLM(asyncio.Protocol):
    """One connection: requests parsed as they complete, answered in order."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (request := self._next_request()) is not None:
            self._answer(*request)

    def _next_request(self) -> tuple[str, str, bytes] | None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEADER_BYTES and self.transport is not None:
                self.transport.close()
            return None
        request_line, *lines = self.buffer[:end].decode("latin-1").split("\r\n")
        method, path, _version = request_line.split(" ", 2)
        pairs = (line.partition(":") for line in lines)
        headers = {name.strip().lower(): value.strip() for name, _, value in pairs}
        length = int(headers.get("content-length", "0"))
        if len(self.buffer) < end + 4 + length:
            return None
        body, self.buffer = self.buffer[end + 4:end + 4 + length], self.buffer[end + 4 + length:]
        return method, path.split("?", 1)[0], body

    def _answer(self, method: str, path: str, body: bytes) -> None:
        assert self.transport is not None
        if method == "POST" and path.endswith("/chat/completions"):
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            self.transport.write(head)
            for piece in _stream_body(reply_for(json.loads(body))):
                self.transport.write(piece)  # one write per event, as a server streams them
        elif method == "GET" and path.endswith("/models"):
            self.transport.write(_response("200 OK", "application/json", b'{"data": [{"id": "fake"}]}'))
        elif method == "GET" and path.endswith("/health"):
            self.transport.write(_response("200 OK", "application/json", b'{"status": "ok"}'))
        else:
            self.transport.write(_response("404 Not Found", "text/plain", b"not found"))


async def serve(port: int = 0) -> None:
    server = await asyncio.get_running_loop().create_server(ScriptedLLM, "127.0.0.1", port)
    # As the real services do: the fakes' pauses are not the gateway's.
    gc_tuning.settle(gc_tuning.configured())
    print(f"READY fake-llm http={server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


def main() -> None:
    event_loop.run(serve(int(os.environ.get("FAKE_LLM_PORT", "0"))))


if __name__ == "__main__":
    main()
