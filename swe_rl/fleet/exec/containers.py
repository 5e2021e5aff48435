"""The node's managed containers: the registry of what this server owns, and cold create/destroy.

Containers carry labels (managed-by, server id, lease id, owner, deadline, idle TTL; see
`swe_rl.fleet.protocol`), so a restarted server adopts its own containers and never touches
anything else. A failed create removes what it started. Warm containers (`warm.py`) live in
the same registry: they count against the node's cap and are evicted for a lease. The records
(`ContainerRecord`, `CreateSpec`) are in `container_records`.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swe_rl.fleet.checks import scrub
from swe_rl.fleet.exec.backend import (
    BackendError,
    ContainerInfo,
    ContainerSpec,
    NodeBackend,
    NoFreeAddress,
    NotFound,
    Refused,
)
from swe_rl.fleet.exec.config import ExecConfig, parse_bytes
from swe_rl.fleet.exec.container_records import ContainerRecord, CreateSpec
from swe_rl.fleet.protocol import (
    LABEL_CREATED,
    LABEL_DEADLINE,
    LABEL_IDLE_TTL,
    LABEL_LEASE,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_SERVER,
    LABEL_WARM,
    MANAGED_VALUE,
    ApiError,
)

if TYPE_CHECKING:
    from swe_rl.fleet.exec.claimed_state import ClaimedState
    from swe_rl.fleet.exec.images import ImageStore

log = logging.getLogger("swe_exec_server")

CONTAINER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class Registry:
    """The containers this server manages, by id, behind one lock (shared with the warm pool)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[str, ContainerRecord] = {}
        self.reserved = 0
        """Slots taken by containers being created (cold or warm)."""
        self.creating: set[str] = set()
        """Names of containers being created and not recorded yet: the reaper leaves them alone.

        A name leaves this set only in the same locked step that records its container (`add_created_locked`)
        or after a failed create, so under the lock a container of ours is always in one of the two."""
        self.on_forget_warm: Callable[[str], None] = lambda cid: None
        """Called (lock held) when a warm container leaves the registry (the warm pool forgets it)."""

    def lookup(self, container_id: Any) -> ContainerRecord:
        if not isinstance(container_id, str) or not CONTAINER_ID_RE.match(container_id):
            raise ApiError(
                400, "container_id must be a container id or name (letters, digits, '_', '.', '-')"
            )
        with self.lock:
            rec = self.records.get(container_id)
            if rec is None:
                for r in self.records.values():
                    if r.name == container_id or (len(container_id) >= 12 and r.id.startswith(container_id)):
                        rec = r
                        break
        if rec is None or rec.warm:
            raise ApiError(404, f"unknown container {container_id!r}: not managed by this exec server")
        return rec

    def count(self) -> int:
        with self.lock:
            return len(self.records) + self.reserved

    def all(self) -> list[ContainerRecord]:
        with self.lock:
            return list(self.records.values())

    def touch(self, ids: list[str]) -> tuple[list[str], list[str]]:
        now = time.time()
        touched, missing = [], []
        with self.lock:
            for cid in ids:
                rec = self.records.get(cid)
                if rec is None or rec.warm:
                    missing.append(cid)
                else:
                    rec.last_activity = now
                    touched.append(cid)
        return touched, missing

    def add_created_locked(self, rec: ContainerRecord) -> None:
        """Record a container this server just started; its name stops being "being created" in the same step."""
        self.records[rec.id] = rec
        self.creating.discard(rec.name)

    def forget_locked(self, rec: ContainerRecord) -> None:
        self.records.pop(rec.id, None)
        if rec.warm:
            self.on_forget_warm(rec.id)

    def use(self, container_id: Any) -> InUse:
        return InUse(self, self.lookup(container_id))


class InUse:
    """Marks a container busy for the reaper while a call runs on it."""

    def __init__(self, registry: Registry, rec: ContainerRecord) -> None:
        self.registry, self.rec = registry, rec

    def __enter__(self) -> ContainerRecord:
        with self.registry.lock:
            self.rec.in_flight += 1
            self.rec.last_activity = time.time()
        return self.rec

    def __exit__(self, *exc: Any) -> None:
        with self.registry.lock:
            self.rec.in_flight -= 1
            self.rec.last_activity = time.time()


class Containers:
    """Creates and removes this node's containers through the node backend (`backend.py`)."""

    def __init__(
        self,
        config: ExecConfig,
        backend: NodeBackend,
        registry: Registry,
        state: ClaimedState,
        stats: dict[str, int],
        images: ImageStore,
    ) -> None:
        self.config, self.backend, self.registry, self.state, self.stats = (
            config,
            backend,
            registry,
            state,
            stats,
        )
        self._private_paths = tuple(p for p in backend.private_paths() if p)
        self.images = images
        self.on_removed: Callable[[str], None] | None = None
        """Called with a removed container's image (the manager frees a deleted snapshot's image)."""

    def scrub(self, text: str) -> str:
        """A backend's message without the host paths it must not leak."""
        return scrub(text, self._private_paths)

    def own_labels(self) -> dict[str, str]:
        """The labels every container of this server carries (what adoption and the reaper list by)."""
        return {LABEL_MANAGED: MANAGED_VALUE, LABEL_SERVER: self.config.server_id}

    def list_own(self) -> list[ContainerInfo]:
        return self.backend.list_containers(self.own_labels())

    def load_existing(self) -> None:
        """Adopt this server's containers left from an earlier run (fresh idle window).

        Warm containers are adopted only when the state file says they were claimed (with
        their lease); unclaimed ones are destroyed: nothing warm outlives the server.
        """
        now = time.time()
        state = self.state.load()
        doomed = []
        for c in self.list_own():
            labels, image, workdir = c.labels, c.image, c.workdir
            if labels.get(LABEL_WARM) == "1":
                info = state.get(c.id)
                if not isinstance(info, dict):
                    doomed.append(c.id)
                    continue
                rec = ContainerRecord(
                    id=c.id,
                    name=c.name,
                    image=str(info.get("image") or image),
                    lease_id=str(info.get("lease_id", "")),
                    owner=str(info.get("owner", "")),
                    workdir=str(info.get("workdir") or workdir),
                    created=float(info.get("created", now)),
                    deadline=float(info.get("deadline", now)),
                    idle_ttl=float(info.get("idle_ttl", self.config.idle_ttl)),
                    last_activity=now,
                    from_warm=True,
                    image_id=c.image_id,
                )
            else:
                rec = ContainerRecord(
                    id=c.id,
                    name=c.name,
                    image=image,
                    lease_id=labels.get(LABEL_LEASE, ""),
                    owner=labels.get(LABEL_OWNER, ""),
                    workdir=workdir,
                    created=float(labels.get(LABEL_CREATED, now)),
                    deadline=float(labels.get(LABEL_DEADLINE, now)),
                    idle_ttl=float(labels.get(LABEL_IDLE_TTL, self.config.idle_ttl)),
                    last_activity=now,
                    image_id=c.image_id,
                )
            with self.registry.lock:
                self.registry.records[c.id] = rec
        for cid in doomed:
            log.info("destroying unclaimed warm container %s left from an earlier run", cid[:12])
            self.discard(cid)
        self.state.save()

    def create_cold(
        self,
        spec: CreateSpec,
        lease_id: str,
        owner: str,
        ttl: float,
        idle_ttl: float,
        evictable_locked: Callable[[], ContainerRecord | None],
    ) -> ContainerRecord:
        """Start a new container for a lease; at the cap, a warm one nobody claimed makes room."""
        cfg, reg = self.config, self.registry
        victim = None
        with reg.lock:
            if len(reg.records) + reg.reserved >= cfg.max_containers:
                victim = evictable_locked()
                if victim is None:
                    raise ApiError(
                        429, f"node full: {cfg.max_containers} containers", capacity=cfg.max_containers
                    )
                reg.forget_locked(victim)
            reg.reserved += 1
            self.stats["cold"] += 1
        container = None
        try:
            if victim is not None:  # a lease matters more than a warm container nobody claimed yet
                self.stats["evicted"] += 1
                log.info("evicting warm container %s (%s) to make room", victim.id[:12], victim.image)
                self.discard(victim.id)
            now = time.time()
            labels = {
                LABEL_LEASE: lease_id,
                LABEL_OWNER: owner,
                LABEL_DEADLINE: f"{now + ttl:.3f}",
                LABEL_IDLE_TTL: f"{idle_ttl:.3f}",
            }
            container = self.start_container(spec, labels, now)
            rec = ContainerRecord(
                id=container.id,
                name=container.name,
                image=spec.image,
                lease_id=lease_id,
                owner=owner,
                workdir=spec.workdir,
                created=now,
                deadline=now + ttl,
                idle_ttl=idle_ttl,
                last_activity=now,
                image_id=container.image_id,
            )
            with reg.lock:
                reg.add_created_locked(rec)  # from "being created" to recorded in one step
            return rec
        except BaseException:
            if container is not None:  # started but not recorded: the reaper takes it as unknown
                with reg.lock:
                    reg.creating.discard(container.name)
            raise
        finally:
            with reg.lock:
                reg.reserved -= 1

    def start_container(self, spec: CreateSpec, labels: dict[str, str], now: float) -> ContainerInfo:
        """Create + start with the spec's limits; nothing half-created stays behind.

        On success the container's name stays in the registry's `creating` set: the caller records the
        container with `Registry.add_created_locked` (or discards the name), so no reaper pass can take
        the new container for an unknown one in between."""
        with self.images.hold(spec.image):  # no eviction of the image between the pull and the start
            self.images.ensure(spec.image)
            return self._create_and_start(spec, labels, now)

    def _create_and_start(self, spec: CreateSpec, labels: dict[str, str], now: float) -> Any:
        cfg = self.config
        labels = {
            LABEL_MANAGED: MANAGED_VALUE,
            LABEL_SERVER: cfg.server_id,
            LABEL_CREATED: f"{now:.3f}",
            **labels,
        }
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"swe-{cfg.server_id[:20]}-{secrets.token_hex(6)}")
        with self.registry.lock:
            self.registry.creating.add(name)
        container = None
        started = False
        try:
            container = self.backend.create_container(
                ContainerSpec(
                    image=spec.image,
                    name=name,
                    command=tuple(cfg.keepalive_command),
                    labels=labels,
                    workdir=spec.workdir,
                    env=dict(spec.env),
                    memory=parse_bytes(spec.memory),
                    cpus=spec.cpus,
                    pids_limit=spec.pids_limit,
                    network=self._network(spec.network),
                )
            )
            self.backend.start_container(container.id)
            started = True
            return container
        except NoFreeAddress as exc:  # no free address on the network: a clear 507 at once, not a retry
            self._remove_half_created(container)
            raise ApiError(
                507,
                f"no free address on network {spec.network!r} of this node: {self.scrub(exc.message)}",
                network=spec.network,
                network_full=True,
            ) from None
        except Refused as exc:  # what the request asked for (a limit, a workdir through a file, ...)
            self._remove_half_created(container)
            reason = self.scrub(exc.message)
            raise ApiError(
                400, f"{self.backend.name} refused this container: {reason}", reason=reason
            ) from None
        except BaseException:
            self._remove_half_created(container)
            raise
        finally:
            if not started:
                with self.registry.lock:
                    self.registry.creating.discard(name)

    def _network(self, network: bool | str) -> bool | str:
        if isinstance(network, str) and not self.backend.network_exists(network):
            raise ApiError(
                404,
                f"network {network!r} not found on this node (SWE_EXEC_NETWORKS names it; "
                f"create it with `docker network create --internal {network}`)",
                network=network,
                network_missing=True,
            )
        return network

    def _remove_half_created(self, container: ContainerInfo | None) -> None:
        if container is None:
            return
        try:
            self.backend.remove_container(container.id)
        except NotFound:
            pass
        except BackendError:
            log.exception("could not remove half-created container %s", container.id[:12])

    def ensure_image(self, image: str) -> None:
        """A clear 404 now when the image is missing and cannot be pulled; else its pull starts (not awaited)."""
        state = self.images.prefetch([image])[image]
        if state == "pulls_off":
            raise ApiError(404, f"image not found on this node: {image}", image=image)

    def destroy(self, container_id: Any) -> dict[str, Any]:
        rec = self.registry.lookup(container_id)
        self.remove(rec.id)
        return {"ok": True, "container_id": rec.id}

    def discard(self, cid: str) -> None:
        """Remove a container from the node, whatever its state; a failure is logged (the reaper retries)."""
        try:
            self.backend.remove_container(cid)
        except NotFound:
            pass
        except BackendError as exc:  # e.g. removal already in progress
            log.warning("could not remove %s: %s", cid[:12], exc)

    def remove(self, cid: str) -> None:
        with self.registry.lock:
            rec = self.registry.records.get(cid)
            if rec is not None:
                self.registry.forget_locked(rec)
        self.discard(cid)
        if rec is not None and rec.from_warm:
            self.state.save()
        if rec is not None and self.on_removed is not None:
            self.on_removed(rec.image)
        if self.images.over_budget():  # an image kept over budget only because it was in use can go now
            self.images.enforce_budget()
