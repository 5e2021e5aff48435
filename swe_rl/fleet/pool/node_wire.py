"""A lean HTTP/1.1 client for the calls made per lease (its exec, diff, files; its create and destroy).

Why: a routed call needs little of httpx (request models, cookies, redirects, anyio wrappers, two
state machines): one POST with a JSON body to a node the pool already knows, a JSON answer framed by
Content-Length (or chunks, or the end of the connection). Measured by bench/route_bench.py: 0.30
against 1.72 ms of CPU per call on their own (5.7x less); inside the pool 1.14 against 1.21 ms per
routed exec (the rest is the ASGI stack), more where a burst lands on one node. Here the request goes
out in one write, the answer is read with asyncio's streams, and idle connections are kept per node
for reuse (at most `keep`, for `expiry` seconds: under the exec server's 120 s idle close, so a kept
one is still open; the expired ones are closed at each call, the oldest first).
Errors keep the httpx split `routing.NodeCalls` maps: a connect timeout (`WireConnectTimeout`,
retried there: nothing was sent), a read timeout (`WireTimeout`, 504), anything else (`WireError`:
refused, reset, malformed; the node is marked down). A kept-alive connection that breaks before one byte
of its answer (the node closed it while idle) is first tried once more on a fresh connection: one stale
connection does not mark a whole node down. The client's direct calls use it too (`direct_client.py`,
no node token: each call carries its lease's ``Authorization``).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from swe_rl.fleet.call_headers import NODE_SECONDS_HEADER

T = TypeVar("T")

KEEP = 64
"""Idle connections kept per node (the httpx path kept 8 per shard, 8 shards)."""
EXPIRY = 60.0
"""Seconds an idle connection is kept (the exec server's waitress closes idle ones after 120 s)."""
HEAD_LIMIT = 64 << 10
"""Longest response head read."""


class WireError(Exception):
    """The node refused, reset or garbled the call."""

    resent = False
    """True when it is the failure of the once-more on a fresh connection after a kept-alive one broke
    (`_nothing_answered`): then even a refused connection does not prove that nothing ran."""


class WireTimeout(WireError):
    """The node did not answer within the call's time (the request may have been sent)."""


class WireRefused(WireError):
    """The node refused the connection (nothing listens: stopped, restarting): nothing was sent."""


class WireConnectTimeout(WireError):
    """The node accepted no connection within the connect timeout (nothing was sent)."""


class WireNoConnection(WireError):
    """No connection was made (no route, reset during the handshake, TLS refused): nothing was sent."""


class _StaleConnection(Exception):
    """A kept-alive connection the node had closed: reset or ended before one byte of an answer."""


def _nothing_answered(exc: BaseException) -> bool:
    """The connection broke before any byte of the answer: an idle connection the node closed (its idle
    timeout, a restart) just as it was reused. The node closed it before reading the request, so the call
    is sent once more on a fresh connection rather than marking the node down (HTTP clients retry a
    reused connection's first failure the same way). A break after part of an answer is never retried."""
    if isinstance(exc, asyncio.IncompleteReadError):
        return not exc.partial
    return isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError))


class NodeAnswer:
    """A node's answer: status and body (what `routing.json_of` reads of an httpx response too)."""

    __slots__ = ("status_code", "content", "node_seconds")

    def __init__(self, status_code: int, content: bytes, node_seconds: float | None = None) -> None:
        self.status_code, self.content = status_code, content
        self.node_seconds = node_seconds
        """The node's own time for the call (its `x-swe-node-seconds` header), None when it sent none."""

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class _Conn:
    __slots__ = ("reader", "writer", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.idle_since = reader, writer, 0.0

    def close(self) -> None:
        self.writer.close()


class NodeWire:
    """POSTs to one node over kept-alive connections."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        ssl_context: ssl.SSLContext | None,
        connect_timeout: float,
        keep: int = KEEP,
        expiry: float = EXPIRY,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        if token is not None and any(ord(c) < 0x21 or ord(c) == 0x7F for c in token):
            raise ValueError("the exec token holds a control character or a space")
        self.host, self.tls = parts.hostname, parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.ssl_context = ssl_context if self.tls else None
        self.base = parts.path.rstrip("/")
        self.connect_timeout, self.keep, self.expiry = connect_timeout, keep, expiry
        auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
        self._headers = f"Host: {parts.netloc}\r\n{auth}Content-Type: application/json\r\n"
        self.idle: list[_Conn] = []

    async def post(
        self, path: str, payload: dict[str, Any], timeout: float, *, authorization: str = ""
    ) -> NodeAnswer:
        """POST payload as JSON to path; the answer, or WireConnectTimeout / WireTimeout / WireError.
        `authorization`: this call's own ``Authorization`` value (a wire made without a token)."""
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        extra = ""
        if authorization:
            if not authorization.isprintable():  # a control character would end the header
                raise ValueError("the Authorization value holds a control character")
            extra = f"Authorization: {authorization}\r\n"
        return await self._request("POST", path, body, timeout, extra)

    async def get(self, path: str, timeout: float) -> NodeAnswer:
        """GET path; the answer, or WireConnectTimeout / WireTimeout / WireError."""
        return await self._request("GET", path, b"", timeout)

    async def _request(
        self, method: str, path: str, body: bytes, timeout: float, extra: str = ""
    ) -> NodeAnswer:
        head = (
            f"{method} {self.base}{path} HTTP/1.1\r\n{self._headers}{extra}"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        request = head.encode("latin-1") + body
        conn = self._reuse()
        if conn is None:
            return await self._exchange(await self._connect(), request, timeout, reused=False)
        try:
            return await self._exchange(conn, request, timeout)
        except _StaleConnection:
            pass  # closed by the node while idle: the request never reached it; once more, fresh
        try:
            return await self._exchange(await self._connect(), request, timeout, reused=False)
        except WireError as exc:
            exc.resent = True
            raise

    async def _exchange(
        self, conn: _Conn, request: bytes, timeout: float, *, reused: bool = True
    ) -> NodeAnswer:
        try:
            conn.writer.write(request)
            answer, reusable = await _within(_read_answer(conn.reader), timeout)
        except TimeoutError as exc:
            conn.close()
            raise WireTimeout(f"no answer within {timeout:g}s") from exc
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            conn.close()
            if reused and _nothing_answered(exc):
                raise _StaleConnection from exc
            raise WireError(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:  # cancelled mid-call: the connection's state is unknown
            conn.close()
            raise
        now = time.monotonic()
        self._expire(now)
        if reusable and len(self.idle) < self.keep:
            conn.idle_since = now
            self.idle.append(conn)
        else:
            conn.close()
        return answer

    def _reuse(self) -> _Conn | None:
        """The most recently used idle connection still open; the expired ones are closed."""
        self._expire(time.monotonic())
        while self.idle:
            conn = self.idle.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn
            conn.close()
        return None

    def _expire(self, now: float) -> None:
        """Close the idle connections kept past `expiry`, the oldest first (the list is in the order they
        went idle; reuse takes the newest, so without this an old one waited to be reached). Each idle
        connection is one more the node's server holds, and the client's pressure on it is its burst."""
        cutoff, n = now - self.expiry, 0
        while n < len(self.idle) and self.idle[n].idle_since < cutoff:
            self.idle[n].close()
            n += 1
        if n:
            del self.idle[:n]

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await _within(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self.ssl_context,
                    server_hostname=self.host if self.tls else None,
                    limit=HEAD_LIMIT,
                ),
                self.connect_timeout,
            )
        except TimeoutError as exc:
            raise WireConnectTimeout(f"no connection within {self.connect_timeout:g}s") from exc
        except ConnectionRefusedError as exc:
            raise WireRefused(f"{type(exc).__name__}: {exc}") from exc
        except (OSError, ssl.SSLError) as exc:
            raise WireNoConnection(f"{type(exc).__name__}: {exc}") from exc
        return _Conn(reader, writer)

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


async def _within(aw: Awaitable[T], seconds: float) -> T:
    """aw's result, or TimeoutError after seconds (asyncio.timeout: no task per call, unlike wait_for)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await aw
    return await asyncio.wait_for(aw, seconds)  # Python 3.10


async def _read_answer(reader: asyncio.StreamReader) -> tuple[NodeAnswer, bool]:
    """The response on reader and whether its connection can carry another request."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status_line, *lines = head[:-4].split("\r\n")
    version, _, rest = status_line.partition(" ")
    if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    status = int(rest[:3])
    length, chunked, close = -1, False, version == "HTTP/1.0"
    node_seconds: float | None = None
    for line in lines:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length":
            length = int(value)
            if length < 0:
                raise ValueError("negative Content-Length")
        elif name == "transfer-encoding":
            chunked = value.lower().endswith("chunked")
        elif name == "connection":
            close = "close" in value.lower() or (close and "keep-alive" not in value.lower())
        elif name == NODE_SECONDS_HEADER:
            try:
                node_seconds = float(value)
            except ValueError:
                node_seconds = None
    if chunked:
        body = await _read_chunks(reader)
    elif length >= 0:
        body = await reader.readexactly(length)
    elif status in (204, 304):
        body = b""
    else:  # framed by the end of the connection
        body, close = await reader.read(), True
    return NodeAnswer(status, body, node_seconds), not close


async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        parts.append((await reader.readexactly(size + 2))[:-2])
