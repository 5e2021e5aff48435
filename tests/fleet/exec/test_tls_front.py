"""The exec server's TLS front alone (fast tier): HTTPS in, the bytes relayed both ways to a Unix socket.

The whole exec server and pool over TLS: tests/fleet/test_tls_fleet.py.
"""

from __future__ import annotations

import os
import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator

import pytest

from swe_rl.fleet.exec.tls_front import PrivateSocketDir, TlsFront
from swe_rl.fleet.tls import client_context, server_context
from tests.fleet.tls_certs import TestCA


class _Upper(socketserver.StreamRequestHandler):
    """Reads a length line and that many bytes, answers them upper-cased, then closes (like an answer
    framed by the end of the connection)."""

    def handle(self) -> None:
        size = int(self.rfile.readline())
        self.wfile.write(self.rfile.read(size).upper())


@pytest.fixture
def front(tmp_path) -> Iterator[tuple[int, ssl.SSLContext, PrivateSocketDir]]:
    ca = TestCA(tmp_path)
    issued = ca.issue("front")
    sockets = PrivateSocketDir()
    upstream = socketserver.ThreadingUnixStreamServer(sockets.socket, _Upper)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = _free_port()
    tls = TlsFront("127.0.0.1", port, server_context(str(issued.cert), str(issued.key)), sockets.socket)
    tls.start()
    try:
        yield port, client_context(str(ca.path)), sockets
    finally:
        tls.stop()
        upstream.shutdown()
        upstream.server_close()
        sockets.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ask(port: int, context: ssl.SSLContext, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"%d\n" % len(payload) + payload)
            chunks = []  # until the front closes: waitress ended its side
            while chunk := tls.recv(1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)


def test_the_front_relays_both_ways_and_keeps_its_socket_private(front):
    port, context, sockets = front
    assert _ask(port, context, b"hello") == b"HELLO"
    big = os.urandom(1 << 19).hex().encode()  # 1 MiB: many records and chunks each way
    assert _ask(port, context, big) == big.upper()
    assert os.stat(sockets.path).st_mode & 0o777 == 0o700


def test_the_front_refuses_a_client_that_does_not_trust_it_and_plain_text(front, tmp_path):
    port, _, _ = front
    stranger = TestCA(tmp_path, name="stranger")
    with pytest.raises(ssl.SSLCertVerificationError):
        _ask(port, client_context(str(stranger.path)), b"hello")
    with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"HTTP/1.1" not in raw.recv(4096)  # no answer in clear text: the handshake fails, closed
    assert _ask(port, front[1], b"still serving") == b"STILL SERVING"


def test_an_address_in_use_fails_the_start(tmp_path):
    ca = TestCA(tmp_path)
    issued = ca.issue("busy")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        tls = TlsFront("127.0.0.1", port, server_context(str(issued.cert), str(issued.key)), "/nonexistent")
        with pytest.raises(OSError):
            tls.start()
