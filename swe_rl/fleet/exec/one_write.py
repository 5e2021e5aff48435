"""An answer's head and the first piece of its body go to the socket in one write, not two.

Why: waitress writes the response head and then the body with a `send` each (its `send_bytes` is 1: every
write is flushed at once). A node's answers are small JSON bodies written in one piece, so that is two
system calls where one does, and two wake-ups and reads for the client on the other end: on loopback,
where the kernel delivers the data in the sender's call, a send is ~20-50 us of CPU on each side.
Everything else is waitress's own `write` (chunking, Content-Length, bodiless statuses): it runs
unchanged against a stand-in channel that keeps what it writes, and the pieces go out joined.
Waitress has no public hook for this: the task class is subclassed, as `arrival.py` does for its stamp.
"""

from __future__ import annotations

from typing import Any

from waitress.task import WSGITask


class _Held:
    """The channel as `WSGITask.write` sees it, its writes kept (`pieces`); anything else is the channel's."""

    __slots__ = ("_channel", "pieces")

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        self.pieces: list[bytes] = []

    def write_soon(self, data: bytes) -> int:
        self.pieces.append(data)
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)


class OneWriteTask(WSGITask):
    channel: Any

    def write(self, data: bytes) -> None:
        if self.wrote_header or not data:  # the head went out already, or nothing to join it with
            super().write(data)
            return
        channel = self.channel
        held = self.channel = _Held(channel)
        try:
            super().write(data)
        finally:
            self.channel = channel
        if held.pieces:
            channel.write_soon(b"".join(held.pieces))
