"""What the node backend seam costs: the exec server's calls through `DockerBackend` against docker-py called
directly, in the same run on the same containers.

- exec: `DockerBackend.exec_run` (the exec server's command path: process group, capped output, deadline)
  against docker-py's own `Container.exec_run`, one `true` each, interleaved; p50 and p90 and their ratio;
- list: `DockerBackend.list_containers(labels)` (what adoption and every reaper pass call) against
  docker-py's `containers.list(all=True, filters=...)`, over `--containers` labelled containers.
Ratios near 1.0 mean the seam adds nothing measurable. Needs the Docker daemon and the fixture base image.

    python bench/backend_bench.py [--runs 30] [--containers 5] [--image swe-rl/base:bookworm]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import time
from collections.abc import Callable

import docker

from swe_rl.fleet.exec.backend import ContainerSpec
from swe_rl.fleet.exec.docker_backend import DockerBackend


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def quantiles(xs: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(xs, n=10)
    return statistics.median(xs), qs[8]


def row(name: str, seam: list[float], base: list[float]) -> None:
    (s50, s90), (b50, b90) = quantiles(seam), quantiles(base)
    print(
        f"{name:6s} seam p50 {s50 * 1e3:7.2f} ms p90 {s90 * 1e3:7.2f} ms | docker-py p50 {b50 * 1e3:7.2f} ms "
        f"p90 {b90 * 1e3:7.2f} ms | ratio p50 {s50 / b50:.2f} p90 {s90 / b90:.2f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--containers", type=int, default=5)
    p.add_argument("--image", default="swe-rl/base:bookworm")
    a = p.parse_args()
    client = docker.from_env()
    backend = DockerBackend(client)
    labels = {"swe-rl.bench": f"h-backend-{secrets.token_hex(4)}"}
    made = []
    try:
        for _ in range(a.containers):
            spec = ContainerSpec(
                a.image, f"h-backend-bench-{secrets.token_hex(4)}", ("sleep", "600"), labels, "/"
            )
            made.append(backend.create_container(spec).id)
            backend.start_container(made[-1])
        cid = made[0]
        container = client.containers.get(cid)
        seam: list[float] = []
        base: list[float] = []
        for _ in range(a.runs):
            seam.append(
                timed(
                    lambda: backend.exec_run(
                        cid, "true", timeout=30, workdir=None, env=None, max_output=1 << 16
                    )
                )
            )
            base.append(timed(lambda: container.exec_run(["/bin/sh", "-c", "true"])))
        row("exec", seam, base)
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        seam, base = [], []
        for _ in range(a.runs):
            seam.append(timed(lambda: backend.list_containers(labels)))
            base.append(timed(lambda: client.containers.list(all=True, filters=filters, ignore_removed=True)))
        row("list", seam, base)
    finally:
        for c in made:
            backend.remove_container(c)
        client.close()


if __name__ == "__main__":
    main()
