"""The reaper: nothing this server manages outlives its deadline, its idle window or its process.

At start and then every `reap_interval` seconds it removes this server's containers that are
past their deadline, idle too long, dead, or unknown to it (left by a crash); warm ones past
their TTL too. It only ever touches containers labelled as managed by this very server.

It lists the backend's containers without the registry lock, so a pass must not act on what changed during the
listing: a record made after the pass began is never "removed behind our back", and a container being
created stays in the registry's `creating` set until the same locked step that records it, so it is never
"unknown" either.
"""

from __future__ import annotations

import logging
import threading
import time

from swe_rl.fleet.exec.backend import BackendError
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.containers import Containers, Registry
from swe_rl.fleet.protocol import LABEL_MANAGED, LABEL_SERVER, MANAGED_VALUE

log = logging.getLogger("swe_exec_server")


class Reaper:
    def __init__(
        self, config: ExecConfig, registry: Registry, containers: Containers, stats: dict[str, int]
    ) -> None:
        self.config, self.registry, self.containers, self.stats = config, registry, containers, stats
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def reap_once(self) -> list[str]:
        """Remove this server's containers past deadline, idle too long, or dead (warm ones included)."""
        now = time.time()
        reg = self.registry
        with reg.lock:  # a record made after this may be missing from the list: not gone
            recorded_before = set(reg.records)
        try:
            live = {c.id: c for c in self.containers.list_own()}
        except BackendError as exc:
            log.warning("reaper could not list containers: %s", exc)
            return []
        doomed: list[tuple[str, str]] = []
        state_changed = False
        with reg.lock:
            for cid in recorded_before:
                gone = reg.records.get(cid)
                if gone is not None and cid not in live:  # listed after it was recorded, yet absent:
                    state_changed |= gone.from_warm  # removed behind our back
                    reg.forget_locked(gone)
            for cid, c in live.items():
                labels = c.labels
                if (
                    labels.get(LABEL_MANAGED) != MANAGED_VALUE
                    or labels.get(LABEL_SERVER) != self.config.server_id
                ):
                    continue  # belt and braces: never touch what we do not manage
                if c.name in reg.creating:
                    continue
                rec = reg.records.get(cid)
                dead = c.status in ("exited", "dead")
                if rec is None:
                    reason = "unknown"
                else:
                    expired = now > rec.deadline
                    if rec.in_flight > 0 and not expired:
                        continue
                    idle = now - rec.last_activity > rec.idle_ttl
                    reason = (
                        "warm expired"
                        if expired and rec.warm
                        else "deadline"
                        if expired
                        else "idle"
                        if idle
                        else "dead"
                        if dead
                        else ""
                    )
                    if not reason:
                        continue
                    if rec.warm:
                        self.stats["expired"] += 1
                    state_changed |= rec.from_warm
                    reg.forget_locked(rec)
                doomed.append((cid, reason))
        for cid, reason in doomed:
            log.info("reaping %s (%s)", cid[:12], reason)
            self.containers.discard(cid)
        if state_changed:
            self.containers.state.save()
        return [cid for cid, _ in doomed]

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.config.reap_interval):
                try:
                    self.reap_once()
                except Exception:  # the reaper must outlive any one bad pass
                    log.exception("reaper pass failed")

        self._thread = threading.Thread(target=loop, name="reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
