"""bench/twin_coverage.py: which tests get a twin, on a real git repository (``--trees``) and on a git
mirror with a row's test patch (``--mirrors``)."""

from __future__ import annotations

import json
import subprocess
import sys

from bench import twin_coverage

TESTS = """import pytest


def test_equal():
    assert sorted([2, 1]) == [1, 2]


def test_calls_only():
    sorted([2, 1])
"""
PATCH = """diff --git a/test_x.py b/test_x.py
--- a/test_x.py
+++ b/test_x.py
@@ -9,0 +10,4 @@ def test_calls_only():
+
+
+def test_more():
+    assert max([1, 3]) > 2
"""


def _repo(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "test_x.py").write_text(TESTS)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=work, env=env, check=True)
    base = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True
    ).stdout.strip()
    mirror = tmp_path / "mirrors" / "o+r"
    mirror.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "repo")], check=True)
    return mirror / "repo", base


def test_every_test_of_a_tree_is_counted(tmp_path, capsys, monkeypatch):
    git_dir, _ = _repo(tmp_path)
    monkeypatch.setattr(twin_coverage.twins_module, "MAX_TWINS", 10**6)
    twin_coverage._tree_coverage([str(git_dir)])
    out = capsys.readouterr().out
    assert "tests with a twin: 1/2 (50.0%)" in out and "no assertion every run reaches" in out, out


def test_a_rows_test_patch_is_applied_to_its_base_in_the_mirror(tmp_path, monkeypatch, capsys):
    git_dir, base = _repo(tmp_path)
    row = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": base, "patch": "", "test_patch": PATCH,
           "problem_statement": "x", "FAIL_TO_PASS": ["test_x.py::test_more", "test_x.py::test_calls_only"],
           "PASS_TO_PASS": [], "image_name": "x"}  # fmt: skip
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    monkeypatch.setattr(twin_coverage.twins_module, "MAX_TWINS", 4)  # main() lifts the cap: put back after
    monkeypatch.setattr(sys, "argv", ["twin_coverage", str(rows), "--mirrors", str(tmp_path / "mirrors")])
    twin_coverage.main()
    out = capsys.readouterr().out
    assert "FAIL_TO_PASS tests with a twin: 1/2" in out, out
