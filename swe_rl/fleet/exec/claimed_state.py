"""The state file of claimed warm containers: what a restart needs to adopt them.

A warm container is started before anyone leases it, and Docker labels cannot change, so the lease
of a claimed one (lease id, owner, deadline) lives only in memory. This file keeps it on disk, per
server id, so that a restarted exec server adopts its claimed warm containers instead of reaping them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import Any

from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.containers import Registry

log = logging.getLogger("swe_exec_server")


class ClaimedState:
    """The state file of claimed warm containers (their labels carry no lease): lease id, owner, deadline."""

    def __init__(self, config: ExecConfig, registry: Registry) -> None:
        self.config, self.registry = config, registry
        self._lock = threading.Lock()

    def path(self) -> str:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "-", self.config.server_id)
        return os.path.join(os.path.expanduser(self.config.state_dir), f"{safe}.json")

    def load(self) -> dict[str, Any]:
        try:
            with open(self.path(), encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable state file %s: %s", self.path(), exc)
            return {}
        containers = data.get("containers") if isinstance(data, dict) else None
        return containers if isinstance(containers, dict) else {}

    def save(self) -> None:
        """Atomically replace the state file with the claimed warm containers (removed when none)."""
        path = self.path()
        with self._lock:
            with self.registry.lock:
                entries = {r.id: r.lease_state() for r in self.registry.records.values() if r.from_warm}
            try:
                if not entries:
                    if os.path.exists(path):
                        os.unlink(path)
                    return
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump({"server_id": self.config.server_id, "containers": entries}, fh)
                os.replace(tmp, path)
            except OSError as exc:
                log.error("could not write state file %s: %s", path, exc)
