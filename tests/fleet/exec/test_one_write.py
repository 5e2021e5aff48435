"""A node's answer leaves in one write: its head and its body's first piece joined (one_write.py; no Docker).

Over a real waitress server stamped as the exec server's are (`stamp_arrivals`): the writes each answer
makes are counted on its channel, and the answers read back by a real HTTP client must be what waitress
would have sent in two writes: Content-Length bodies, chunked ones, a body of several pieces, a status
that has no body.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import waitress.server

from swe_rl.fleet.exec.arrival import StampedChannel, stamp_arrivals

BOUND = 60.0  # far above any step here: only a hang reaches it


class CountingChannel(StampedChannel):
    writes: list[int] = []

    def write_soon(self, data: bytes) -> int:
        if data:
            CountingChannel.writes.append(len(data))
        return int(super().write_soon(data))


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    path = environ["PATH_INFO"]
    if path == "/json":
        body = b'{"output": "hello"}'
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    if path == "/chunked":  # no Content-Length: waitress chunks it
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"first ", b"second"]
    if path == "/pieces":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "12")])
        return [b"abc", b"defghi", b"jkl"]
    start_response("204 No Content", [])
    return [b"ignored: a 204 has no body"]


@pytest.fixture
def port() -> Iterator[int]:
    server = stamp_arrivals(waitress.server.create_server(app, host="127.0.0.1", port=0, threads=1))
    server.channel_class = CountingChannel
    runner = threading.Thread(target=server.run, daemon=True)
    runner.start()
    try:
        yield server.effective_port
    finally:
        server.close()
        runner.join(BOUND)


def _get(client: httpx.Client, port: int, path: str) -> tuple[httpx.Response, list[int]]:
    CountingChannel.writes = []
    resp = client.get(f"http://127.0.0.1:{port}{path}")
    return resp, CountingChannel.writes


def test_a_json_answer_is_one_write_and_reads_back_whole(port):
    with httpx.Client(timeout=BOUND) as client:  # one kept-alive connection: the next answers follow cleanly
        for _ in range(3):
            resp, writes = _get(client, port, "/json")
            assert (resp.status_code, resp.json()) == (200, {"output": "hello"})
            assert resp.headers["content-length"] == str(len(resp.content))
            assert len(writes) == 1, writes  # head and body together


def test_chunked_several_pieces_and_bodiless_answers_are_unchanged(port):
    with httpx.Client(timeout=BOUND) as client:
        resp, writes = _get(client, port, "/chunked")
        assert (resp.status_code, resp.text) == (200, "first second")
        assert resp.headers["transfer-encoding"] == "chunked"
        assert len(writes) == 3, writes  # head + first chunk, the second chunk, the end chunk
        resp, writes = _get(client, port, "/pieces")
        assert resp.text == "abcdefghijkl"
        assert len(writes) == 3, writes  # head + "abc", then each further piece
        resp, writes = _get(client, port, "/none")
        assert (resp.status_code, resp.content) == (204, b"")
        assert len(writes) == 1, writes  # the head alone
        resp, _ = _get(client, port, "/json")  # the connection still carries a clean answer
        assert resp.json() == {"output": "hello"}
