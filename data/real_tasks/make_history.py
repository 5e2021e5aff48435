#!/usr/bin/env python3
"""Build a git history from consecutive released versions of a library: one commit per release.

The real-task set is mined from history, but the upstream repositories are not reachable at CI
time; their releases are (PyPI sdists, npm tarballs). Release N becomes one commit and release N+1
the next, so the miner (`swe-mine-tasks`) sees each release's code and test changes as one change.
Build metadata that packaging adds (``PKG-INFO``, ``*.egg-info``) is left out. Fixed author,
committer and dates: the same tarballs always give the same shas.

    python3 data/real_tasks/make_history.py --repo /tmp/more-itertools a-10.0.0.tar.gz a-10.1.0.tar.gz ...

Where only one release can be had (Debian ships one version of a Go module or a crate), tasks are
made by SWE-smith's method instead: ``--mutations`` patches, each injecting one bug into a function
of the real upstream code so that some of its own tests fail. The first commit is the release with
every mutation applied; then one commit per mutation restores that function's upstream code (its
message: the patch's text before the first ``diff --git``, the task's problem statement). The
mutations touch distinct functions, so each fix commit is one task whose failing tests are its own.

    python3 data/real_tasks/make_history.py --repo /tmp/go-version --mutations m1.patch m2.patch go-version-1.3.0.tar.gz
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

DROP = re.compile(r"(^|/)(PKG-INFO|[^/]*\.egg-info)(/|$)")


def version_of(tarball: Path) -> str:
    match = re.search(r"-(\d[\w.+-]*?)\.(tar\.gz|tgz)$", tarball.name)
    return match.group(1) if match else tarball.name


def extract(tarball: Path, dest: Path) -> None:
    """The tarball's files without their top folder (``name-1.0/``, npm's ``package/``)."""
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(tarball) as tar:
        tar.extractall(tmp, filter="data")
        tops = list(Path(tmp).iterdir())
        root = tops[0] if len(tops) == 1 and tops[0].is_dir() else Path(tmp)
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_dir() or DROP.search(rel):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            target.chmod(0o755 if os.access(path, os.X_OK) else 0o644)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", type=Path, required=True, help="the repository to create (must not exist)")
    p.add_argument("tarballs", nargs="+", type=Path, help="releases, oldest first")
    p.add_argument(
        "--mutations", nargs="+", type=Path, default=[],
        help="bug-injecting patches for the one release given (SWE-smith's method)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.mutations and len(args.tarballs) != 1:
        print("error: --mutations takes exactly one release", file=sys.stderr)
        return 2
    if args.repo.exists():
        print(f"error: {args.repo} exists", file=sys.stderr)
        return 2
    args.repo.mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "swe-rl",
           "GIT_AUTHOR_EMAIL": "swe-rl@localhost", "GIT_COMMITTER_NAME": "swe-rl",
           "GIT_COMMITTER_EMAIL": "swe-rl@localhost"}  # fmt: skip

    def git(*a: str, day: int = 1) -> None:
        stamp = f"2024-01-{day:02d}T00:00:00+0000"
        subprocess.run(["git", "-C", str(args.repo), *a], check=True, capture_output=True,
                       env={**env, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})  # fmt: skip

    git("init", "-q", "-b", "main")
    for i, tarball in enumerate(args.tarballs):
        for child in args.repo.iterdir():
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        extract(tarball, args.repo)
        for patch in args.mutations:
            git("apply", str(patch.resolve()))
        git("add", "-A")
        message = f"Release {version_of(tarball)}"
        if args.mutations:
            message += f" with {len(args.mutations)} injected bug(s)"
        git("commit", "-q", "--allow-empty", "-m", message, day=1 + i % 28)
        print(f"{tarball.name}: committed")
    for j, patch in enumerate(args.mutations):
        git("apply", "-R", str(patch.resolve()))
        git("add", "-A")
        git("commit", "-q", "-m", problem_statement(patch), day=2 + j % 27)
        print(f"{patch.name}: restored")
    return 0


def problem_statement(patch: Path) -> str:
    """The text of a mutation patch before its first ``diff --git`` line."""
    text = patch.read_text()
    head = text[: text.find("diff --git")] if "diff --git" in text else text
    if not head.strip():
        raise SystemExit(f"error: {patch} has no problem statement before its diff")
    return head.strip()


if __name__ == "__main__":
    sys.exit(main())
