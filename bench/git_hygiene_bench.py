"""Cost of clean git history at episode start (swe_rl.agent.git_hygiene), on real Docker, in one run.

A local fleet (one exec server, one pool). For each image, every round leases a fresh
container and times, through the client: a no-op command (``true``: the per-exec baseline
measured in the same run) and `clean_history`. Images:
- the fixture ``jpvanhal__inflection-9001`` (clean: only the check runs),
- the fixture ``jpvanhal__inflection-9002`` (future history: refs removed, store pruned),
- a synthetic larger repository built here from the base image (``--files`` files, ``--commits``
  commits of history, and ``--future`` commits beyond the base commit reachable from a tag and a
  remote ref), clean and with future history; the temporary images are removed at the end.
Target (printed, not asserted): a clean image well under a second.

    python bench/git_hygiene_bench.py [--rounds 5] [--files 3000] [--commits 400] [--future 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from swe_rl.agent.fleet_environment import FleetEnvironment
from swe_rl.agent.git_hygiene import clean_history
from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.local import LocalFleet

BASE = os.environ.get("SWE_BASE_IMAGE", "swe-rl/base:bookworm")
FIXTURES = {
    "fixture clean": "swe-rl/fixture.jpvanhal_1776_inflection-9001:latest",
    "fixture future": "swe-rl/fixture.jpvanhal_1776_inflection-9002:latest",
}

SYNTH = r"""
set -e
mkdir -p /testbed && cd /testbed && git init -q -b main
export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@b GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@b
python3 - {files} {commits} <<'PY' | git fast-import --quiet
import sys
files, commits = int(sys.argv[1]), int(sys.argv[2])
mark = 0
for c in range(commits):
    print("commit refs/heads/main")
    print(f"committer b <b@b> {{1700000000 + c}} +0000")
    msg = f"commit {{c}}"
    print(f"data {{len(msg)}}\n{{msg}}")
    touched = range(files) if c == 0 else range(c % 50, files, 97)
    for f in touched:
        body = (f"# file {{f}} version {{c}}\n" + "x = %d\n" % (f * c)) * 20
        print(f"M 644 inline pkg/mod{{f // 100}}/f{{f}}.py")
        print(f"data {{len(body)}}\n{{body}}")
PY
git checkout -q -f main
git gc -q
"""

FUTURE = r"""
set -e
cd /testbed
export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@b GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@b
base=$(git rev-parse HEAD)
for i in $(seq {future}); do echo "future $i" >> pkg/mod0/f0.py; git commit -qam "future $i"; done
git tag -a v9 -m v9; git update-ref refs/remotes/origin/main HEAD
git reset -q --hard "$base"
git gc -q
"""


def build_synthetic(files: int, commits: int, future: int) -> dict[str, str]:
    import docker

    client = docker.from_env()
    out = {}
    container = client.containers.run(BASE, "sleep infinity", detach=True, network_mode="none")
    try:

        def run(script: str) -> None:
            code, output = container.exec_run(["bash", "-c", script])
            if code != 0:
                raise RuntimeError(output.decode()[-2000:])

        run(SYNTH.format(files=files, commits=commits))
        container.commit("swe-rl/bench-hygiene", "clean")
        out["synthetic clean"] = "swe-rl/bench-hygiene:clean"
        run(FUTURE.format(future=future))
        container.commit("swe-rl/bench-hygiene", "future")
        out["synthetic future"] = "swe-rl/bench-hygiene:future"
        size = container.exec_run(
            ["bash", "-c", "cd /testbed && git count-objects -vH | tr '\\n' ' '"]
        ).output
        print(f"synthetic repo: {files} files, {commits} commits (+{future} future): {size.decode().strip()}")
    finally:
        container.remove(force=True)
    return out


def drop_synthetic() -> None:
    import docker

    client = docker.from_env()
    for tag in ("clean", "future"):
        try:
            client.images.remove(f"swe-rl/bench-hygiene:{tag}", force=True)
        except docker.errors.ImageNotFound:
            pass


async def measure(client: EnvClient, image: str, rounds: int) -> tuple[list[float], list[float], list[bool]]:
    noop, hygiene, pruned = [], [], []
    for _ in range(rounds):
        async with client.lease(image, workdir="/testbed", memory="2g", cpus=1.0) as lease:
            env = FleetEnvironment(lease)
            await env.exec("true", timeout=60)  # first exec of a container pays a little extra
            started = time.monotonic()
            await env.exec("true", timeout=60)
            noop.append(time.monotonic() - started)
            started = time.monotonic()
            result = await clean_history(env, "/testbed")
            hygiene.append(time.monotonic() - started)
            pruned.append(result.pruned)
    return noop, hygiene, pruned


async def main_async(args: argparse.Namespace) -> None:
    images = dict(FIXTURES)
    images.update(build_synthetic(args.files, args.commits, args.future))
    rows = []
    try:
        with LocalFleet(
            exec_servers=1, max_containers_per_node=8, pool_env={"SWE_POOL_WARM_MIN": "0"}
        ) as fleet:
            cfg = EnvClientConfig(pool_url=fleet.pool_url, token=fleet.token, read_timeout=600)
            async with EnvClient(cfg) as client:
                for name, image in images.items():
                    noop, hygiene, pruned = await measure(client, image, args.rounds)
                    rows.append((name, noop, hygiene, pruned))
    finally:
        drop_synthetic()
    print(f"\ngit_hygiene_bench: rounds={args.rounds} cores={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
    print(f"{'image':18} {'noop exec ms':>13} {'hygiene ms':>11} {'ratio':>7} {'pruned':>7}")
    for name, noop, hygiene, pruned in rows:
        n, h = statistics.median(noop) * 1000, statistics.median(hygiene) * 1000
        print(f"{name:18} {n:>13.1f} {h:>11.1f} {h / n:>6.1f}x {sum(pruned):>4}/{len(pruned)}")
    clean = statistics.median(rows[0][2])
    print(f"  clean fixture: hygiene {clean * 1000:.0f} ms per container (target: well under 1000 ms)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--files", type=int, default=3000)
    p.add_argument("--commits", type=int, default=400)
    p.add_argument("--future", type=int, default=40)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
