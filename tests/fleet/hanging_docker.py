"""A Docker daemon that can be made to hang: the real daemon behind a unix-socket proxy (tests only)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DAEMON = "/var/run/docker.sock"


class HangingProxy:
    """Forwards a unix socket to the Docker daemon until `hang` is set; then answers nothing."""

    def __init__(self, path: str) -> None:
        self.path, self.hang, self.closed = path, threading.Event(), threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(DAEMON)
            self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if self.hang.is_set():
                    continue  # swallowed: the caller waits for an answer that never comes
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)  # a half-close goes on (an exec's output ends with one)
        except OSError:
            pass

    def close(self) -> None:
        self.closed.set()
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@contextmanager
def hanging_daemon() -> Iterator[HangingProxy]:
    """A proxy in a short temp folder (a unix socket path has ~100 bytes); closed and removed after."""
    folder = tempfile.mkdtemp(prefix="swe-hung-")
    proxy = HangingProxy(os.path.join(folder, "d.sock"))
    try:
        yield proxy
    finally:
        proxy.close()
        shutil.rmtree(folder, ignore_errors=True)
