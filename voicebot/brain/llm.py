"""Streaming client for any OpenAI-compatible chat-completions server.

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

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import time
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

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


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None, stale: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.stale = stale


# llama-server (cpp-httplib), vLLM and llama-cpp-python (uvicorn) close a keep-alive connection
# after 5 s idle, httpx's own default: a request sent on a connection the server is closing at
# that moment fails with "Server disconnected without sending a response" (a retry with backoff
# on the turn's path). Pooled connections expire well before that.
KEEPALIVE_EXPIRY_S = 2.0


def _stale_connection(exc: BaseException, answered: bool) -> bool:
    """The server closed the connection before any answer (not a refused connect, not a
    timeout): most likely a pooled connection it was timing out, so the request is sent again
    at once on a new connection, without a backoff. A server that really went away refuses the
    new connection, and the usual backoff follows."""
    return not answered and isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError)


_DONE = object()


async def _answer(resp: Any) -> AsyncIterator[ChatChunk]:
    """The server's answer to a streamed chat request, the same over httpx and PlainHTTP: a
    status worth another try raises ``_Retryable``, a refused request ``LLMRequestError``;
    otherwise its chunks."""
    if resp.status_code == 429:
        raise _Retryable("HTTP 429", retry_after=_retry_after(resp.headers.get("retry-after")))
    if resp.status_code >= 500:
        raise _Retryable(f"HTTP {resp.status_code}")
    if resp.status_code >= 400:
        detail = (await resp.aread()).decode(errors="replace")[:300]
        raise LLMRequestError(f"HTTP {resp.status_code}: {detail}")
    batches = resp.aiter_line_batches() if isinstance(resp, _PlainResponse) else _one_by_one(resp)
    async for lines in batches:
        chunks = [chunk for chunk in map(parse_sse_line, lines) if chunk is not None]
        if chunks:
            yield merged(chunks)


async def _one_by_one(resp: Any) -> AsyncIterator[list[str]]:
    async for line in resp.aiter_lines():
        yield [line]


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


class _Closed(Exception):
    """The server closed the connection (or broke HTTP/1.1) before the answer was complete."""


class _TaskCanceller:
    """Cancels the task it watches at most once, for a reason, and tells that cancellation from
    anyone else's as ``asyncio.timeout`` does (``uncancel``): in the watched await's ``except
    CancelledError``, ``raise_if_fired`` raises ``error`` instead when it was this one's alone."""

    error: type[Exception] = TimeoutError
    _task: asyncio.Task[Any] | None = None
    _reason: str | None = None

    def raise_if_fired(self) -> None:
        if self._reason is not None and self._task is not None and self._task.uncancel() == 0:
            raise self.error(self._reason) from None

    def _fire(self, reason: str) -> None:
        if self._reason is None and self._task is not None:
            self._reason = reason
            self._task.cancel()


class _ReadTimer(_TaskCanceller):
    """Times out one read that waits longer than ``limit`` seconds, as an ``asyncio.timeout``
    armed for each read and disarmed while the piece is with the caller would, for a stamp per
    read: its one timer, when it comes due, moves itself to the current read's deadline or
    cancels the reading task. Rescheduling a timeout twice per piece was a visible share of the
    brain's CPU.
    It cancels only while a read is armed, so the cancellation lands in that read."""

    def __init__(self, limit: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._limit = limit
        self._since: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        self._since = self._loop.time()
        self._task = asyncio.current_task()  # a generator may be read from more than one task
        if self._handle is None:
            self._handle = self._loop.call_at(self._since + self._limit, self._due)

    def disarm(self) -> None:
        self._since = None

    def close(self) -> None:
        self._since = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _due(self) -> None:
        self._handle = None
        if self._since is None:  # between reads: the next arm() sets the timer again
            return
        deadline = self._since + self._limit
        if self._loop.time() < deadline:
            self._handle = self._loop.call_at(deadline, self._due)
        else:
            self._fire(f"no data for {self._limit:g} s")


READ_BYTES = 65536
MAX_CHUNK_LINE_BYTES = 4096  # a chunk's size line (and a trailer) is a few bytes


class _PlainResponse:
    """The part of ``httpx.Response`` the client uses: status, headers, the body as lines."""

    def __init__(self, status_code: int, headers: dict[str, str], reader: asyncio.StreamReader,
                 read_timeout: float, keep_alive: bool) -> None:
        self.status_code, self.headers = status_code, headers
        self._reader, self._timeout = reader, read_timeout
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left = None if chunked or length is None else int(length)
        self._chunked = chunked
        self._raw = bytearray()  # chunked framing read from the socket, not yet decoded
        self._in_trailers = False  # the last chunk came; its trailers (or the blank line) follow
        self.complete = self._left == 0  # the whole body was read
        self._keep_alive = keep_alive and headers.get("connection", "").lower() != "close"

    def reusable(self) -> bool:
        """Read to its end on a keep-alive connection: the next request may use it."""
        return self.complete and self._keep_alive

    async def _pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives. Each read waits at most the read timeout; the time a piece
        is with the caller does not count (``_ReadTimer``)."""
        timer = _ReadTimer(self._timeout)
        try:
            while not self.complete:
                timer.arm()
                try:
                    piece = await self._next_piece()
                except asyncio.CancelledError:
                    timer.raise_if_fired()
                    raise
                timer.disarm()
                if piece is None:
                    return
                if piece:
                    yield piece
        except ValueError as exc:  # a chunk size that is not one
            raise _Closed(f"unreadable body: {exc}") from exc
        finally:
            timer.close()

    async def _next_piece(self) -> bytes | None:
        """The next piece of the body; b"" at its end, None when the connection ended it. Chunked:
        everything of the body that has arrived in whole chunks, in one piece (one read of the
        socket, however many events the server wrote meanwhile)."""
        reader = self._reader
        if self._chunked:
            while True:
                data = self._whole_chunks()
                if data or self.complete:
                    return data
                more = await reader.read(READ_BYTES)
                if not more:
                    if self._in_trailers:  # closed after the last chunk: the body is whole
                        self.complete, self._keep_alive = True, False
                        return b""
                    raise _Closed("the server closed the connection mid-body")
                self._raw += more
        if self._left is not None:
            data = await reader.read(min(self._left, READ_BYTES))
            if not data:
                raise _Closed("the server closed the connection mid-body")
            self._left -= len(data)
            self.complete = self._left == 0
            return data
        return await reader.read(READ_BYTES) or None  # no framing: the body ends with the connection

    def _whole_chunks(self) -> bytes:
        """The data of every whole chunk read so far (taken out of ``_raw``); at the last chunk
        and its trailers, ``complete``. A size that is not one raises ValueError."""
        raw, data, at = self._raw, [], 0
        while not self.complete:
            end = raw.find(b"\n", at)
            if end < 0:
                if len(raw) - at > MAX_CHUNK_LINE_BYTES:
                    raise ValueError("a chunk-size line with no end")
                break
            line, after = bytes(raw[at:end]).rstrip(b"\r"), end + 1
            if self._in_trailers:  # a trailer, or the blank line that ends them
                at, self.complete = after, not line
                continue
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                self._in_trailers, at = True, after
                continue
            if len(raw) < after + size + 2:  # the chunk's data and its CRLF are not all here
                break
            data.append(bytes(raw[after:after + size]))
            at = after + size + 2
        del raw[:at]
        if self.complete and raw:
            self._keep_alive = False  # bytes after the body: this connection is not reused
        return b"".join(data)

    async def aread(self) -> bytes:
        return b"".join([piece async for piece in self._pieces()])

    async def aiter_line_batches(self) -> AsyncIterator[list[str]]:
        """The body's lines, in the batches they arrived in (every whole line of each piece)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        async for piece in self._pieces():
            pending += decoder.decode(piece)
            lines = pending.splitlines(keepends=True)
            pending = lines.pop() if lines and not lines[-1].endswith(("\n", "\r")) else ""
            if lines:
                yield [line.rstrip("\r\n") for line in lines]
        pending += decoder.decode(b"", final=True)
        if pending:
            yield [pending]


class PlainHTTP:
    """A minimal HTTP/1.1 client for a plain-http LLM server (what a local llama-server or vLLM
    is): keep-alive connections to one host, requests with a JSON body, answers read as lines.

    Why not httpx there: its client, httpcore, h11 and anyio layers cost CPU on every
    streamed request, and every turn makes two (the topic guard's and the reply's) before its
    first word, on the brain's one event loop. This does the same with asyncio's streams.
    Connections idle for ``keepalive_expiry_s`` are closed, not reused (see KEEPALIVE_EXPIRY_S),
    and at most ``max_idle`` are kept (httpx's default keep-alive limit); one
    whose answer was not read to its end (a cancelled turn) is closed, never reused.
    Failures surface as OSError, TimeoutError or ``_Closed``.
    """

    def __init__(self, base_url: str, keepalive_expiry_s: float = KEEPALIVE_EXPIRY_S,
                 max_idle: int = 20) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "localhost", parts.port or 80
        self.netloc = parts.netloc.rpartition("@")[2]
        self.keepalive_expiry_s, self.max_idle = keepalive_expiry_s, max_idle
        # Oldest first: the newest is reused, the expired are closed from the front.
        self._idle: deque[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = deque()

    @staticmethod
    def usable_for(url: str) -> bool:
        """Plain http with no proxy configured for it (httpx honours *_PROXY; this does not)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.username or parts.password:
            return False
        proxies = urllib.request.getproxies_environment()
        if not (proxies.get("http") or proxies.get("all")):
            return True
        return bool(urllib.request.proxy_bypass_environment(parts.hostname or ""))

    async def _connection(self, connect_timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self._close_expired(time.monotonic())
        while self._idle:
            reader, writer, _ = self._idle.pop()
            if not reader.at_eof():
                return reader, writer
            writer.close()
        async with asyncio.timeout(connect_timeout):
            return await asyncio.open_connection(self.host, self.port, limit=1 << 20)

    @contextlib.asynccontextmanager
    async def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
                      connect_timeout: float, read_timeout: float) -> AsyncIterator[_PlainResponse]:
        reader, writer = await self._connection(connect_timeout)
        response = None
        try:
            head = [f"{method} {path} HTTP/1.1", f"Host: {self.netloc}", "Accept: */*"]
            head += [f"{name}: {value}" for name, value in headers.items()]
            if body is not None:
                head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b""))
            async with asyncio.timeout(read_timeout):
                await writer.drain()
                response = await self._head(reader, read_timeout)
            yield response
        finally:
            now = time.monotonic()
            if response is not None and response.reusable():
                self._idle.append((reader, writer, now))
            else:
                writer.close()
            self._close_expired(now)

    def _close_expired(self, now: float) -> None:
        while self._idle and (len(self._idle) > self.max_idle
                              or now - self._idle[0][2] >= self.keepalive_expiry_s):
            self._idle.popleft()[1].close()

    @property
    def idle(self) -> int:
        return len(self._idle)

    @staticmethod
    async def _head(reader: asyncio.StreamReader, read_timeout: float) -> _PlainResponse:
        """The status line and headers (interim 1xx answers skipped)."""
        try:
            while True:
                status_line = await reader.readline()
                if not status_line.endswith(b"\n"):
                    raise _Closed("the server closed the connection before answering")
                version, code, *_ = status_line.split(None, 2)
                fields: dict[str, str] = {}
                while (line := await reader.readline()).strip():
                    name, _, value = line.decode("latin-1").partition(":")
                    fields[name.strip().lower()] = value.strip()
                if not line:
                    raise _Closed("the server closed the connection mid-headers")
                if not 100 <= int(code) < 200:
                    return _PlainResponse(int(code), fields, reader, read_timeout, version == b"HTTP/1.1")
        except ValueError as exc:  # not HTTP (or a line past the reader's limit)
            raise _Closed(f"unreadable answer: {exc}") from exc

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop()[1].close()


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
        probe_after_s: float = 1.0,
        probe_timeout_s: float = 0.8,
        extra_body: dict[str, Any] | None = None,
        plain_http: bool = True,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        # Not /models: llama-cpp-python serves it under the same lock as a generation.
        self.probe_url = base_url.rstrip("/") + "/health"
        self.first_token_timeout_s = first_token_timeout_s
        self.probe_after_s = probe_after_s
        self.probe_timeout_s = probe_timeout_s
        # Server-specific request fields, e.g. llama-server's id_slot and grammar, vLLM's guided_choice.
        self.extra_body = dict(extra_body or {})
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.deadline_s = deadline_s
        self._headers = {"Authorization": f"Bearer {api_key}"}
        # Plain http to a server of our own (no proxy, no client passed in): PlainHTTP, unless
        # ``plain_http`` is off (BRAIN_LLM_HTTP=httpx).
        self._plain = PlainHTTP(base_url) if (http is None and plain_http
                                              and PlainHTTP.usable_for(self.url)) else None
        self._path, self._probe_path = urlsplit(self.url).path, urlsplit(self.probe_url).path
        self._http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(first_token_timeout_s, connect=min(2.0, deadline_s)),
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )
        self._sleep = sleep
        self._clock = clock

    async def aclose(self) -> None:
        if self._plain is not None:
            await self._plain.aclose()
        await self._http.aclose()

    def payload(self, messages, tools, max_tokens, response_format=None,
                tool_choice=None) -> dict[str, Any]:
        body: dict[str, Any] = {
            **self.extra_body,
            "model": self.model,
            "messages": messages,
            "stream": True,
            "max_tokens": max_tokens or self.max_tokens,
            # A structured answer (the yes/no classifier, a change read as fields) is read by code,
            # not spoken: the most likely one. Sampled at 0.3, the packaged model gave "could we
            # do eight instead" back unchanged in two of nine bench-v2v changes.
            "temperature": 0.0 if response_format else self.temperature,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = tools
            if tool_choice:
                body["tool_choice"] = tool_choice
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
        tool_choice: str | None = None,
    ) -> AsyncIterator[ChatChunk]:
        body = self.payload(messages, tools, max_tokens, response_format, tool_choice)
        give_up_at = self._clock() + self.deadline_s
        delay, stale_retried = 0.25, False
        while True:
            yielded = False
            try:
                async for chunk in self._watched(body, give_up_at):
                    yielded = True
                    yield chunk
                return
            except _Retryable as exc:
                # Once text reached the person we cannot take it back and retry.
                if yielded:
                    raise LLMUnavailable(f"stream broke: {exc}") from exc
                if exc.stale and not stale_retried:
                    stale_retried = True
                    log.info("llm connection was closed by the server; sending again")
                    continue
                wait = exc.retry_after if exc.retry_after is not None else delay
                if self._clock() + wait >= give_up_at:
                    raise LLMUnavailable(str(exc)) from exc
                log.warning("llm retry", extra={"error": str(exc), "delay_s": wait})
                await self._sleep(wait)
                delay = min(delay * 2, 2.0)

    async def _watched(self, body: dict[str, Any], give_up_at: float) -> AsyncIterator[ChatChunk]:
        """One attempt, its wait for the first chunk bounded: by the deadline while the server
        cannot be reached, by the liveness probe while it is thinking (``_FirstChunkWatch``).
        The stream is read in the caller's own task: a producer task and a queue between them
        cost a task switch per chunk on every turn's path."""
        stream = self._stream_once(body, give_up_at)
        try:
            watch = _FirstChunkWatch(self)
            try:
                first = await anext(stream, _DONE)
            except asyncio.CancelledError:
                watch.raise_if_fired()
                raise
            finally:
                watch.stop()
            if first is _DONE:
                return
            yield first
            async for chunk in stream:
                yield chunk
        finally:
            await stream.aclose()

    async def _alive(self) -> bool:
        """Any HTTP answer (even 404) says the server's process still serves."""
        if self._plain is not None:
            try:
                async with self._plain.request("GET", self._probe_path, None, self._headers,
                                               self.probe_timeout_s, self.probe_timeout_s) as resp:
                    await resp.aread()
                return True
            except (OSError, TimeoutError, _Closed):
                return False
        try:
            await self._http.get(self.probe_url, headers=self._headers, timeout=self.probe_timeout_s)
            return True
        except (httpx.TransportError, httpx.TimeoutException):
            return False

    async def _stream_once(self, body: dict[str, Any], give_up_at: float) -> AsyncIterator[ChatChunk]:
        if self._plain is not None:
            async for chunk in self._stream_plain(body, give_up_at):
                yield chunk
            return
        remaining = max(0.05, give_up_at - self._clock())
        timeout = httpx.Timeout(self.first_token_timeout_s, connect=min(2.0, remaining))
        answered = False
        try:
            async with self._http.stream("POST", self.url, json=body, headers=self._headers,
                                         timeout=timeout) as resp:
                answered = True
                async for chunk in _answer(resp):
                    yield chunk
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}", stale=_stale_connection(exc, answered)) from exc


    async def _stream_plain(self, body: dict[str, Any], give_up_at: float) -> AsyncIterator[ChatChunk]:
        """``_stream_once`` over PlainHTTP: the same answers, retries and errors as with httpx."""
        assert self._plain is not None
        connect = min(2.0, max(0.05, give_up_at - self._clock()))
        answered = False
        try:
            async with self._plain.request("POST", self._path, json.dumps(body).encode(), self._headers,
                                           connect, self.first_token_timeout_s) as resp:
                answered = True
                async for chunk in _answer(resp):
                    yield chunk
        except TimeoutError as exc:
            raise _Retryable(f"timed out ({'reading' if answered else 'connecting or waiting'})") from exc
        except (_Closed, asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
            # Closed before any answer: most likely a keep-alive connection the server timed out.
            raise _Retryable(f"{type(exc).__name__}: {exc}", stale=not answered) from exc
        except OSError as exc:  # refused, unreachable
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc


class _FirstChunkWatch(_TaskCanceller):
    """Watches the wait for a stream's first chunk from a timer, not a task of its own: every
    probe interval it gives up once the first-token timeout has passed, or probes the server
    and gives up if the probe gets no answer. Giving up cancels the reading task, which
    ``raise_if_fired`` turns into ``LLMUnavailable``. It is stopped as soon as the wait ends,
    so it cancels only while the task waits in it."""

    error = LLMUnavailable

    def __init__(self, client: OpenAIChatClient) -> None:
        self._client = client
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._until = client._clock() + client.first_token_timeout_s
        self._stopped = False
        self._probe: asyncio.Task[None] | None = None
        self._handle = self._loop.call_later(client.probe_after_s, self._check)

    def stop(self) -> None:
        self._stopped = True
        self._handle.cancel()
        if self._probe is not None:
            self._probe.cancel()

    def _check(self) -> None:
        if self._stopped:
            return
        if self._client._clock() >= self._until:
            self._give_up(f"no first token after {self._client.first_token_timeout_s:g} s")
        else:
            self._probe = self._loop.create_task(self._probe_server())

    async def _probe_server(self) -> None:
        if not await self._client._alive():
            self._give_up("the LLM server stopped answering (liveness probe failed)")
        elif not self._stopped:
            self._handle = self._loop.call_later(max(0.2, self._client.probe_after_s / 2),
                                                 self._check)

    def _give_up(self, reason: str) -> None:
        if not self._stopped:
            self._fire(reason)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is treated as "not soon")."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return 3600.0


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
