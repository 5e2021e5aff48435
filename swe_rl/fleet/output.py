"""Bounded capture of a command's output, shared by the exec server and the in-process environment
(`swe_rl.agent.local_environment`), so both truncate a flood the same way."""

from __future__ import annotations

__all__ = ["HeadTailBuffer"]


class HeadTailBuffer:
    """Keeps the first and last `limit / 2` bytes of a stream, counting what it drops.

    Memory stays bounded whatever the command prints.
    """

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > self.head_limit + self.tail_limit

    def getvalue(self) -> bytes:
        if not self.truncated:
            return bytes(self.head + self.tail)
        tail = self.tail[-self.tail_limit :] if self.tail_limit else b""
        dropped = self.total - len(self.head) - len(tail)
        marker = f"\n\n[... {dropped} bytes of output truncated ...]\n\n".encode()
        return bytes(self.head) + marker + bytes(tail)
