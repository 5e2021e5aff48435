"""Stage 1 of the grading pipeline on a local git repository (real git, no container): the canonical
script of `swe_rl.grading.patch.canonical` run with its container paths moved into a temporary directory."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from swe_rl.fleet import patch_baseline
from swe_rl.grading.patch import canonical
from swe_rl.grading.patch.canonical import CanonicalPatch


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """A repository with one commit holding `files`."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


def _moved(script: str, scratch: Path) -> str:
    return script.replace(canonical.WORK_DIR, str(scratch / "canon")).replace(
        patch_baseline.BASELINE_DIR, str(scratch / "baseline")
    )


def record_baseline(repo: Path, scratch: Path) -> None:
    subprocess.run(
        ["bash", "-c", _moved(patch_baseline.BASELINE_SCRIPT, scratch)],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def agent_diff(repo: Path, scratch: Path) -> str:
    """The agent loop's diff (`patch_baseline.DIFF_SCRIPT`) of the work tree."""
    res = subprocess.run(
        ["bash", "-c", _moved(patch_baseline.DIFF_SCRIPT, scratch)], cwd=repo, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def canonicalise_local(
    repo: Path, scratch: Path, patch: str, extra_roots: list[str] | None = None
) -> CanonicalPatch:
    """What `canonical.canonicalise` does in a grading container, here."""
    (scratch / "canon").mkdir(parents=True, exist_ok=True)
    (scratch / "canon" / "patch.diff").write_text(patch)
    marker = secrets.token_hex(8)
    script = _moved(canonical.canonical_script(marker, extra_roots), scratch)
    res = subprocess.run(
        ["bash", "-c", script], cwd=repo, capture_output=True, text=True, env=dict(os.environ)
    )
    assert res.returncode == 0, res.stderr
    return canonical.parse_output(res.stdout, marker)
