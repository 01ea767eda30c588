"""The LLM client's own HTTP/1.1 transport (PlainHTTP) against a real socket server that frames
its answers awkwardly: events split mid-line and mid-character across chunks, Content-Length
bodies, keep-alive, connections closed or abandoned. The retries and failures through it are
tests/unit/test_llm_failures.py and test_llm_client.py (they run on it: plain http, no proxy)."""

from __future__ import annotations

import asyncio
import json

import pytest

from voicebot.brain.llm import ChatChunk, OpenAIChatClient, PlainHTTP, _Closed, merged


def sse(*texts: str) -> bytes:
    events = [{"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]} for t in texts]
    return b"".join(f"data: {json.dumps(e, ensure_ascii=False)}\r\n\r\n".encode() for e in events) + \
        b"data: [DONE]\r\n\r\n"


class Server:
    """Answers every POST with ``body`` cut into chunks of ``cut`` bytes; counts connections."""

    def __init__(self, body: bytes, cut: int = 7, chunked: bool = True) -> None:
        self.body, self.cut, self.chunked = body, cut, chunked
        self.connections = 0
        self.requests = 0
        self.hold: asyncio.Event | None = None  # set: the rest of the answer waits for it
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                self.requests += 1
                pieces = [self.body[i:i + self.cut] for i in range(0, len(self.body), self.cut)]
                if self.chunked:
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                 b"transfer-encoding: chunked\r\n\r\n")
                    for i, piece in enumerate(pieces):
                        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        await writer.drain()
                        if i == 0 and self.hold is not None:
                            await self.hold.wait()
                    writer.write(b"0\r\n\r\n")
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(self.body))
                    for piece in pieces:
                        writer.write(piece)
                        await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def served():
    servers: list[Server] = []

    async def start(*args, **kwargs) -> tuple[Server, str]:
        server = Server(*args, **kwargs)
        servers.append(server)
        return server, await server.start()

    yield start
    for server in servers:
        await server.stop()


async def text_of(chat: OpenAIChatClient) -> str:
    return "".join([c.text async for c in chat([{"role": "user", "content": "hi"}])])


@pytest.mark.parametrize("cut", [1, 5, 7, 64])
@pytest.mark.parametrize("chunked", [True, False])
async def test_events_cut_anywhere_come_through_whole(served, cut, chunked):
    _server, url = await served(sse("Grüße, ", "a table ", "for two — ", "🍝."), cut=cut, chunked=chunked)
    chat = OpenAIChatClient(url, "m")
    assert chat._plain is not None
    assert await text_of(chat) == "Grüße, a table for two — 🍝."
    await chat.aclose()


async def test_a_connection_is_kept_for_the_next_request_and_an_abandoned_one_is_not(served):
    first_event = len(sse("one ")) - len(b"data: [DONE]\r\n\r\n")
    server, url = await served(sse("one ", "two ", "three."), cut=first_event)
    chat = OpenAIChatClient(url, "m")
    assert await text_of(chat) == "one two three."
    assert await text_of(chat) == "one two three."
    assert (server.requests, server.connections) == (2, 1)
    await chat.aclose()

    http = PlainHTTP(url)
    server.hold = asyncio.Event()
    async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 1.0) as resp:
        async for lines in resp.aiter_line_batches():
            assert "one" in lines[0]
            break  # a barge-in: the rest of the answer is never read
    server.hold.set()
    server.hold = None
    async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 1.0) as resp:
        assert resp.status_code == 200 and b"three." in await resp.aread()  # not the old answer's rest
    assert (server.requests, server.connections) == (4, 3)
    await http.aclose()


async def test_an_idle_connection_past_its_expiry_is_not_reused(served):
    server, url = await served(sse("hi."), chunked=False)
    http = PlainHTTP(url, keepalive_expiry_s=0.0)
    for _ in range(2):
        async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 1.0) as resp:
            assert resp.status_code == 200 and b"hi." in await resp.aread()
    assert (server.requests, server.connections) == (2, 2)
    await http.aclose()


async def test_idle_connections_are_capped_and_the_expired_closed(served):
    server, url = await served(sse("hi."), chunked=False)
    http = PlainHTTP(url, keepalive_expiry_s=0.3, max_idle=2)

    async def one() -> None:
        async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 1.0) as resp:
            await resp.aread()

    async def held(release: asyncio.Event) -> None:
        async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 1.0) as resp:
            await resp.aread()
            await release.wait()

    release = asyncio.Event()
    tasks = [asyncio.create_task(held(release)) for _ in range(4)]  # four at once: four connections
    await asyncio.sleep(0.2)
    release.set()
    await asyncio.gather(*tasks)
    assert server.connections == 4 and http.idle == 2  # two kept, two closed
    await asyncio.sleep(0.4)
    await one()  # the kept ones expired meanwhile: closed, and a new one opened
    assert server.connections == 5 and http.idle == 1
    await http.aclose()


def test_only_plain_http_without_a_proxy_takes_it(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert PlainHTTP.usable_for("http://127.0.0.1:8080/v1/chat/completions")
    assert not PlainHTTP.usable_for("https://api.example.com/v1/chat/completions")
    assert not PlainHTTP.usable_for("http://user:pw@llm:8080/v1/chat/completions")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not PlainHTTP.usable_for("http://llm:8080/v1/chat/completions")
    assert OpenAIChatClient("http://llm:8080/v1", "m")._plain is None  # httpx, which honours it
    monkeypatch.setenv("NO_PROXY", "llm")
    assert PlainHTTP.usable_for("http://llm:8080/v1/chat/completions")


async def raw_server(answer: bytes, stall_after: bool = False) -> tuple[asyncio.Server, str]:
    """Answers every request with ``answer`` as it is; then stalls (keeps the connection) or not."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        if stall_after:
            await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"



async def half_a_stream_then_silence() -> tuple[asyncio.Server, str]:
    """A server that streams the first half of a two-event reply, then keeps the connection
    without a byte more."""
    body = sse("one ", "two.")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    half = body[:len(body) // 2]
    return await raw_server(head + b"%x\r\n%s\r\n" % (len(half), half), stall_after=True)

async def test_events_that_arrived_together_come_as_one_chunk(served):
    """Read after the whole answer came (the brain was busy): one chunk for the rest of the turn
    to handle, not one per token; an event that came alone comes alone."""
    body = sse("one ", "two ", "three.")
    first_event = len(sse("one ")) - len(b"data: [DONE]\r\n\r\n")
    server, url = await served(body, cut=len(body))
    chat = OpenAIChatClient(url, "m")
    assert [c.text async for c in chat([{"role": "user", "content": "hi"}])] == ["one two three."]
    server.cut, server.hold = first_event, asyncio.Event()
    texts = []
    async for chunk in chat([{"role": "user", "content": "hi"}]):
        texts.append(chunk.text)
        if server.hold is not None:
            await asyncio.sleep(0.05)  # the server wrote nothing more meanwhile
            server.hold.set()
            server.hold = None
            await asyncio.sleep(0.05)  # the rest of the answer has come by the next read
    assert texts == ["one ", "two three."]
    await chat.aclose()


def test_merged_chunks_keep_every_delta_in_order_and_the_first_tokens_alternatives():
    call = {"index": 0, "id": "c1", "function": {"name": "find_slots", "arguments": ""}}
    args = {"index": 0, "function": {"arguments": '{"day": "fri"}'}}
    one = merged([ChatChunk(text="Sure", top_logprobs=[("Sure", -0.1)]),
                  ChatChunk(text=",", tool_calls=[call], top_logprobs=[(",", -0.2)]),
                  ChatChunk(tool_calls=[args], finish_reason="tool_calls"),
                  ChatChunk(usage={"completion_tokens": 3}, timings={"cache_n": 5})])
    assert (one.text, one.tool_calls, one.finish_reason) == ("Sure,", [call, args], "tool_calls")
    assert (one.usage, one.timings, one.top_logprobs) == ({"completion_tokens": 3}, {"cache_n": 5},
                                                          [("Sure", -0.1)])


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("after_the_last_chunk, stall", [
    (b"", False),  # closed with no blank line after the last chunk
    (b"\r\nHTTP/1.1 200 OK\r\n", True),  # bytes after the body's end
])
async def test_a_whole_body_the_connection_cannot_be_reused_after_is_read_and_not_kept(
        after_the_last_chunk, stall):
    body = sse("hi.")
    answer = HEAD + b"%x\r\n%s\r\n0\r\n" % (len(body), body) + after_the_last_chunk
    server, url = await raw_server(answer, stall_after=stall)
    http = PlainHTTP(url)
    async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 1.0) as resp:
        assert await resp.aread() == body
    assert http.idle == 0
    server.close()


async def test_a_chunk_size_line_with_no_end_is_a_closed_connection():
    server, url = await raw_server(HEAD + b"1" * 10_000, stall_after=True)
    http = PlainHTTP(url)
    with pytest.raises(_Closed):
        async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 1.0) as resp:
            await resp.aread()
    server.close()


async def test_a_broken_chunk_size_is_a_closed_connection_not_a_crash():
    server, url = await raw_server(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n")
    http = PlainHTTP(url)
    with pytest.raises(_Closed):
        async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 1.0) as resp:
            await resp.aread()
    server.close()


async def test_the_read_timeout_counts_only_while_reading_not_while_the_caller_holds_a_piece():
    server, url = await half_a_stream_then_silence()
    http = PlainHTTP(url)
    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):
        async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 0.2) as resp:
            async for _lines in resp.aiter_line_batches():
                await asyncio.sleep(0.3)  # the caller is slow: that is not the server's silence
    waited = asyncio.get_running_loop().time() - started
    assert waited >= 0.2 + 0.3  # timed out on the read after the slow caller, not during it
    server.close()


async def test_a_caller_cancelled_mid_read_is_cancelled_not_timed_out():
    """A turn cut off by barge-in while the body's read waits: its task is cancelled as asked,
    and the read's timer fires into nobody afterwards."""
    server, url = await half_a_stream_then_silence()
    http = PlainHTTP(url)
    lines: list[str] = []

    async def read() -> None:
        async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 0.3) as resp:
            async for batch in resp.aiter_line_batches():
                lines.extend(batch)

    reading = asyncio.create_task(read())
    await asyncio.sleep(0.1)  # the first half is read; the next read waits
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert reading.cancelled() and lines  # it had read the first event
    await asyncio.sleep(0.4)  # past the read timeout: the timer was closed with the read
    assert asyncio.current_task().cancelling() == 0
    server.close()


async def test_a_read_that_times_out_leaves_its_task_free_to_go_on():
    """The timeout is the read's own: the task is not left cancelling, so the turn can still
    speak its fallback sentence (an await after the TimeoutError runs)."""
    server, url = await half_a_stream_then_silence()
    http = PlainHTTP(url)
    with pytest.raises(TimeoutError):
        async with http.request("POST", "/v1/chat/completions", b"{}", {}, 1.0, 0.2) as resp:
            await resp.aread()
    assert asyncio.current_task().cancelling() == 0
    await asyncio.sleep(0.01)  # would raise CancelledError if a cancel were left pending
    server.close()
