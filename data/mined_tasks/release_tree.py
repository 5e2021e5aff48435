#!/usr/bin/env python3
"""A git history whose base is a published release, for the mined set's release-anchored rows.

CI reaches the package registries but not GitHub, so rows that CI builds and grades for real start
from a release as a registry publishes it (a PyPI sdist fetched with ``pip download``, a Debian
source package's orig tarball fetched with ``apt-get source``; its sha256 pinned in releases.tsv).
The history has two commits on ``main``: the release's files (without the ``PKG-INFO``/``*.egg-info``
metadata packaging adds) and one upstream commit after the release on top.

- ``--upstream GIT_DIR --commit C`` (mining): the upstream commit's changes to source and test files
  of the language (what `swe_rl.eval.mining.history.split_commit` puts in the gold and test patches;
  docs and changelogs are left out), restricted to the paths of the release tree or new files in its
  folders, applied to the release. Its date is the upstream commit's; a patch that does not apply is
  an error (that commit is not a task of this release).
- ``--rows ROWS`` (building, CI): the same commit made again from a mined row's own ``patch`` and
  ``test_patch`` (same tree, message and dates: same sha), checked against the row's ``mined_commit``,
  so that ``swe-mine-tasks --images-for`` builds its image from the release. A different sha is an
  error naming the row (the release or the patches are not those it was mined from).

    python3 data/mined_tasks/release_tree.py --repo DIR --tarball more_itertools-11.0.2.tar.gz \\
        --release more-itertools==11.0.2 --language python (--upstream GIT_DIR --commit C | --rows ROWS)

Fixed author and committer (the release commit dated 2024-01-01): the same inputs give the same shas.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path, PurePosixPath
from types import ModuleType

from swe_rl.eval.mining.languages import LANGUAGES, RepoLanguage


def _make_history() -> ModuleType:
    """data/real_tasks/make_history.py, whose ``extract`` unpacks a release as that set's histories do."""
    path = Path(__file__).resolve().parents[1] / "real_tasks/make_history.py"
    spec = importlib.util.spec_from_file_location("make_history", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


extract = _make_history().extract

IDENTITY = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "swe-rl", "GIT_AUTHOR_EMAIL": "swe-rl@localhost",
            "GIT_COMMITTER_NAME": "swe-rl", "GIT_COMMITTER_EMAIL": "swe-rl@localhost"}  # fmt: skip
RELEASE_DATE = "2024-01-01T00:00:00+00:00"


class ReleaseTreeError(RuntimeError):
    """The history cannot be made as asked (a patch does not apply, a sha differs)."""


def git(repo: Path, *args: str, date: str = RELEASE_DATE, stdin: str | None = None) -> str:
    env = {**os.environ, **IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise ReleaseTreeError(f"git {' '.join(args[:2])} in {repo}: {proc.stderr.strip()[:500]}")
    return proc.stdout


def task_message(release: str, upstream_commit: str) -> str:
    return f"Upstream commit {upstream_commit} on the release {release}"


def make_release(repo: Path, tarball: Path, release: str) -> str:
    """``repo`` (new) with the release as its first commit on ``main``; returns its sha."""
    if repo.exists():
        raise ReleaseTreeError(f"{repo} exists")
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    extract(tarball, repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"Release {release}")
    return git(repo, "rev-parse", "HEAD").strip()


def task_paths(changed: list[str], tree: set[str], language: RepoLanguage) -> list[str]:
    """The changed source and test files that are in the release tree, or new in one of its folders."""
    folders = {str(PurePosixPath(p).parent) for p in tree}
    return [
        p
        for p in changed
        if (language.is_test(p) or language.is_source(p))
        and (p in tree or str(PurePosixPath(p).parent) in folders)
    ]


def commit_patch(repo: Path, patch: str, message: str, date: str) -> str:
    """``patch`` applied on ``main`` and committed at ``date``; returns the new sha."""
    if patch.strip():
        git(repo, "apply", "--index", "-", stdin=patch)
    git(repo, "commit", "-q", "--allow-empty", "-m", message, date=date)
    return git(repo, "rev-parse", "HEAD").strip()


def from_upstream(repo: Path, upstream: Path, commit: str, release: str, language: RepoLanguage) -> str:
    """Mining: the upstream commit's source and test changes on the release (see the module's text)."""
    up = ["git", "--git-dir", str(upstream)]
    changed = subprocess.run([*up, "diff", "--name-only", "--no-renames", f"{commit}^", commit],
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    tree = set(git(repo, "ls-files").split())
    paths = task_paths(changed, tree, language)
    if not paths:
        raise ReleaseTreeError(f"{commit} changes no source or test file of the release tree")
    patch = subprocess.run([*up, "diff", "--no-renames", "--full-index", "--binary", f"{commit}^", commit, "--", *paths],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    date = subprocess.run([*up, "show", "-s", "--format=%aI", commit], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    return commit_patch(repo, patch, task_message(release, commit), date)


def from_rows(repo: Path, rows: list[dict], release: str, upstream_commit: str) -> list[str]:
    """Building: each row of this release made again from its patches, on a branch of its own."""
    base = git(repo, "rev-parse", "main").strip()
    made = []
    for row in rows:
        git(repo, "checkout", "-q", "-B", f"task-{row['instance_id']}", base)
        sha = commit_patch(repo, row["patch"] + row["test_patch"], task_message(release, upstream_commit),
                           row["created_at"])  # fmt: skip
        if sha != row["mined_commit"]:
            raise ReleaseTreeError(
                f"{row['instance_id']}: the release {release} with the row's patches gives commit {sha}, "
                f"the row was mined from {row['mined_commit']} (another release tree or other patches)"
            )
        made.append(sha)
    git(repo, "checkout", "-q", "main")
    return made


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", type=Path, required=True, help="the repository to create (must not exist)")
    p.add_argument(
        "--tarball", type=Path, required=True, help="the release as published (sdist, orig tarball)"
    )
    p.add_argument("--release", required=True, help="package==version, as releases.tsv says it")
    p.add_argument("--language", choices=sorted(LANGUAGES), default="python")
    p.add_argument("--commit", required=True, help="the upstream commit after the release (full id)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--upstream", type=Path, help="the upstream repository's git directory (mining)")
    how.add_argument("--rows", type=Path, help="mined rows; those of this release are made again (building)")
    args = p.parse_args(argv)
    try:
        make_release(args.repo, args.tarball, args.release)
        if args.upstream is not None:
            sha = from_upstream(args.repo, args.upstream, args.commit, args.release, LANGUAGES[args.language])
            print(f"{args.release}: {args.commit[:12]} on the release is {sha}")
        else:
            rows = [json.loads(ln) for ln in args.rows.read_text().splitlines() if ln.strip()]
            mine = [r for r in rows if r.get("release") == args.release]
            for sha in from_rows(args.repo, mine, args.release, args.commit):
                print(f"{args.release}: {sha} made again")
    except (ReleaseTreeError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
