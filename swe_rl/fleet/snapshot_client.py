"""The client side of snapshots: `Lease.snapshot()` and `EnvClient.delete_snapshot()`.

A mixin of `Lease` and of `EnvClient` (kept here so the client module stays one job): a snapshot is
owned by the client's `owner` string (sent with every allocate), so only that owner's branches can
restore it. Restoring is `EnvClient.allocate(image, from_snapshot=info.snapshot_id)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swe_rl.fleet.retry import Retry
from swe_rl.fleet.snapshot_protocol import DeleteSnapshotRequest, Kind, LeaseSnapshotRequest, SnapshotInfo

if TYPE_CHECKING:
    from swe_rl.fleet.client import EnvClient

SNAPSHOT_TIMEOUT = 960.0
"""Seconds to wait for a snapshot (the pool gives a node 900 to capture)."""


class LeaseSnapshots:
    """`Lease.snapshot()`."""

    client: EnvClient
    lease_id: str

    async def current_credential(self) -> str:
        """The lease's credential (`Lease` holds one); none here, and the pool answers 403 to a call without."""
        return ""

    async def snapshot(
        self, extra_paths: list[str] | None = None, ttl: float | None = None, kind: Kind = "tree"
    ) -> SnapshotInfo:
        """The lease's state now (its changes since the baseline, plus `extra_paths` outside the repo) as a
        snapshot for `EnvClient.allocate(..., from_snapshot=...)`. Needs a recorded baseline. Not retried
        once sent (a retry would take a second snapshot). `kind="container"` commits the whole container
        instead (every file, slower, restored on its node only: docs/fork.md)."""
        body = LeaseSnapshotRequest(
            owner=self.client.owner, kind=kind, ttl=ttl, extra_paths=extra_paths or []
        )
        data = await self.client._call(
            f"leases/{self.lease_id}/snapshot",
            body.model_dump(exclude_none=True),
            timeout=SNAPSHOT_TIMEOUT,
            retry=Retry.UNSENT,
            credential=await self.current_credential(),
        )
        return SnapshotInfo.model_validate(data)


class ClientSnapshots:
    """`EnvClient.delete_snapshot()`."""

    owner: str

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        """Forget a snapshot now (it also expires by itself); True if it existed."""
        body = DeleteSnapshotRequest(snapshot_id=snapshot_id, owner=self.owner).model_dump()
        data: dict[str, Any] = await self._call(  # type: ignore[attr-defined]
            "snapshots/delete", body, timeout=120.0, retry=Retry.SAFE
        )
        return bool(data.get("deleted"))
