"""Disk arithmetic of a node's images: the budget, bytes with shared layers counted once, LRU victims.

Pure functions over `LocalImage` records (no Docker, no clock), so every eviction rule is unit-tested
without a daemon. A layer is named by the chain of image history entries up to it: two images built
from one base share that chain (and so its bytes) whether they were built here or pulled.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from swe_rl.fleet.exec.config import parse_bytes


@dataclass(frozen=True)
class LocalImage:
    """One local image as the daemon describes it."""

    id: str
    tags: tuple[str, ...]
    layers: tuple[tuple[str, int], ...]
    """(chain key, bytes) of each non-empty layer, base first."""

    @property
    def size(self) -> int:
        return sum(size for _, size in self.layers)


def layers_of(history: Iterable[Mapping[str, object]]) -> tuple[tuple[str, int], ...]:
    """Layer keys and sizes from the daemon's image history (newest entry first, as the API gives it)."""
    chain = hashlib.sha256()
    out = []
    for entry in reversed(list(history)):
        size = entry.get("Size")
        size = int(size) if isinstance(size, int) else 0
        chain.update(f"{entry.get('Created')}|{entry.get('CreatedBy')}|{size}\n".encode())
        if size > 0:
            out.append((chain.hexdigest()[:32], size))
    return tuple(out)


def bytes_used(images: Iterable[LocalImage]) -> int:
    """Bytes the images take on disk, each shared layer once."""
    layers: dict[str, int] = {}
    for image in images:
        layers.update(image.layers)
    return sum(layers.values())


def parse_budget(text: str, disk_total: int) -> int:
    """`SWE_EXEC_IMAGE_DISK_BUDGET` in bytes: '200g', a byte count, or 'N%' of the disk; 0 or '' = none."""
    text = text.strip()
    if not text:
        return 0
    if text.endswith("%"):
        share = float(text[:-1])
        if not 0 < share <= 100:
            raise ValueError(f"disk budget share must be in (0, 100]%: {text!r}")
        return int(disk_total * share / 100)
    return parse_bytes(text)


def disk_total(path: str) -> int:
    """Size of the filesystem holding `path` (Docker's data root), 0 when it cannot be read."""
    try:
        st = os.statvfs(path or "/")
    except OSError:
        return 0
    return st.f_blocks * st.f_frsize


def matches(image: LocalImage, refs: Collection[str]) -> bool:
    """The image is one of `refs` (by tag, tag without ':latest', or id)."""
    for ref in refs:
        if ref == image.id or ref in image.tags or f"{ref}:latest" in image.tags:
            return True
    return False


def victims(
    images: list[LocalImage],
    budget: int,
    *,
    keep: Collection[str],
    last_used: Mapping[str, float],
) -> list[LocalImage]:
    """Least-recently-used images to remove so the rest fit in `budget` (ids in `keep` never go).

    Greedy from the oldest: each removal frees only the layers no remaining image holds. Returns the
    shortest such prefix of the LRU order, or every candidate when even that is not enough.
    """
    if budget <= 0:
        return []
    remaining = {i.id: i for i in images}
    used = bytes_used(remaining.values())
    order = sorted((i for i in images if i.id not in keep), key=lambda i: (last_used.get(i.id, 0.0), i.id))
    out = []
    for image in order:
        if used <= budget:
            break
        del remaining[image.id]
        out.append(image)
        used = bytes_used(remaining.values())
    return out
