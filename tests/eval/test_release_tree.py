"""data/mined_tasks/release_tree.py: a history whose base is a published release, made for mining and again for building.

Real git on a small release tarball and a small upstream repository made here: mining puts the
upstream commit's source and test changes (only those, only on the release's paths) on the release;
building makes the same commit again from the miner's own split (`split_commit`) of it, sha for sha,
and refuses a row whose patches or release differ, naming the row. build.sh refuses an sdist whose
sha256 is not the pinned one.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from swe_rl.eval.mining.history import Candidate, split_commit
from swe_rl.eval.mining.languages import LANGUAGES

ROOT = Path(__file__).resolve().parents[2]
SET = ROOT / "data/mined_tasks"
sys.path.insert(0, str(SET))

import release_tree  # noqa: E402 - data/mined_tasks/release_tree.py

PY = LANGUAGES["python"]
RELEASE = {"pkg/mod.py": "def f():\n    return 1\n", "tests/test_mod.py": "from pkg.mod import f\n\n\ndef test_f():\n    assert f() == 1\n",
           "PKG-INFO": "Name: pkg\n", "README": "pkg\n"}  # fmt: skip


def _tarball(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def _upstream(path: Path) -> tuple[Path, str]:
    """An upstream repository: the release's files (and more), then one commit changing code, tests and docs."""
    env = {**os.environ, **release_tree.IDENTITY}
    run = lambda *a: subprocess.run(["git", "-C", str(path), *a], check=True, capture_output=True, env=env)  # noqa: E731
    path.mkdir()
    run("init", "-q", "-b", "main")
    files = {k: v for k, v in RELEASE.items() if k != "PKG-INFO"} | {".github/ci.yml": "on: push\n"}
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    run("add", "-A")
    run("commit", "-q", "-m", "release")
    (path / "pkg/mod.py").write_text("def f():\n    return 2\n")
    (path / "tests/test_mod.py").write_text(RELEASE["tests/test_mod.py"].replace("== 1", "== 2"))
    (path / "tests/test_new.py").write_text("def test_new():\n    pass\n")
    (path / "CHANGES.md").write_text("f returns 2\n")
    (path / ".github/ci.yml").write_text("on: [push]\n")
    (path / "tools").mkdir()
    (path / "tools/gen.py").write_text("print(1)\n")  # a folder the release does not have
    run("add", "-A")
    run("commit", "-q", "-m", "f returns 2")
    return path / ".git", subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                                         text=True, check=True).stdout.strip()  # fmt: skip


def test_task_paths_are_source_and_test_files_on_the_release_paths():
    tree = {"pkg/mod.py", "tests/test_mod.py", "README"}
    changed = ["pkg/mod.py", "pkg/new.py", "tests/test_new.py", "README", "CHANGES.md", "tools/gen.py"]
    assert release_tree.task_paths(changed, tree, PY) == ["pkg/mod.py", "pkg/new.py", "tests/test_new.py"]


def test_mining_and_building_make_the_same_commit_and_a_changed_row_is_refused(tmp_path):
    tarball = _tarball(tmp_path / "pkg-1.0.tar.gz", RELEASE)
    upstream, commit = _upstream(tmp_path / "up")
    mined = tmp_path / "mined"
    args = ["--tarball", str(tarball), "--release", "pkg==1.0", "--commit", commit]
    assert release_tree.main(["--repo", str(mined), *args, "--upstream", str(upstream)]) == 0
    changed = subprocess.run(["git", "-C", str(mined), "show", "--name-only", "--format=", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert changed == ["pkg/mod.py", "tests/test_mod.py", "tests/test_new.py"]
    release_files = subprocess.run(["git", "-C", str(mined), "ls-files"], capture_output=True, text=True,
                                   check=True).stdout.split()  # fmt: skip
    assert "PKG-INFO" not in release_files and "README" in release_files

    head = subprocess.run(["git", "-C", str(mined), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    candidate = split_commit(mined, head, PY)  # the miner's own split into gold and test patches
    assert isinstance(candidate, Candidate)
    row = {"instance_id": "o__pkg-x", "release": "pkg==1.0", "patch": candidate.gold_patch,
           "test_patch": candidate.test_patch, "created_at": candidate.created_at, "mined_commit": head}  # fmt: skip
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    assert release_tree.main(["--repo", str(tmp_path / "built"), *args, "--rows", str(rows)]) == 0

    rows.write_text(json.dumps({**row, "patch": row["patch"].replace("return 2", "return 3")}) + "\n")
    with pytest.raises(
        release_tree.ReleaseTreeError, match="o__pkg-x: the release pkg==1.0 with the row's patches"
    ):
        release_tree.from_rows(_fresh_release(tmp_path / "again", tarball), [json.loads(rows.read_text())],
                               "pkg==1.0", commit)  # fmt: skip


def _fresh_release(repo: Path, tarball: Path) -> Path:
    release_tree.make_release(repo, tarball, "pkg==1.0")
    return repo


def test_a_commit_that_changes_nothing_of_the_release_is_an_error(tmp_path, capsys):
    tarball = _tarball(tmp_path / "pkg-1.0.tar.gz", {"README": "x\n", "setup.py": "\n"})
    upstream, commit = _upstream(tmp_path / "up")
    code = release_tree.main(["--repo", str(tmp_path / "r"), "--tarball", str(tarball), "--release", "pkg==1.0",
                              "--commit", commit, "--upstream", str(upstream)])  # fmt: skip
    assert code == 1 and "changes no source or test file of the release tree" in capsys.readouterr().err


@pytest.mark.docker
@pytest.mark.slow
def test_build_sh_refuses_an_sdist_whose_sha256_is_not_the_pinned_one(tmp_path):
    line = next(ln for ln in (SET / "releases.tsv").read_text().splitlines() if ln and not ln.startswith("#"))
    name, repo, registry, release = line.split("\t")[:4]
    assert registry == "pypi"  # the first line: an sdist
    package, version = release.split("==")
    (tmp_path / "downloads").mkdir()
    _tarball(tmp_path / "downloads" / f"{package}-{version}.tar.gz", {"README": "not the release\n"})
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"instance_id": "x", "repo": repo, "release": release}) + "\n")
    proc = subprocess.run(
        ["bash", str(SET / "build.sh"), "--rows", str(rows), name], capture_output=True, text=True, check=False,
        env={**os.environ, "SWE_MINED_CACHE": str(tmp_path), "PYTHON": sys.executable}, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 1 and "releases.tsv pins" in proc.stderr, proc.stderr[-2000:]
