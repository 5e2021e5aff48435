"""The task image of a mined commit, built offline from the language's toolchain image (or environment image).

The repository at the commit's parent is put at ``/testbed`` as the single commit of a fresh git
repository (fixed author, committer and dates: the same tree always gives the same sha, so the row's
``base_commit`` is reproducible on any machine), then the language's warm-up runs once (Go's build
cache, Rust's ``target/``) so that the test runs need no network. The build itself has no network
(``--network none``): everything comes from the toolchain image, whose packages are Debian's. The
image carries no history beyond the base commit, so the fix cannot be read from its object store.
With dependencies (``swe-mine-tasks --with-deps``) the image is built FROM the environment image
(envs.py) instead: the same offline layer, plus the environment's offline set-up step (Python: the
editable install refreshed for this tree) and ``node_modules/`` kept out of the base commit.
"""

from __future__ import annotations

import shlex
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swe_rl.eval.mining.languages import RepoLanguage

__all__ = ["BuildFailed", "TaskEnv", "build_task_image", "export_tree", "image_exists"]

WORKDIR = "/testbed"
LABEL = "swe-rl.mined"
"""Label on every image the miner builds (its value: the instance id)."""


class BuildFailed(RuntimeError):
    """``docker build`` failed; the message ends with the tail of its log."""


def image_exists(image: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False).returncode
        == 0
    )


def _dockerfile(language: RepoLanguage, instance_id: str, env: TaskEnv | None = None) -> str:
    commit = (
        "git init -q && "
        + (
            "printf 'node_modules/\\n*.egg-info/\\n.eggs/\\n/target/\\n/Cargo.lock\\n' >> .git/info/exclude && "
            if env
            else ""
        )
        + "git add -A && "
        "GIT_AUTHOR_NAME=swe-rl GIT_AUTHOR_EMAIL=swe-rl@localhost "
        "GIT_COMMITTER_NAME=swe-rl GIT_COMMITTER_EMAIL=swe-rl@localhost "
        "GIT_AUTHOR_DATE=2024-01-01T00:00:00+0000 GIT_COMMITTER_DATE=2024-01-01T00:00:00+0000 "
        f"git commit -q -m {shlex.quote('Import ' + instance_id)} && git rev-parse HEAD > /etc/swe-rl-base-commit"
    )
    setup = [f"RUN set -eu; {env.setup}"] if env and env.setup else []
    return "\n".join(
        [
            f"FROM {env.image if env else language.image}",
            f"COPY source/ {WORKDIR}/",
            f"WORKDIR {WORKDIR}",
            f"RUN set -eu; {commit}",
            *setup,
            f"RUN set -eu; {language.warm}",
            f"LABEL {LABEL}={shlex.quote(instance_id)}",
            "",
        ]
    )


@dataclass(frozen=True)
class TaskEnv:
    """The environment image a task image is built on (envs.py), instead of the toolchain image."""

    image: str
    setup: str = ""
    """Run offline after the base commit is made (it may leave untracked files, never commits)."""


def export_tree(repo: Path, commit: str, dest: Path) -> None:
    """``commit``'s tree as plain files under ``dest`` (created)."""
    dest.mkdir(parents=True)
    archive = dest.parent / f"{dest.name}.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()


def build_task_image(
    repo: Path,
    parent: str,
    language: RepoLanguage,
    image: str,
    instance_id: str,
    *,
    timeout: float = 1800.0,
    env: TaskEnv | None = None,
) -> str:
    """Build ``image`` (kept when it exists) and return its base commit (HEAD of ``/testbed``)."""
    if not image_exists(image):
        with tempfile.TemporaryDirectory(prefix="swe-rl-mine-") as tmp:
            ctx = Path(tmp)
            export_tree(repo, parent, ctx / "source")
            (ctx / "Dockerfile").write_text(_dockerfile(language, instance_id, env))
            proc = subprocess.run(
                ["docker", "build", "--network", "none", "--tag", image, str(ctx)],
                capture_output=True, text=True, timeout=timeout, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
                raise BuildFailed(f"docker build of {image} failed: {tail[-400:]}")
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--label", f"{LABEL}={instance_id}", image,
         "cat", "/etc/swe-rl-base-commit"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise BuildFailed(f"{image}: cannot read its base commit: {proc.stderr.strip()[:200]}")
    return proc.stdout.strip()
