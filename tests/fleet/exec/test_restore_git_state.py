"""The restore's empty directories and staging area, run by sh on a local git repository (fast tier: the
shortcuts of the usual case must give what the full path gives; swe_rl/fleet/exec/snapshot_scripts.py)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from swe_rl.fleet.exec.snapshot_scripts import restore_git_state

EMPTY = hashlib.sha256(b"").hexdigest()


def repo(tmp_path: Path) -> tuple[Path, Path]:
    top, scratch = tmp_path / "repo", tmp_path / "s"
    top.mkdir()
    scratch.mkdir()
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    (top / "a.txt").write_text("a\n")
    subprocess.run([*git, "-C", str(top), "add", "a.txt"], check=True)
    subprocess.run([*git, "-C", str(top), "commit", "-qm", "one"], check=True)
    head = subprocess.run(["git", "-C", str(top), "rev-parse", "HEAD"], capture_output=True, text=True)
    (scratch / "head").write_text(head.stdout)
    (scratch / "staged.diff").write_bytes(b"")
    return top, scratch


def restore(top: Path, scratch: Path, dirs: str, staged: str = EMPTY) -> dict[str, str]:
    (scratch / "dirs").write_text(dirs)
    res = subprocess.run(
        ["sh", "-c", f"S={scratch}\n" + restore_git_state(staged)], cwd=top, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    return {line.split()[0]: line.split()[1] for line in res.stdout.splitlines()}


def test_no_empty_directory_to_have_removes_those_there(tmp_path):
    top, scratch = repo(tmp_path)
    (top / "left" / "inner").mkdir(parents=True)  # the fresh container had it, the original did not
    got = restore(top, scratch, "")
    assert not (top / "left").exists()
    assert got == {"dirs": EMPTY, "staged": EMPTY}


def test_listed_empty_directories_are_made_and_hashed_as_listed(tmp_path):
    top, scratch = repo(tmp_path)
    listed = "./empty\n./x/-dash dir\n"
    got = restore(top, scratch, listed)
    assert (top / "empty").is_dir() and (top / "x" / "-dash dir").is_dir()
    assert got["dirs"] == hashlib.sha256(listed.encode()).hexdigest()


def test_an_index_that_is_not_the_snapshots_is_put_back(tmp_path):
    top, scratch = repo(tmp_path)
    (top / "b.txt").write_text("b\n")
    subprocess.run(["git", "-C", str(top), "add", "b.txt"], check=True)  # staged here, not in the snapshot
    got = restore(top, scratch, "")
    assert got["staged"] == EMPTY
    assert subprocess.run(["git", "-C", str(top), "diff", "--cached", "--quiet", "HEAD"]).returncode == 0
