"""Direct calls: a lease holder calls this node itself, with the per-lease credential the pool signed.

The node checks the credential with the pool's public key (`swe_rl.fleet.lease_credential`), never by
asking the pool: signature, expiry, the operation, and that the body's container is the credential's
and carries the credential's lease id (the label the pool's create put on it). The pool keeps
placement, leases and expiry; it learns the use of its leases from this node off the call's path: the
answer of its periodic `/containers/touch` names the containers called directly since the last one
(`take_used`), and `/healthz` carries the counts of direct calls (`counts`).

The public keys come from `SWE_EXEC_LEASE_KEYS` (comma-separated, optional) and from the pool itself
(`POST /lease-keys`, with the node's token); those are kept in the state directory, so a node restarted
while its pool is down still takes the credentials already handed out. A node trusts at most
`MAX_TRUSTED_KEYS` pool keys, the least recently given or used dropped first (a pool whose key was
dropped gives it again after its next health check, which lists the keys this node trusts).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from typing import Any

from swe_rl.fleet.exec.containers import Registry
from swe_rl.fleet.lease_credential import (
    LEASE_SCHEME,
    MAX_TRUSTED_KEYS,
    CredentialRefused,
    LeaseGrant,
    LeaseVerifier,
)
from swe_rl.fleet.protocol import ROUTED_CALLS, ApiError

log = logging.getLogger("swe_exec_server")

DIRECT_PATHS = {f"/container/{op}": op for op in ROUTED_CALLS}
"""The node's paths a lease credential may call, and the operation each one is."""
KEYS_FILE = "lease-keys.json"


class DirectCalls:
    """The credential check of direct calls, the trusted pool keys, and the use the pool is told of."""

    def __init__(self, registry: Registry, state_dir: str, keys: tuple[str, ...] = ()) -> None:
        self.registry = registry
        self.path = os.path.join(os.path.expanduser(state_dir), KEYS_FILE)
        self.verifier = LeaseVerifier()
        self._lock = threading.Lock()
        self._used: set[str] = set()
        self.counts: Counter[str] = Counter()
        """Direct calls by ``op:outcome`` (ok, refused, error) since the start."""
        for text in (*keys, *self._saved()):
            try:
                self.verifier.add(text)
            except ValueError as exc:
                log.warning("ignoring a bad lease key: %s", exc)

    def _saved(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s: %s", self.path, exc)
            return []
        keys = [str(k) for k in data] if isinstance(data, list) else []
        return keys[-MAX_TRUSTED_KEYS:]  # oldest first: the newest are kept

    def add_keys(self, keys: Any) -> list[str]:
        """Trust these public keys (the pool's `POST /lease-keys`); a bad one is a 400, nothing added."""
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise ApiError(400, "'keys' must be a non-empty list of base64url Ed25519 public keys")
        probe = LeaseVerifier()
        for text in keys:
            try:
                probe.add(text)
            except ValueError as exc:
                raise ApiError(400, f"bad lease key: {exc}") from None
        with self._lock:
            added = [k for k in keys if self.verifier.add(k)]  # (one given again becomes the newest)
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(list(self.verifier.keys), fh)  # oldest first, as `_saved` reads them
            os.replace(tmp, self.path)
        if added:
            log.info(
                "trusting %d more pool key(s) for direct calls (%d in all)",
                len(added),
                len(self.verifier.keys),
            )
        return sorted(self.verifier.keys)

    @property
    def keys(self) -> list[str]:
        return sorted(self.verifier.keys)

    def authorize(self, path: str, header: str) -> LeaseGrant:
        """The grant of a direct call's ``Authorization: Lease ...``; ApiError 403 when it does not hold."""
        op = DIRECT_PATHS.get(path)
        try:
            if op is None:
                raise CredentialRefused(f"a lease credential may not call {path}")
            grant = self.verifier.verify(header[len(LEASE_SCHEME) :])
            grant.allows(op)
        except CredentialRefused as exc:
            self._count(f"{op or 'other'}:refused")
            raise ApiError(403, f"forbidden: {exc}", credential_refused=True) from None
        return grant

    def check_body(self, path: str, grant: LeaseGrant, body: dict[str, Any]) -> None:
        """The body names the credential's container, and that container holds the credential's lease."""
        op = DIRECT_PATHS[path]
        container = body.get("container_id")
        try:
            grant.allows(op, container=container if isinstance(container, str) else "")
        except CredentialRefused as exc:
            self._count(f"{op}:refused")
            raise ApiError(403, f"forbidden: {exc}", credential_refused=True) from None
        rec = self.registry.lookup(grant.container)  # 404 unknown container: as for the pool's calls
        if rec.lease_id != grant.lease:
            self._count(f"{op}:refused")
            raise ApiError(403, "forbidden: the container holds another lease", credential_refused=True)
        with self._lock:
            self._used.add(grant.container)

    def done(self, path: str, status: int) -> None:
        """Count one direct call that passed the checks, by its answer."""
        self._count(f"{DIRECT_PATHS.get(path, 'other')}:{'ok' if status < 400 else 'error'}")

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def take_used(self) -> list[str]:
        """The containers called directly since the last time (the pool's touch asks), and forget them."""
        with self._lock:
            used, self._used = sorted(self._used), set()
        return used
