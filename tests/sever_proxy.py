"""A loopback TCP proxy that can lose one answer: the request reaches the server, its response never returns.

This is the failure idempotency is about: the command ran, the caller cannot know.
"""

from __future__ import annotations

import socket
import threading


class SeverProxy:
    """Forwards 127.0.0.1:<port> to a target; `sever_next(marker)` drops the answer to the next request
    whose bytes contain marker (the client's connection is closed instead)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self.severed = 0
        self._closing = False
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop)

    def sever_next(self, marker: bytes) -> None:
        with self._lock:
            self._marker = marker

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            state = {"armed": False}
            self._spawn(self._pump_requests, client, upstream, state)
            self._spawn(self._pump_answers, upstream, client, state)

    def _pump_requests(self, src: socket.socket, dst: socket.socket, state: dict) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    if self._marker is not None and self._marker in data:
                        self._marker, state["armed"] = None, True
                dst.sendall(data)
        except OSError:
            pass
        _close(dst)

    def _pump_answers(self, src: socket.socket, dst: socket.socket, state: dict) -> None:
        try:
            while data := src.recv(65536):
                if state["armed"]:  # the server answered: lose it and cut the caller off
                    self.severed += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        _close(dst)
        _close(src)

    def close(self) -> None:
        self._closing = True
        _close(self._listener)
        for s in self._sockets:
            _close(s)
        for t in self._threads:
            t.join(5)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
