"""Images on a node against a real registry on loopback: cold vs prefetched first exec, one pull under
concurrent creates, and a run over more images than the disk budget holds.

A `docker-registry` on loopback holds N distinct images (the base image plus one random layer each,
labelled `swe-rl.test-image`, removed after); one exec server pulls from it with a budget of the base
plus `--fit` such layers. In the same run:
- cold: create + first exec of an image the node lacks (the pull is in the request path);
- prefetched: `POST /images/prefetch`, wait until pulled, then create + first exec (the baseline's ratio
  is printed);
- concurrent: `--group` creates of one missing image at once; pulls counted (1 = duplicates avoided);
- over budget: `--rounds` passes over all N images, each create preceded by a prefetch of the next
  image, as eval and the slime layer hint; failed allocates and the disk peak against the budget.

    python bench/image_bench.py [--images 6] [--fit 3] [--layer-mib 16] [--group 4] [--rounds 2]

Last line: `images: first exec cold A s, prefetched B s; disk peak P% of budget; failed allocates F`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import httpx

from swe_rl.testing.local_registry import LocalRegistry, build_layer_image, remove_test_images

ROOT = Path(__file__).resolve().parents[1]

BASE = os.environ.get("SWE_BASE_IMAGE", "swe-rl/base:bookworm")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Node:
    """One exec server subprocess on loopback."""

    def __init__(self, env: dict[str, str], log_dir: str) -> None:
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.server_id = f"h-images-bench-{secrets.token_hex(3)}"
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(Path(log_dir) / "exec.log", "wb")
        full = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SWE_EXEC_TOKEN": self.token,
            "SWE_EXEC_PORT": str(self.port),
            "SWE_EXEC_SERVER_ID": self.server_id,
            "SWE_EXEC_MAX_WARM": "0",
            **env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "swe_rl.fleet.exec.app"],
            env=full,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("exec server did not start")
            time.sleep(0.2)

    def post(self, path: str, body: dict) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.post(self.url + path, json=body, headers=headers, timeout=600)

    def images(self) -> dict:
        return httpx.get(self.url + "/healthz", timeout=30).json()["images"]

    def first_exec(self, image: str) -> tuple[float, str | None]:
        """Seconds from create to the first exec's answer; the container is destroyed after."""
        t0 = time.monotonic()
        r = self.post("/container/create", {"image": image})
        if r.status_code != 200:
            return time.monotonic() - t0, None
        cid = r.json()["container_id"]
        ok = self.post("/container/exec", {"container_id": cid, "command": "true"}).status_code == 200
        seconds = time.monotonic() - t0
        self.post("/container/destroy", {"container_id": cid})
        return seconds, cid if ok else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def wait_pulled(node: Node, client: docker.DockerClient, ref: str) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if not node.images()["pulling"] and any(ref in i.tags for i in client.images.list()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{ref} not pulled")


def forget(client: docker.DockerClient, ref: str) -> None:
    try:
        client.images.remove(ref, force=True)
    except docker.errors.ImageNotFound:
        pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=6)
    p.add_argument("--fit", type=float, default=3.0, help="layers the budget holds besides the base")
    p.add_argument("--layer-mib", type=int, default=16)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    client = docker.from_env()
    run = f"h-images-bench-{secrets.token_hex(3)}"
    storage = os.environ.get("SWE_TEST_REGISTRY_STORAGE", "~/.cache/swe-rl/test-registry")
    registry = LocalRegistry(storage=storage)
    log_dir = tempfile.mkdtemp(prefix="h-images-bench-")
    refs: list[str] = []
    node = None
    try:
        t0 = time.monotonic()
        for i in range(a.images):
            local = build_layer_image(client, BASE, f"swe-rl-bench/{run}-{i}:1", run, a.layer_mib << 20)
            refs.append(registry.push(client, local, f"swe-rl-bench/{run}-{i}:1"))
            client.images.remove(local)
        print(f"setup: {a.images} images of +{a.layer_mib} MiB pushed in {time.monotonic() - t0:.1f} s")
        base = client.images.get(BASE).attrs["Size"]
        budget = int(base + a.fit * (a.layer_mib << 20))
        node = Node(
            {
                "SWE_EXEC_ALLOW_PULL": "1",
                "SWE_EXEC_IMAGE_PREFIXES": registry.host + "/",
                "SWE_EXEC_IMAGE_DISK_BUDGET": str(budget),
            },
            log_dir,
        )

        cold, cold_ok = node.first_exec(refs[0])
        assert node.post("/images/prefetch", {"images": [refs[1]]}).status_code == 200
        wait_pulled(node, client, refs[1])
        warm, warm_ok = node.first_exec(refs[1])
        print(f"first exec: cold {cold:.2f} s, prefetched {warm:.2f} s (prefetched/cold {warm / cold:.2f})")

        before = node.images()["pulls"]
        with concurrent.futures.ThreadPoolExecutor(a.group) as pool:
            results = list(pool.map(lambda _: node.first_exec(refs[2]), range(a.group)))
        pulls = node.images()["pulls"] - before
        print(
            f"concurrent: {a.group} creates of one missing image -> {pulls} pull(s), {a.group - pulls} avoided"
        )

        failed = sum(1 for ok in (cold_ok, warm_ok) if ok is None)
        failed += sum(1 for _, ok in results if ok is None)
        order = refs * a.rounds
        t0 = time.monotonic()
        for n, ref in enumerate(order):
            if n + 1 < len(order):
                node.post("/images/prefetch", {"images": [order[n + 1]]})
            _, ok = node.first_exec(ref)
            failed += ok is None
        stats = node.images()
        peak = 100.0 * stats["bytes_peak"] / budget
        end = 100.0 * stats["bytes_used"] / budget
        print(
            f"over budget: {len(order)} allocates over {a.images} images (budget holds {a.fit:g}) in "
            f"{time.monotonic() - t0:.1f} s; evictions {stats['evictions']}, pulls {stats['pulls']}, "
            f"disk at end {end:.0f}% of budget"
        )
        print(
            f"images: first exec cold {cold:.2f} s, prefetched {warm:.2f} s; "
            f"disk peak {peak:.0f}% of budget; failed allocates {failed}"
        )
    finally:
        if node is not None:
            node.stop()
            for c in client.containers.list(
                all=True, filters={"label": f"swe-rl.exec-server={node.server_id}"}
            ):
                c.remove(force=True)
        for ref in refs:
            forget(client, ref)
        remove_test_images(client, run)
        registry.stop()
        import shutil

        if os.environ.get("KEEP_LOGS"):
            print("logs:", log_dir)
        else:
            shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
