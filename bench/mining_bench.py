"""How fast the miner turns commits into certified tasks, on a small repository made here.

    python3 bench/mining_bench.py [--candidates 3] [--jobs 2] [--certify-concurrency 2] [--runs 1]

A Python repository in a temp dir: an import whose functions are all wrong, then one commit per
function fixing it with its test (each a task with FAIL_TO_PASS and PASS_TO_PASS), then a docs-only
commit (dropped at split). The miner builds and validates the candidates ``--jobs`` at a time and
certifies on a local fleet. The images, containers and temp dir it made are removed at the end. Its
last line:

    mining: C candidates → B built → V validated → K certified in T min (S s per candidate at concurrency N)

T is the wall time of the whole run (split to certification), S that time over the candidates.
Needs Docker and the base image (scripts/setup_machine.sh).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from swe_rl.eval.mining.cli import Miner, parse_args
from swe_rl.fleet.local import LocalFleet

OPS = [
    ("add", "+", 10),
    ("sub", "-", 4),
    ("mul", "*", 21),
    ("mod", "%", 1),
    ("pow", "**", 343),
    ("floordiv", "//", 2),
]
"""Each function, its operator and its value at (7, 3)."""
WRONG = {"+": "-", "-": "+", "*": "+", "%": "//", "**": "*", "//": "%"}


def make_repo(path: Path, n: int) -> None:
    """The import (every function wrong but ``ident``), one fix-with-its-test commit per function, docs."""
    ops = OPS[:n]
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@localhost", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@localhost", "GIT_CONFIG_GLOBAL": "/dev/null"}  # fmt: skip

    def commit(message: str, day: int) -> None:
        stamp = f"2024-02-{day:02d}T00:00:00+0000"
        full = {**env, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        subprocess.run(["git", "-C", str(path), "add", "-A"], env=full, check=True)
        subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", message], env=full, check=True)

    def source(fixed: set[str]) -> str:
        body = "def ident(a):\n    return a\n"
        for name, op, _ in ops:
            body += f"\n\ndef {name}(a, b):\n    return a {op if name in fixed else WRONG[op]} b\n"
        return body

    tests = "from ops import ident\n\n\ndef test_ident():\n    assert ident(7) == 7\n"
    path.mkdir(parents=True)
    subprocess.run(["git", "-C", str(path), "init", "-q", "-b", "main"], env=env, check=True)
    (path / "pyproject.toml").write_text('[project]\nname = "ops"\nversion = "0.1"\n')
    (path / "tests").mkdir()
    (path / "ops.py").write_text(source(set()))
    (path / "tests/test_ops.py").write_text(tests)
    commit("Import ops", 1)
    fixed: set[str] = set()
    for i, (name, _, expected) in enumerate(ops):
        fixed.add(name)
        (path / "ops.py").write_text(source(fixed))
        tests += (
            f"\n\ndef test_{name}():\n    from ops import {name}\n\n    assert {name}(7, 3) == {expected}\n"
        )
        (path / "tests/test_ops.py").write_text(tests)
        commit(f"{name}() gives the wrong result", 2 + i)
    (path / "README.md").write_text("# ops\n")
    commit("Docs", 2 + len(ops))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--candidates", type=int, default=3, help=f"fix commits (at most {len(OPS)})")
    p.add_argument("--jobs", type=int, default=2, help="candidates built and validated at once")
    p.add_argument("--certify-concurrency", type=int, default=2)
    p.add_argument("--runs", type=int, default=1, help="gold runs per row at certification")
    args = p.parse_args(argv)
    if not 1 <= args.candidates <= len(OPS):
        p.error(f"--candidates must be 1..{len(OPS)}")
    tag = f"b{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="swe-rl-mining-bench-") as tmp:
        repo = Path(tmp) / "ops"
        make_repo(repo, args.candidates)
        out = Path(tmp) / "out" / "tasks.jsonl"
        miner_args = parse_args([
            str(repo), "--output", str(out), "--repo-name", "bench/ops", "--runs", str(args.runs),
            "--image-template", f"swe-rl/mining-bench-{tag}.{{id}}:latest", "--name-prefix", f"swe-rl-bench-{tag}",
            "--jobs", str(args.jobs), "--certify-concurrency", str(args.certify_concurrency), "--no-progress",
        ])  # fmt: skip
        t0 = time.perf_counter()
        try:
            with LocalFleet(
                exec_servers=1, max_containers_per_node=max(4, 2 * args.certify_concurrency)
            ) as fleet:
                stats = Miner(miner_args, fleet.client_env()).run()
        finally:
            _remove_images(f"swe-rl/mining-bench-{tag}.")
        wall = time.perf_counter() - t0
    print(f"stages (seconds summed over workers): {stats['seconds']}")
    print(summary_line(stats["counts"], wall, args.jobs))
    return 0 if stats["counts"]["certified"] == args.candidates else 1


def summary_line(counts: dict[str, int], wall_seconds: float, jobs: int) -> str:
    c = counts
    return (
        f"mining: {c['candidates']} candidates → {c['built']} built → {c['validated']} validated → "
        f"{c['certified']} certified in {wall_seconds / 60:.1f} min "
        f"({wall_seconds / max(1, c['candidates']):.1f} s per candidate at concurrency {jobs})"
    )


def _remove_images(prefix: str) -> None:
    names = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    mine = [n for n in names if n.startswith(prefix)]
    if mine:
        subprocess.run(["docker", "rmi", "-f", *mine], capture_output=True, check=False)


if __name__ == "__main__":
    raise SystemExit(main())
