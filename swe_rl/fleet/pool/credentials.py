"""The pool's side of per-lease credentials: issue one with each lease, check those sent to the pool,
renew them, and hand the public key to the nodes.

A client's token lets it allocate; what it may then do on a lease takes the lease's credential
(`swe_rl.fleet.lease_credential`), sent in the `x-swe-lease-credential` header on every call the pool
routes or serves for that lease (exec, diff, files, evaluate, snapshot, close, renew). Another job's
client, holding the same client token and even the lease id, gets 403. The operator token needs none.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from swe_rl.fleet.lease_credential import (
    CredentialRefused,
    LeaseSigner,
    load_or_create_signing_key,
)
from swe_rl.fleet.protocol import ROUTED_CALLS, ApiError

if TYPE_CHECKING:
    from swe_rl.fleet.pool.config import PoolConfig
    from swe_rl.fleet.pool.node_wire import NodeAnswer
    from swe_rl.fleet.pool.nodes import Node

log = logging.getLogger("swe_pool_server")

LEASE_OPS = frozenset({*ROUTED_CALLS, "close", "snapshot", "credential"})
"""What a lease's credential allows: the node checks the first five, the pool the rest."""


class PoolCredentials:
    """Signs, checks and renews per-lease credentials with the pool's key (`PoolConfig.signing_key_file`)."""

    def __init__(self, cfg: PoolConfig) -> None:
        try:
            key = load_or_create_signing_key(cfg.signing_key_file)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"error: signing key {cfg.signing_key_file}: {exc}") from None
        self.signer = LeaseSigner(key)
        self.ttl = cfg.credential_ttl

    @property
    def public_key(self) -> str:
        return self.signer.public

    def grant(self, info: dict[str, Any]) -> dict[str, Any]:
        """An allocate's answer with the lease's credential and its expiry added."""
        credential, exp = self.signer.issue(
            info["lease_id"], info["node"], info["container_id"], LEASE_OPS, self.ttl
        )
        return {**info, "credential": credential, "credential_expires_at": exp}

    def check(self, credential: str | None, op: str, lease_id: Any) -> None:
        """403 unless `credential` is this pool's, unexpired, for `lease_id` and allows `op`."""
        try:
            if not credential:
                raise CredentialRefused(
                    "this call needs the lease's credential (header x-swe-lease-credential)"
                )
            grant = self.signer.verifier.verify(credential)
            grant.allows(op, lease=lease_id if isinstance(lease_id, str) else "")
        except CredentialRefused as exc:
            raise ApiError(403, f"forbidden: {exc}", credential_refused=True) from None

    def renew(self, info: dict[str, Any]) -> dict[str, Any]:
        """`POST /credential`: a fresh credential for a lease (the old one was checked by the caller)."""
        fresh = self.grant(info)
        return {"credential": fresh["credential"], "credential_expires_at": fresh["credential_expires_at"]}

    def node_needs_key(self, node: Node) -> bool:
        """The node's last /healthz did not list our key among the ones it trusts."""
        return self.public_key not in node.lease_keys

    async def give_key(self, node: Node, post: Any) -> None:
        """Hand our public key to a node (with the node's token); a failure is logged, the next check retries."""
        try:
            resp: NodeAnswer = await post(node, "/lease-keys", {"keys": [self.public_key]}, 30.0)
        except ApiError as exc:
            log.warning("could not give %s the pool's lease key: %s", node.url, exc.message)
            return
        if resp.status_code == 200:
            node.lease_keys = [self.public_key, *node.lease_keys]
            log.info("%s trusts the pool's lease key: direct calls on", node.url)
        else:
            log.warning("%s refused the pool's lease key: %d %s", node.url, resp.status_code, resp.text[:200])
