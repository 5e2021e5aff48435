"""Warm pools: containers started ahead of the creates that will want them.

`POST /warm` sets a target of pre-started containers for one exact create request (image
and limits); a background refiller keeps it filled within bounds (`max_warm`,
`max_containers`, a free-memory floor), and a matching create claims one with no Docker
call. Labels cannot change, so a claimed container's lease lives in memory and in a small
state file (`claimed_state`); a restart adopts claimed ones and destroys unclaimed ones, a
graceful stop destroys the unclaimed ones, and the reaper expires them past their TTL.
One start (its handle, labels and baseline ahead) is `warm_start`'s.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from swe_rl.fleet.exec.claimed_state import ClaimedState
from swe_rl.fleet.exec.config import ExecConfig, node_memory, parse_bytes
from swe_rl.fleet.exec.containers import ContainerRecord, Containers, CreateSpec, Registry
from swe_rl.fleet.exec.warm_start import WarmStart, record_baseline_ahead, warm_labels
from swe_rl.fleet.protocol import ApiError

log = logging.getLogger("swe_exec_server")


@dataclass
class WarmTarget:
    spec: CreateSpec
    count: int
    ttl: float
    expires: float
    retry_at: float = 0.0
    """After a failed start, no new start for this key before then."""
    last_error: str = ""
    failures: int = 0
    """Failed starts in a row."""


class WarmPool:
    """Warm targets, the ready and starting containers per spec, and the refiller thread."""

    def __init__(
        self,
        config: ExecConfig,
        registry: Registry,
        containers: Containers,
        state: ClaimedState,
        stats: dict[str, int],
    ) -> None:
        self.config, self.registry, self.containers, self.state, self.stats = (
            config,
            registry,
            containers,
            state,
            stats,
        )
        self.stopping = False
        self._stop = threading.Event()
        self._targets: dict[tuple[Any, ...], WarmTarget] = {}
        self._ready: dict[tuple[Any, ...], list[str]] = {}
        """Warm container ids per key, oldest first."""
        self._starting: dict[tuple[Any, ...], list[WarmStart]] = {}
        self._wake = threading.Event()
        self._refiller: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._claims: dict[tuple[Any, ...], list[float]] = {}
        """Times of recent creates per key (claimed or not): the demand the refill keeps up with."""
        self._dropped: dict[tuple[Any, ...], dict[str, Any]] = {}
        """Warm specs dropped after failed starts: /warm for them is declined until a cold create succeeds."""
        self.min_free_memory = parse_bytes(config.warm_min_free_memory)
        registry.on_forget_warm = self._forget_locked

    def _forget_locked(self, cid: str) -> None:
        for ids in self._ready.values():
            if cid in ids:
                ids.remove(cid)

    def starting_locked(self) -> int:
        return sum(len(v) for v in self._starting.values())

    def set_target(self, spec: CreateSpec, count: int, ttl: float) -> dict[str, Any]:
        """Set the warm target of one exact create request: `count` started containers kept until `ttl`."""
        cfg = self.config
        if count > 0:
            self.containers.ensure_image(spec.image)  # a clear 404 now rather than failed starts later
        with self.registry.lock:
            if self.stopping:
                raise ApiError(503, "exec server is stopping")
            dropped = self._dropped.get(spec.key)
            if dropped is not None and dropped["until"] <= time.time():
                del self._dropped[spec.key]
                dropped = None
            if count == 0 or dropped is not None:
                self._targets.pop(spec.key, None)
            else:
                self._targets[spec.key] = WarmTarget(spec, min(count, cfg.max_warm), ttl, time.time() + ttl)
            ready = len(self._ready.get(spec.key, []))
            starting = len(self._starting.get(spec.key, []))
        self._wake.set()
        if dropped is not None:
            return {
                "ok": True,
                "image": spec.image,
                "count": count,
                "accepted": 0,
                "ttl": ttl,
                "ready": ready,
                "starting": starting,
                "max_warm": cfg.max_warm,
                "dropped": dropped["reason"],
            }
        return {
            "ok": True,
            "image": spec.image,
            "count": count,
            "accepted": min(count, cfg.max_warm),
            "ttl": ttl,
            "ready": ready,
            "starting": starting,
            "max_warm": cfg.max_warm,
        }

    def started_cold(self, spec: CreateSpec) -> None:
        """A cold create of this spec succeeded: warming it may be asked again."""
        if self._dropped:
            with self.registry.lock:
                self._dropped.pop(spec.key, None)

    def claim(
        self, spec: CreateSpec, lease_id: str, owner: str, ttl: float, idle_ttl: float
    ) -> ContainerRecord | None:
        """Take a ready warm container of this exact spec, or one being started (never slower than cold)."""
        key = spec.key
        now = time.time()
        rec: ContainerRecord | None = None
        start: WarmStart | None = None
        burst = self.config.warm_burst_window > 0
        with self.registry.lock:
            if burst:
                self._claims.setdefault(key, []).append(now)
            ids = self._ready.get(key)
            while ids and rec is None:
                cand = self.registry.records.get(ids.pop(0))
                if cand is not None and cand.warm and cand.deadline > now + 5:  # never one about to expire
                    rec = cand
            if rec is None:
                start = next((s for s in self._starting.get(key, []) if not s.promised), None)
                if start is not None:
                    start.promised = True
        if burst and rec is None:
            # This create waits (on a start, or cold): let the refiller start the burst's extra containers
            # now, in parallel with it, rather than after it.
            self._wake.set()
        if rec is None and start is not None:
            start.done.wait(300.0)
            with self.registry.lock:
                rec = start.rec
                if rec is None:
                    start.abandoned = True  # if it comes up after all, it goes to the ready list
                else:
                    self.stats["promised"] += 1
        if rec is None:
            return None
        now = time.time()
        with self.registry.lock:
            rec.warm, rec.from_warm = False, True
            rec.lease_id, rec.owner, rec.created = lease_id, owner, now
            rec.deadline, rec.idle_ttl, rec.last_activity = now + ttl, idle_ttl, now
            self.stats["claimed"] += 1
        self.state.save()
        self._wake.set()  # refill behind the claim
        return rec

    def evictable_locked(self) -> ContainerRecord | None:
        """The oldest ready warm container of the key with the most ready ones."""
        best = max(self._ready.values(), key=len, default=[])
        for cid in best:
            rec = self.registry.records.get(cid)
            if rec is not None and rec.warm:
                return rec
        return None

    def counts(self) -> dict[str, Any]:
        with self.registry.lock:
            ready: dict[str, int] = {}
            for r in self.registry.records.values():
                if r.warm:
                    ready[r.image] = ready.get(r.image, 0) + 1
            starting = self.starting_locked()
            return {"warm": ready, "warm_total": sum(ready.values()), "warm_starting": starting}

    def targets(self) -> list[dict[str, Any]]:
        now = time.time()
        with self.registry.lock:
            return [
                {
                    "image": t.spec.image,
                    "memory": t.spec.memory,
                    "cpus": t.spec.cpus,
                    "pids_limit": t.spec.pids_limit,
                    "network": t.spec.network,
                    "workdir": t.spec.workdir,
                    "count": t.count,
                    "ready": len(self._ready.get(k, [])),
                    "starting": len(self._starting.get(k, [])),
                    "expires_in": round(t.expires - now, 3),
                    "last_error": t.last_error,
                }
                for k, t in self._targets.items()
            ]

    def memory_ok(self) -> bool:
        total, available = node_memory()
        return total == 0 or available > self.min_free_memory

    def refill_once(self) -> int:
        """Start warm containers up to each target, within every bound; returns how many were started."""
        cfg, reg = self.config, self.registry
        now = time.time()
        if cfg.max_warm <= 0:
            return 0
        memory_ok = None
        starts: list[WarmStart] = []
        with reg.lock:
            for key in [k for k, t in self._targets.items() if t.expires <= now]:
                del self._targets[key]
            for key in [
                k for k, c in self._claims.items() if k not in self._targets and (not c or c[-1] < now - 60)
            ]:
                del self._claims[key]
            if self.stopping:
                return 0
            in_flight = self.starting_locked()
            warm_total = sum(1 for r in reg.records.values() if r.warm) + in_flight
            for key, target in self._targets.items():
                if target.retry_at > now:
                    continue
                have = len(self._ready.get(key, [])) + sum(
                    1 for s in self._starting.get(key, []) if not s.promised
                )
                for _ in range(self._wanted_locked(key, target, now) - have):
                    if (
                        in_flight >= self.parallel()
                        or warm_total >= cfg.max_warm
                        or len(reg.records) + reg.reserved >= cfg.max_containers
                    ):
                        break
                    if memory_ok is None:
                        memory_ok = self.memory_ok()
                    if not memory_ok:
                        break
                    start = WarmStart(target.spec, now + target.ttl, target.ttl)
                    self._starting.setdefault(key, []).append(start)
                    reg.reserved += 1
                    in_flight += 1
                    warm_total += 1
                    starts.append(start)
        if memory_ok is False:
            log.debug("warm refill paused: MemAvailable below %s", cfg.warm_min_free_memory)
        for start in starts:
            self._executor().submit(self._start_one, start)
        return len(starts)

    def _wanted_locked(self, key: tuple[Any, ...], target: WarmTarget, now: float) -> int:
        """The target, raised to twice the creates of the last burst window (back-to-back allocations)."""
        window = self.config.warm_burst_window
        claims = self._claims.get(key)
        if window <= 0 or not claims:
            return target.count
        while claims and claims[0] < now - window:
            claims.pop(0)
        if len(claims) < 2:  # one create is no burst
            return target.count
        return max(target.count, min(self.config.max_warm, 2 * len(claims)))

    def parallel(self) -> int:
        """Warm starts at once: `warm_parallel`, or when 0, 4 per CPU core capped by max_warm."""
        if self.config.warm_parallel > 0:
            return self.config.warm_parallel
        return max(1, min(self.config.max_warm, 4 * (os.cpu_count() or 1)))

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.parallel(), thread_name_prefix="warm")
        return self._pool

    def _start_one(self, start: WarmStart) -> None:
        spec, key, reg = start.spec, start.spec.key, self.registry
        now = time.time()
        container = None
        error = ""
        refused = ahead = False
        try:
            container = self.containers.start_container(spec, warm_labels(start), now)
            ahead = spec.baseline and record_baseline_ahead(self.containers, container.id, spec.workdir)
        except ApiError as exc:
            error, refused = exc.message, exc.status == 400  # the spec itself: it will never start
        except Exception as exc:  # noqa: BLE001 - a failed warm start must never take the refiller down
            error = f"{type(exc).__name__}: {exc}"
        doomed = False
        dropped: dict[str, Any] | None = None
        with reg.lock:
            if container is not None:  # recorded below, or doomed: no longer "being created" either way
                reg.creating.discard(container.name)
            self._starting[key].remove(start)
            if not self._starting[key]:
                del self._starting[key]
            reg.reserved -= 1
            target = self._targets.get(key)
            if container is None:
                self.stats["failed"] += 1
                if target is not None:
                    target.retry_at, target.last_error = time.time() + 10.0, error
                    target.failures += 1
                    if refused or target.failures >= self.config.warm_max_failures:
                        dropped = self._drop_target_locked(key, target)
            elif self.stopping:
                doomed = True
            else:
                if target is not None:
                    target.failures = 0
                self.stats["started"] += 1
                rec = ContainerRecord(
                    id=container.id,
                    name=container.name,
                    image=spec.image,
                    lease_id="",
                    owner="",
                    workdir=spec.workdir,
                    created=now,
                    deadline=start.deadline,
                    idle_ttl=start.ttl,
                    last_activity=now,
                    warm=True,
                    image_id=container.image_id,
                    baseline_ahead=ahead,
                )
                reg.add_created_locked(rec)
                if start.promised and not start.abandoned:
                    start.rec = rec  # handed straight to the create waiting for it
                else:
                    self._ready.setdefault(key, []).append(container.id)
        if dropped is not None:
            log.warning(
                "warm spec of %s dropped after %d failed start(s): %s", spec.image, dropped["failures"], error
            )
        elif error:
            log.debug("warm start of %s failed: %s", spec.image, error)
        if doomed and container is not None:
            self.containers.discard(container.id)
        start.done.set()
        self._wake.set()

    def _drop_target_locked(self, key: tuple[Any, ...], target: WarmTarget) -> dict[str, Any]:
        """Stop refilling a spec that does not start; kept (for /status) until its target would expire."""
        del self._targets[key]
        info = {
            "image": target.spec.image,
            "memory": target.spec.memory,
            "cpus": target.spec.cpus,
            "workdir": target.spec.workdir,
            "failures": target.failures,
            "reason": target.last_error,
            "at": time.time(),
            "until": max(target.expires, time.time() + 60.0),
        }
        self._dropped[key] = info
        self.stats["dropped"] += 1
        return info

    def dropped(self) -> list[dict[str, Any]]:
        now = time.time()
        with self.registry.lock:
            for key in [k for k, d in self._dropped.items() if d["until"] <= now]:
                del self._dropped[key]
            return [dict(d) for d in self._dropped.values()]

    def start_refiller(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self._wake.wait(self.config.warm_interval)
                self._wake.clear()
                if self._stop.is_set():
                    break
                try:
                    self.refill_once()
                except Exception:  # the refiller must outlive any one bad pass
                    log.exception("warm refill pass failed")

        self._refiller = threading.Thread(target=loop, name="warm-refiller", daemon=True)
        self._refiller.start()

    def destroy_unclaimed(self) -> int:
        """Remove every unclaimed warm container (graceful stop)."""
        with self.registry.lock:
            doomed = [r for r in self.registry.records.values() if r.warm]
            for rec in doomed:
                self.registry.forget_locked(rec)
        threads = [threading.Thread(target=self.containers.discard, args=(r.id,)) for r in doomed]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return len(doomed)

    def stop(self) -> int:
        """Stop refilling and destroy the warm containers nobody claimed; returns how many."""
        self._stop.set()
        self._wake.set()
        with self.registry.lock:
            self.stopping = True
            self._targets.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        return self.destroy_unclaimed()
