"""The exec server's snapshot endpoints (the pool is their only caller; bearer auth as every route).

- ``POST /containers/<id>/snapshot`` (`ExecSnapshotRequest`) → `SnapshotMeta` + duration
- ``POST /containers/<id>/restore`` (`ExecRestoreRequest`) → `RestoreResponse`
- ``GET /snapshots`` → this node's snapshots; ``GET /snapshots/<sid>`` → the tarball
  (its `SnapshotMeta` as JSON in the ``X-Snapshot-Meta`` header)
- ``PUT /snapshots/<sid>`` → keep a tarball brought from another node (``X-Snapshot-Meta`` header)
- ``DELETE /snapshots/<sid>`` (a container snapshot: its image too)
- ``POST /snapshots/reap`` → one reaper pass now: ``{"images": [refs of snapshot images removed]}``
"""

from __future__ import annotations

import json
from typing import Any

from flask import Flask, Response, jsonify, request

from swe_rl.fleet.checks import parse_body
from swe_rl.fleet.exec.snapshot_ops import SnapshotOps
from swe_rl.fleet.protocol import ApiError
from swe_rl.fleet.snapshot_protocol import (
    ExecRestoreRequest,
    ExecSnapshotRequest,
    SnapshotMeta,
    parse,
)

META_HEADER = "X-Snapshot-Meta"


def add_snapshot_routes(app: Flask, snaps: SnapshotOps) -> None:
    store = snaps.store

    @app.post("/containers/<container_id>/snapshot")
    def snapshot(container_id: str) -> Any:
        req = parse(ExecSnapshotRequest, parse_body(request.get_data(cache=False)))
        return jsonify(snaps.snapshot(container_id, req))

    @app.post("/containers/<container_id>/restore")
    def restore(container_id: str) -> Any:
        req = parse(ExecRestoreRequest, parse_body(request.get_data(cache=False)))
        return jsonify(snaps.restore(container_id, req))

    @app.get("/snapshots")
    def listing() -> Any:
        metas = store.listing()
        return jsonify(
            snapshots=[m.model_dump() for m in metas],
            count=len(metas),
            bytes=sum(m.bytes for m in metas),
            max_bytes=store.config.max_bytes,
            max_count=store.config.max_count,
        )

    @app.get("/snapshots/<snapshot_id>")
    def download(snapshot_id: str) -> Any:
        meta, data = store.get(snapshot_id)
        return Response(
            data, 200, mimetype="application/x-tar", headers={META_HEADER: meta.model_dump_json()}
        )

    @app.put("/snapshots/<snapshot_id>")
    def upload(snapshot_id: str) -> Any:
        try:
            raw = json.loads(request.headers.get(META_HEADER, ""))
        except ValueError:
            raise ApiError(400, f"missing or bad {META_HEADER} header (the snapshot's JSON record)") from None
        meta = parse(SnapshotMeta, raw)
        if meta.snapshot_id != snapshot_id:
            raise ApiError(400, f"{META_HEADER} names {meta.snapshot_id}, the path {snapshot_id}")
        return jsonify(store.put(meta, request.get_data(cache=False)).model_dump())

    @app.post("/snapshots/reap")
    def reap() -> Any:
        """One reaper pass now (what the background thread does every reap interval)."""
        return jsonify(images=snaps.reap())

    @app.delete("/snapshots/<snapshot_id>")
    def delete(snapshot_id: str) -> Any:
        return jsonify(ok=True, deleted=snaps.delete(snapshot_id))
