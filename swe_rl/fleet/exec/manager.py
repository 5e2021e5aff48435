"""One node's exec service assembled from its parts: registry, containers, warm pool, reaper, operations.

`ContainerManager` only wires the parts together and answers the few questions that span
them (create: warm claim or cold start; how many containers are leased). The node backend
(`backend.py`) is the one `config.backend` names (`SWE_EXEC_BACKEND`), or one given by the caller.
"""

from __future__ import annotations

import logging
from typing import Any

from swe_rl.fleet.exec.backend import NodeBackend, open_backend
from swe_rl.fleet.exec.claimed_state import ClaimedState
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.containers import ContainerRecord, Containers, CreateSpec, Registry
from swe_rl.fleet.exec.images import ImageStore
from swe_rl.fleet.exec.operations import Operations
from swe_rl.fleet.exec.reaper import Reaper
from swe_rl.fleet.exec.snapshot_ops import SnapshotOps
from swe_rl.fleet.exec.snapshots import SnapshotConfig, SnapshotStore
from swe_rl.fleet.exec.warm import WarmPool
from swe_rl.fleet.protocol import CreateRequest, WarmRequest

log = logging.getLogger("swe_exec_server")


class ContainerManager:
    """The node's managed containers: create, operations, destroy, reap, warm pools."""

    def __init__(self, config: ExecConfig, backend: NodeBackend | None = None) -> None:
        self.config = config
        self.backend = backend if backend is not None else open_backend(config)
        self.warm_stats = {
            "claimed": 0,
            "promised": 0,
            "cold": 0,
            "started": 0,
            "evicted": 0,
            "expired": 0,
            "failed": 0,
            "dropped": 0,
        }
        self.registry = Registry()
        self.state = ClaimedState(config, self.registry)
        engine = self.backend.image_engine()
        self.images = ImageStore(config, engine, docker_root=engine.data_root())
        self.containers = Containers(
            config, self.backend, self.registry, self.state, self.warm_stats, self.images
        )
        self.warm_pool = WarmPool(config, self.registry, self.containers, self.state, self.warm_stats)
        self.reaper = Reaper(config, self.registry, self.containers, self.warm_stats)
        self.ops = Operations(config, self.registry, self.containers)
        self.snapshots = SnapshotOps(
            self.ops, SnapshotStore(SnapshotConfig.from_env(), config.server_id), config.server_id
        )
        self.containers.on_removed = self.snapshots.image_released
        self.containers.load_existing()
        self.images.enforce_budget() if self.images.budget else self.images.refresh()

    def scrub(self, text: str) -> str:
        return self.containers.scrub(text)

    def create(self, req: CreateRequest) -> dict[str, Any]:
        """A warm container of this exact spec when one is ready (or starting), else a cold start."""
        spec = _spec(req)
        assert req.ttl is not None and req.idle_ttl is not None  # filled by validation.create_request
        rec = self.warm_pool.claim(spec, req.lease_id, req.owner, req.ttl, req.idle_ttl)
        warm = rec is not None
        if rec is None:
            rec = self.containers.create_cold(
                spec, req.lease_id, req.owner, req.ttl, req.idle_ttl, self.warm_pool.evictable_locked
            )
            self.warm_pool.started_cold(spec)
        return {
            "container_id": rec.id,
            "name": rec.name,
            "image": rec.image,
            "image_id": rec.image_id,
            "workdir": rec.workdir,
            "deadline": rec.deadline,
            "network": spec.network,
            "warm": warm,
        }

    def warm(self, req: WarmRequest) -> dict[str, Any]:
        assert req.ttl is not None
        return self.warm_pool.set_target(_spec(req), req.count, req.ttl)

    def destroy(self, container_id: Any) -> dict[str, Any]:
        return self.containers.destroy(container_id)

    def count(self) -> int:
        return self.registry.count()

    def leased_count(self) -> int:
        """Containers that are not warm (leased, or being created cold)."""
        reg = self.registry
        with reg.lock:
            leased = sum(1 for r in reg.records.values() if not r.warm)
            return leased + reg.reserved - self.warm_pool.starting_locked()

    def records(self) -> list[ContainerRecord]:
        return self.registry.all()

    def touch(self, ids: list[str]) -> tuple[list[str], list[str]]:
        return self.registry.touch(ids)

    def reap_once(self) -> list[str]:
        """One reaper pass over the containers, then over the snapshots (expired records, their images)."""
        reaped = self.reaper.reap_once()
        try:
            self.snapshots.reap()
        except Exception:  # a start is not refused for it: the next pass retries
            log.exception("snapshot reap failed")
        return reaped

    def start_background(self) -> None:
        """The reaper and the warm refiller threads."""
        self.reaper.start()
        self.snapshots.store.start(self.config.reap_interval, self.snapshots.reap)
        self.warm_pool.start_refiller()

    def stop(self) -> int:
        """Stop background work and destroy the warm containers nobody claimed; returns how many."""
        self.reaper.stop()
        self.snapshots.store.stop()
        destroyed = self.warm_pool.stop()
        try:  # the images of snapshots deleted while a container still used them, when it is gone now
            self.snapshots.reap()
        except Exception:  # stopping goes on; the next start reaps
            log.exception("snapshot reap failed")
        self.snapshots.store.close()
        return destroyed


def _spec(req: CreateRequest | WarmRequest) -> CreateSpec:
    assert req.memory is not None and req.cpus is not None and req.pids_limit is not None
    assert req.network is not None and req.workdir is not None
    return CreateSpec(
        req.image,
        req.memory,
        req.cpus,
        req.pids_limit,
        req.network,
        req.workdir,
        tuple(sorted(req.env.items())),
        req.baseline,
    )
