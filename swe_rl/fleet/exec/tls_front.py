"""HTTPS for the exec server: a TLS front in the server's own process, in front of waitress.

Why not another WSGI server: waitress has no TLS, and the exec server depends on waitress beyond serving
requests: its parser stamps each request's arrival (`arrival.py`), its listener hands `/healthz` to a
dispatcher of its own so a health check never waits behind 128 running commands (`health_lane.py`), and
the drain stops its loop (`app.serve`). Another server (cheroot's SSL adapter) would hand whole connections
to worker threads before reading a request, so neither hook has a place there, and both fixes were
measured. Wrapping waitress's non-blocking sockets in TLS would mean re-writing its channel for TLS's
want-read/want-write states and buffered records. So here one event loop thread terminates TLS
(the standard library's `ssl` through asyncio) on the public address and passes the bytes of each
connection to waitress listening on a Unix socket in a private directory (mode 0700, removed at exit):
waitress and its hooks are unchanged; its idle and keep-alive behaviour reach the client as they are.
The cost is one copy of each request and answer in this thread; the pool keeps its connections alive,
so a handshake is paid once per connection, not per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import ssl
import tempfile
import threading
from typing import Any

log = logging.getLogger("swe_exec_server.tls")

CHUNK = 1 << 16
HANDSHAKE_TIMEOUT = 30.0


class TlsFront:
    """Accepts HTTPS on (host, port) and relays each connection to the Unix socket `upstream`."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext, upstream: str) -> None:
        self.host, self.port, self.context, self.upstream = host, port, context, upstream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve on a thread of its own; an address that cannot be bound raises here."""
        ready: list[BaseException | None] = []
        started = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            loop.set_exception_handler(_quiet_tls_noise)
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(
                        self._relay,
                        self.host,
                        self.port,
                        ssl=self.context,
                        ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
                        backlog=1024,
                    )
                )
            except (
                OSError,
                ValueError,
            ) as exc:  # an address in use or not ours: reported to start()'s caller
                ready.append(exc)
                started.set()
                loop.close()
                return
            ready.append(None)
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="swe-tls-front", daemon=True)
        self._thread.start()
        started.wait()
        if ready[0] is not None:
            raise ready[0]

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or loop.is_closed():
            return

        async def close() -> None:
            if server is not None:
                server.close()
            loop.stop()

        with contextlib.suppress(RuntimeError):  # the loop already ended
            asyncio.run_coroutine_threadsafe(close(), loop)
        if self._thread is not None:
            self._thread.join(10)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_unix_connection(self.upstream)
        except OSError as exc:
            log.warning("TLS front: waitress's socket refused a connection: %s", exc)
            client_w.close()
            return
        # The client's bytes go up until it stops sending (then waitress sees the end); the connection ends
        # when waitress ends its side (an answer framed by the close, its idle timeout, the server stopping).
        upward = asyncio.ensure_future(_pump(client_r, up_w, half_close=True))
        try:
            await _pump(up_r, client_w, half_close=False)
        finally:
            upward.cancel()
            for writer in (client_w, up_w):
                with contextlib.suppress(Exception):
                    writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, half_close: bool) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if half_close and writer.can_write_eof():
            writer.write_eof()
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
        return  # the other side went away: the caller closes both


def _quiet_tls_noise(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A peer that speaks plain HTTP or distrusts our certificate fails its handshake: one debug line,
    not an error with a stack trace per attempt."""
    exc = context.get("exception")
    if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError)):
        log.debug("TLS front: %s", exc)
        return
    loop.default_exception_handler(context)


class PrivateSocketDir:
    """A directory only this process's user can enter, holding waitress's Unix socket; removed on close."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="swe-exec-")  # mode 0700
        self.socket = os.path.join(self.path, "wsgi.sock")

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
