"""Fork vs replay on real Docker, in one run: what a branch costs against starting over.

A local fleet (one exec server, one pool; implicit warming off). For each scenario an episode plays
its actions in a leased container (the bundled fixtures: the gold patch applied with git, a compile of
the package, a note written, a search; a synthetic large change: 200 new files of 4 KiB), then:
- snapshot: `Lease.snapshot()` wall time and the tarball's size;
- restore cold / warm: `allocate(from_snapshot=...)` wall time (allocate + restore + hash check) without
  and with warm containers of the restores' pool ready (`POST /warm` with `baseline: true` ahead: the
  node records the baseline when it starts them, so the restore skips it);
- replay cold / warm: a fresh allocate + baseline + the same actions again (the baseline a fork
  replaces), without and with warm containers;
- on the first fixture, whole-container snapshots (`kind="container"`, `docker commit`): snapshot time,
  image size, restore time (a line of its own, not in the totals).
Every figure is measured in this run on this machine, so the ratios compare like with like; nothing
is asserted. The last line gives both pairings: warm (restores into warm containers of the restores'
pool, whose baseline the node recorded ahead, against replays into plain warm containers: what a pool
with warm demand for both gives) and cold with cold (no warm container on either side: then a
container's create and start, paid by both, is most of a restore).

    python bench/fork_bench.py [--repeats 5] [--instances pytoolz__toolz-9001,...] [--no-container]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.local import LocalFleet
from swe_rl.tasks import TaskInstance, load_instances

ROOT = Path(__file__).resolve().parents[1]
OPTS: dict[str, Any] = {"memory": "1g", "cpus": 1.0, "workdir": "/testbed"}
DEFAULT = "pytoolz__toolz-9001,jpvanhal__inflection-9001,more-itertools__more-itertools-9001"


def actions_of(inst: TaskInstance) -> list[str | tuple[str, str]]:
    """An episode's actions: a file write is (path, text), a command is a string."""
    return [
        ("/tmp/gold.diff", inst.patch),
        "git apply /tmp/gold.diff",
        "python -m compileall -q . >/dev/null 2>&1 || true",
        "printf '# notes\\nfixed the bug\\n' > NOTES.md",
        "grep -rn 'def ' --include=*.py . | wc -l",
    ]


LARGE: list[str | tuple[str, str]] = [
    "mkdir -p generated && for i in $(seq 1 200); do head -c 3072 /dev/urandom | base64 -w 0"
    " > generated/f$i.txt; done",
]


async def play(lease: Lease, actions: list[str | tuple[str, str]]) -> None:
    for action in actions:
        if isinstance(action, tuple):
            await lease.write_file(*action)
        else:
            res = await lease.exec(action, timeout=300)
            assert res.ok, (action, res.output[-500:])


def p50(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def warm_up(
    http: httpx.AsyncClient, fleet: LocalFleet, image: str, count: int, baseline: bool = False
) -> None:
    """`count` warm containers of the image ready; `baseline`: those of restores (baseline recorded ahead)."""
    body = {"image": image, "count": count, "baseline": baseline, **OPTS}
    resp = await http.post(fleet.pool_url + "/warm", json=body)
    resp.raise_for_status()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        health = (await http.get(fleet.exec_urls[0] + "/healthz")).json()
        if health["warm"].get(image, 0) >= count and health["warm_starting"] == 0:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("warm containers did not come up")


async def scenario(
    client: EnvClient, http: httpx.AsyncClient, fleet: LocalFleet, image: str, actions: list[Any], n: int
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {
        k: [] for k in ("snap", "kib", "cold", "warm", "replay_cold", "replay_warm")
    }
    source = await client.allocate(image, **OPTS)
    try:
        await source.record_baseline()
        await play(source, actions)
        snaps = []
        for _ in range(n):
            t = time.perf_counter()
            info = await source.snapshot()
            out["snap"].append(time.perf_counter() - t)
            out["kib"].append(info.bytes / 1024)
            snaps.append(info)
        sid = snaps[0].snapshot_id
        for temperature in ("cold", "warm"):
            for kind in ("restore", "replay"):
                if temperature == "warm":
                    await warm_up(http, fleet, image, n, baseline=kind == "restore")
                    # The target is cancelled once they are up (they stay, ready): no refill starts new
                    # containers while the calls are timed. Why: on this 2-core machine the refill's
                    # container starts (and the restores' baselines) competed with the timed call itself.
                    body = {"image": image, "count": 0, "baseline": kind == "restore", **OPTS}
                    await http.post(fleet.pool_url + "/warm", json=body)
                for _ in range(n):
                    t = time.perf_counter()
                    if kind == "restore":
                        lease = await client.allocate(image, from_snapshot=sid, **OPTS)
                    else:
                        lease = await client.allocate(image, **OPTS)
                        await lease.record_baseline()
                        await play(lease, actions)
                    out[temperature if kind == "restore" else f"replay_{temperature}"].append(
                        time.perf_counter() - t
                    )
                    await lease.close()
        for info in snaps:
            await client.delete_snapshot(info.snapshot_id)
    finally:
        await source.close()
    return out


async def container_row(client: EnvClient, image: str, actions: list[Any], n: int) -> dict[str, list[float]]:
    """The slower option (`kind="container"`, docs/fork.md): `docker commit` of the whole container, and
    a restore that is a new container of that image on the same node (no warm one can serve it)."""
    out: dict[str, list[float]] = {"snap": [], "mib": [], "restore": []}
    source = await client.allocate(image, **OPTS)
    sids = []
    try:
        await source.record_baseline()
        await play(source, actions)
        for _ in range(n):
            t = time.perf_counter()
            info = await source.snapshot(kind="container")
            out["snap"].append(time.perf_counter() - t)
            out["mib"].append(info.bytes / 2**20)
            sids.append(info.snapshot_id)
        for _ in range(n):
            t = time.perf_counter()
            lease = await client.allocate(image, from_snapshot=sids[0], **OPTS)
            out["restore"].append(time.perf_counter() - t)
            await lease.close()
    finally:
        for sid in sids:
            await client.delete_snapshot(sid)
        await source.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--instances", default=DEFAULT)
    ap.add_argument("--no-container", action="store_true", help="skip the whole-container row")
    a = ap.parse_args()
    loaded = {i.instance_id: i for i in load_instances(ROOT / "data/fixtures/instances.jsonl").instances}
    chosen = [loaded[name] for name in a.instances.split(",")]
    scenarios = [(i.instance_id, i.image, actions_of(i)) for i in chosen]
    scenarios.append(("synthetic-large-change", chosen[0].image, LARGE))
    pool_env = {"SWE_POOL_WARM_MIN": "0", "SWE_POOL_ID": f"fork-bench-{secrets.token_hex(3)}"}
    totals: dict[str, list[float]] = {}
    exec_env = {"SWE_EXEC_MAX_WARM": "32"}  # warm leftovers of one scenario must not starve the next
    with LocalFleet(
        exec_servers=1, max_containers_per_node=32, pool_env=pool_env, exec_env=exec_env
    ) as fleet:
        cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=600)
        headers = {"Authorization": f"Bearer {fleet.token}"}
        async with EnvClient(cfg) as client, httpx.AsyncClient(headers=headers, timeout=60) as http:
            for name, image, actions in scenarios:
                r = await scenario(client, http, fleet, image, actions, a.repeats)
                for key, values in r.items():
                    totals.setdefault(key, []).extend(values)
                print(
                    f"{name}: snapshot p50 {p50(r['snap']):.0f} ms, {statistics.median(r['kib']):.1f} KiB; "
                    f"restore cold {p50(r['cold']):.0f} ms / warm {p50(r['warm']):.0f} ms; "
                    f"replay cold {p50(r['replay_cold']):.0f} ms / warm {p50(r['replay_warm']):.0f} ms"
                )
            # whole-container snapshots on the first fixture; not in the totals (the last line is tree snapshots)
            if not a.no_container:
                name, image, actions = scenarios[0]
                c = await container_row(client, image, actions, a.repeats)
                print(
                    f"{name} (kind=container): snapshot p50 {p50(c['snap']):.0f} ms, image "
                    f"{statistics.median(c['mib']):.1f} MiB; restore p50 {p50(c['restore']):.0f} ms"
                )
    cold, replay = p50(totals["cold"]), p50(totals["replay_cold"])
    warm, replay_warm = p50(totals["warm"]), p50(totals["replay_warm"])
    print(
        f"all: restore/replay cold {cold / replay:.2f}x, warm {warm / replay_warm:.2f}x (lower: forking wins)"
    )
    print(
        f"fork: restore p50 {warm:.0f} ms (replay p50 {replay_warm:.0f} ms, {warm / replay_warm:.2f}x) warm; "
        f"cold restore p50 {cold:.0f} ms (replay p50 {replay:.0f} ms, {cold / replay:.2f}x); "
        f"snapshot p50 {statistics.median(totals['kib']):.1f} KiB"
    )


if __name__ == "__main__":
    asyncio.run(main())
