"""Serve a Starlette app with uvicorn in a thread on a free loopback port: the base of the scripted test peers."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route


class LoopbackServer:
    """Mixin: subclasses give `routes()`; `start()`/`stop()` or `with` run a real HTTP server on 127.0.0.1."""

    port: int = 0
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    def routes(self) -> list[Route]:
        raise NotImplementedError

    def start(self) -> Any:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(
            Starlette(routes=self.routes()),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=type(self).__name__, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{type(self).__name__} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
