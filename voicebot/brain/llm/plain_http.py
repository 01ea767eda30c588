"""A minimal HTTP/1.1 client for a plain-http LLM server, and the timers its reads use."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import time
import urllib.request
from collections import deque
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

# llama-server (cpp-httplib), vLLM and llama-cpp-python (uvicorn) close a keep-alive connection
# after 5 s idle, httpx's own default: a request sent on a connection the server is closing at
# that moment fails with "Server disconnected without sending a response" (a retry with backoff
# on the turn's path). Pooled connections expire well before that.
KEEPALIVE_EXPIRY_S = 2.0


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

