"""The node's images: pull on demand once, prefetch, and stay within a disk budget.

Why: a create for a missing image used to pull inside the request (minutes) and two creates of one
image pulled twice; nothing removed images, so a node filled its disk. `ImageStore` runs one
background pull per image (every create of that image waits on it, up to a bounded wait), keeps the
last-used time of each image, and after each pull removes least-recently-used images that no
container uses (and nobody pinned) until the images fit in `SWE_EXEC_IMAGE_DISK_BUDGET`.

The engine is reached through `ImageBackend` (five calls), which a node backend gives
(`NodeBackend.image_engine`): docker-py's with real layers (`docker_backend.DockerImages`), any
other's through `BackendImages` over its image calls.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from swe_rl.fleet.exec import image_disk as disk
from swe_rl.fleet.exec.backend import BackendError, ImageMissing, NodeBackend
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.image_disk import LocalImage
from swe_rl.fleet.protocol import ApiError
from swe_rl.fleet.snapshot_protocol import CONTAINER_SNAPSHOT_REPOSITORY

SNAPSHOT_IMAGES = CONTAINER_SNAPSHOT_REPOSITORY + ":"

log = logging.getLogger("swe_exec_server")

Progress = Callable[[int, int], None]
"""(bytes done, bytes total) of a pull in flight."""

_UNKNOWN = re.compile(r"manifest unknown|not found|name unknown|does not exist|pull access denied", re.I)
_DISK_FULL = re.compile(r"no space left on device", re.I)


class ImageBackend(Protocol):
    """What the store needs of a node's container engine."""

    def image_info(self, ref: str) -> LocalImage | None: ...
    def pull(self, ref: str, progress: Progress) -> None: ...
    def remove(self, image: LocalImage) -> None: ...
    def list_images(self) -> list[LocalImage]: ...
    def images_in_use(self) -> set[str]: ...
    def data_root(self) -> str: ...


class BackendImages:
    """`ImageBackend` over any `NodeBackend`'s image calls: each image is one layer (no sharing known)."""

    def __init__(self, backend: NodeBackend) -> None:
        self.backend = backend

    @staticmethod
    def _local(info: Any) -> LocalImage:
        return LocalImage(info.id, tuple(info.tags), ((info.id, int(info.size)),) if info.size else ())

    def image_info(self, ref: str) -> LocalImage | None:
        try:
            return self._local(self.backend.image_info(ref))
        except ImageMissing:
            return None

    def pull(self, ref: str, progress: Progress) -> None:
        self.backend.pull_image(ref)

    def remove(self, image: LocalImage) -> None:
        for tag in image.tags or (image.id,):
            self.backend.remove_image(tag)

    def list_images(self) -> list[LocalImage]:
        return [self._local(i) for i in self.backend.list_images()]

    def images_in_use(self) -> set[str]:
        return {c.image for c in self.backend.list_containers({}) if c.image}

    def data_root(self) -> str:
        return ""


@dataclass
class Pull:
    """One pull in flight; every create of its image waits on `done`."""

    ref: str
    started: float
    prefetch: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    error: ApiError | None = None
    bytes_done: int = 0
    bytes_total: int = 0
    waiters: int = 0

    def public(self, now: float) -> dict[str, Any]:
        return {
            "image": self.ref,
            "seconds": round(now - self.started, 3),
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "waiters": self.waiters,
        }


class ImageStore:
    """Pulls (one per image), last-used times, pins, holds and LRU eviction of this node's images."""

    def __init__(self, config: ExecConfig, backend: ImageBackend, *, docker_root: str = "") -> None:
        self.config, self.backend = config, backend
        self.budget = disk.parse_budget(config.image_disk_budget, disk.disk_total(docker_root))
        self.lock = threading.Lock()
        """Guards the store's own state only: never held across a call to the engine (a 3 s removal
        under it made every create wait)."""
        self._evicted = threading.Condition(self.lock)
        self.evicting: dict[str, LocalImage] = {}
        """Images being removed now (id -> image): a hold of one of them waits for its removal to end."""
        self.pulls: dict[str, Pull] = {}
        self.last_used: dict[str, float] = {}
        """Wall time each image id was last asked for."""
        self.holds: dict[str, int] = {}
        """Refs of containers being created: never evicted meanwhile."""
        self._slots = threading.BoundedSemaphore(max(1, config.image_parallel_pulls))
        self.stats: dict[str, float] = {
            "pulls": 0,
            "pulls_failed": 0,
            "pulls_joined": 0,
            "pull_seconds": 0.0,
            "prefetched": 0,
            "evictions": 0,
            "evicted_bytes": 0,
            "disk_full": 0,
            "prefetch_skipped": 0,
        }
        self.bytes_used = 0
        self.bytes_peak = 0
        self.last_pull_bytes = 0
        self.unclaimed: dict[str, float] = {}
        """Prefetched images no create asked for yet (ref -> when pulled): never evicted for
        image_prefetch_keep seconds, so no pull evicts what a prefetch brought before its lease comes."""
        """Bytes the last pull added: the room made before the next one."""

    # ---- asking for an image

    def ensure(self, ref: str, wait: float | None = None) -> None:
        """Return once `ref` is on the node: a pull starts (or is joined) when it is missing.

        Raises 404 (unknown image, or pulls off), 502 (registry unreachable), 507 (disk budget full), or
        503 with the pull's progress when it outlasts the bounded wait (it goes on; a retry joins it)."""
        info = self.backend.image_info(ref)
        if info is not None:
            self._touch(info.id)
            with self.lock:
                self.unclaimed.pop(ref, None)
            return
        if not self.config.allow_pull:
            raise ApiError(404, f"image not found on this node: {ref}", image=ref)
        pull = self._start_pull(ref, joined_counts=True)
        with self.lock:
            pull.waiters += 1
        try:
            finished = pull.done.wait(self.config.image_pull_wait if wait is None else wait)
        finally:
            with self.lock:
                pull.waiters -= 1
        if not finished:
            raise ApiError(
                503,
                f"image {ref} is still being pulled; retry later",
                headers={"Retry-After": "5"},
                image=ref,
                pulling=True,
                progress=pull.public(time.monotonic()),
            )
        if pull.error is not None:
            raise pull.error

    def prefetch(self, refs: list[str]) -> dict[str, str]:
        """Start pulling the missing ones in the background; the state of each (present/pulling/...)."""
        out = {}
        for ref in refs:
            info = self.backend.image_info(ref)
            if info is not None:
                out[ref] = "present"
            elif not self.config.allow_pull:
                out[ref] = "pulls_off"
            elif self.budget and self._full():
                out[ref] = "disk_full"
            else:
                self._start_pull(ref, joined_counts=False, prefetch=True)
                out[ref] = "pulling"
        return out

    @contextlib.contextmanager
    def hold(self, ref: str) -> Iterator[None]:
        """Marks `ref` as used by a container being created: eviction leaves it alone meanwhile. Only a
        hold of an image being removed right now waits (for that removal); every other one is at once."""
        with self.lock:
            while any(disk.matches(i, (ref,)) for i in self.evicting.values()):
                self._evicted.wait()
            self.holds[ref] = self.holds.get(ref, 0) + 1
        try:
            yield
        finally:
            with self.lock:
                self.holds[ref] -= 1
                if not self.holds[ref]:
                    del self.holds[ref]

    # ---- pulls

    def _start_pull(self, ref: str, *, joined_counts: bool, prefetch: bool = False) -> Pull:
        with self.lock:
            pull = self.pulls.get(ref)
            if pull is not None:
                if joined_counts:
                    self.stats["pulls_joined"] += 1
                return pull
            pull = self.pulls[ref] = Pull(ref, time.monotonic(), prefetch)
            self.stats["pulls"] += 1
            self.stats["prefetched"] += 1 if prefetch else 0
        threading.Thread(target=self._run_pull, args=(pull,), name=f"pull {ref}", daemon=True).start()
        return pull

    def _run_pull(self, pull: Pull) -> None:
        def progress(done: int, total: int) -> None:
            pull.bytes_done, pull.bytes_total = done, total

        try:
            with self._slots:
                if self.budget:  # make room for about one more image first
                    hint = pull.prefetch and not pull.waiters
                    room = self.budget - max(1, self.last_pull_bytes)
                    self.enforce_budget(room)
                    if hint and self.bytes_used > room:
                        self.stats["prefetch_skipped"] += 1
                        raise ApiError(507, f"no room to prefetch {pull.ref}", image=pull.ref, disk_full=True)
                    if self._full():
                        self.stats["disk_full"] += 1
                        raise ApiError(
                            507,
                            f"disk budget full: images in use or pinned take {self.bytes_used} of "
                            f"{self.budget} bytes; cannot pull {pull.ref}",
                            image=pull.ref,
                            disk_full=True,
                        )
                before = self.bytes_used
                self.backend.pull(pull.ref, progress)
            info = self.backend.image_info(pull.ref)
            if info is None:
                raise ApiError(502, f"pull of {pull.ref} ended without the image", image=pull.ref)
            self._touch(info.id)
            if pull.prefetch and not pull.waiters:
                with self.lock:
                    self.unclaimed[pull.ref] = time.monotonic()
            self.refresh()
            self.last_pull_bytes = max(0, self.bytes_used - before)
            if self.budget:
                self._fit_or_refuse(pull.ref, info)
        except ApiError as exc:
            pull.error = exc
        except BackendError as exc:
            pull.error = pull_error(pull.ref, exc.message)
        except Exception as exc:  # noqa: BLE001 - any failure reaches the waiters, never a hung create
            pull.error = pull_error(pull.ref, f"{type(exc).__name__}: {exc}")
        finally:
            with self.lock:
                self.pulls.pop(pull.ref, None)
                self.stats["pull_seconds"] += time.monotonic() - pull.started
                if pull.error is not None and not (pull.prefetch and pull.error.status == 507):
                    self.stats["pulls_failed"] += 1
            if pull.error is not None:
                log.warning("pull of %s failed: %s", pull.ref, pull.error.message)
            pull.done.set()

    # ---- the budget

    def _touch(self, image_id: str) -> None:
        with self.lock:
            self.last_used[image_id] = time.time()

    def over_budget(self) -> bool:
        return bool(self.budget) and self.bytes_used > self.budget

    def _full(self) -> bool:
        return bool(self.budget) and self.bytes_used >= self.budget

    def refresh(self) -> list[LocalImage]:
        """The images the budget covers (all, or those under SWE_EXEC_IMAGE_PREFIXES); bytes_used updated."""
        prefixes = self.config.image_prefixes
        images = [  # an image also known by another name belongs to someone else: never counted or removed
            i
            for i in self.backend.list_images()
            if not prefixes or (i.tags and all(t.startswith(prefixes) for t in i.tags))
        ]
        self.bytes_used = disk.bytes_used(images)
        self.bytes_peak = max(self.bytes_peak, self.bytes_used)
        return images

    def _fit_or_refuse(self, ref: str, info: LocalImage) -> None:
        """After a pull: evict idle images until the budget holds; when it cannot (what is left is in
        use, pinned, being created or prefetched for a lease not allocated yet), remove the image just
        pulled and answer 507. Why: the size of a pull is only known once it is done, and a budget let
        past by a pull (seen: 103% with a budget smaller than two images) is no limit."""
        self.enforce_budget()
        with self.lock:
            if not self.over_budget():
                return
            used = self.bytes_used
            self.unclaimed.pop(ref, None)
            self.evicting[info.id] = info
        try:
            self.backend.remove(info)
        except BackendError as exc:  # a container took it meanwhile: it stays, it is in use
            log.info("could not remove %s over the budget: %s", ref, exc)
            return
        finally:
            with self.lock:
                self.evicting.pop(info.id, None)
                self._evicted.notify_all()
        with self.lock:
            self.last_used.pop(info.id, None)
            self.stats["disk_full"] += 1
        self.refresh()
        raise ApiError(
            507,
            f"disk budget full: {ref} took the images to {used} of {self.budget} bytes and nothing idle "
            "could go; it was removed again",
            image=ref,
            disk_full=True,
        )

    def enforce_budget(self, target: int | None = None) -> list[str]:
        """Remove LRU images nobody uses or pinned until the rest fit `target` (default the budget).

        Prefetched images no create claimed yet stay (for `image_prefetch_keep` seconds): their lease
        comes next, and evicting them meant pulling them again (seen: 17 pulls for 12 allocates)."""
        if not self.budget:
            return []
        target = self.budget if target is None else max(1, target)
        images = self.refresh()  # the engine is asked outside the lock: a slow daemon delays only this
        in_use = self.backend.images_in_use()
        with self.lock:  # the victims are marked under the lock: a hold taken after waits for their removal
            keep = {
                i.id
                for i in images
                if i.id in in_use
                or set(i.tags) & in_use
                or any(t.startswith(SNAPSHOT_IMAGES) for t in i.tags)  # container snapshots: theirs to remove
                or i.id in self.evicting  # another pass removes it now
                or disk.matches(i, self.config.pinned_images)
                or disk.matches(i, self.holds)
                or disk.matches(i, self.pulls)
                or disk.matches(i, self._unclaimed_locked())
            }
            chosen = disk.victims(images, target, keep=keep, last_used=self.last_used)
            self.evicting.update((image.id, image) for image in chosen)
        removed = []
        for image in chosen:
            try:
                self.backend.remove(image)
            except BackendError as exc:  # a container took it meanwhile: keep it
                log.info("could not evict %s: %s", image.tags or image.id, exc)
                continue
            finally:
                with self.lock:
                    self.evicting.pop(image.id, None)
                    self._evicted.notify_all()
            log.info("evicted image %s (%d bytes)", ",".join(image.tags) or image.id, image.size)
            with self.lock:
                self.last_used.pop(image.id, None)
                self.stats["evictions"] += 1
            removed.append(image.id)
        if removed:
            before = self.bytes_used
            self.refresh()
            with self.lock:
                self.stats["evicted_bytes"] += max(0, before - self.bytes_used)
        return removed

    def _unclaimed_locked(self) -> set[str]:
        cutoff = time.monotonic() - self.config.image_prefetch_keep
        for ref in [r for r, t in self.unclaimed.items() if t < cutoff]:
            del self.unclaimed[ref]
        return set(self.unclaimed)

    def counts(self) -> dict[str, Any]:
        """Figures for /healthz and the pool: bytes used and budget, pulls, evictions."""
        with self.lock:
            now = time.monotonic()
            return {
                **{k: round(v, 3) if isinstance(v, float) else v for k, v in self.stats.items()},
                "pulling": [p.public(now) for p in self.pulls.values()],
                "bytes_used": self.bytes_used,
                "bytes_peak": self.bytes_peak,
                "budget": self.budget,
                "pinned": list(self.config.pinned_images),
            }


def pull_error(ref: str, reason: str) -> ApiError:
    """The caller's answer for a failed pull: unknown image 404, disk full 507, registry trouble 502."""
    if _DISK_FULL.search(reason):
        return ApiError(507, f"disk full while pulling {ref}: {reason}", image=ref, disk_full=True)
    if _UNKNOWN.search(reason) and "connection" not in reason.lower():
        return ApiError(404, f"image not found in its registry: {ref}: {reason}", image=ref)
    return ApiError(
        502, f"registry unreachable or failing for {ref}: {reason}", image=ref, registry_down=True
    )
