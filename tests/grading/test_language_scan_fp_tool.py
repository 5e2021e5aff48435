"""bench/language_scan_false_positives.py: Multi-SWE-bench rows scanned on a real git mirror."""

from __future__ import annotations

import json
import subprocess

import pytest

pytest.importorskip("tree_sitter_rust")  # the lang-scan extra

from bench.language_scan_false_positives import main, row_fields

LIB = "pub fn median(v: &[i32]) -> i32 {\n    v[v.len() / 2]\n}\n"
RERUN = (
    "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,6 @@\n"
    "+pub fn again() {\n+    std::process::Command::new(std::env::current_exe().unwrap());\n+}\n"
    " pub fn median(v: &[i32]) -> i32 {\n     v[v.len() / 2]\n }\n"
)
HONEST = (
    "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n"
    " pub fn median(v: &[i32]) -> i32 {\n-    v[v.len() / 2]\n+    v[(v.len() - 1) / 2]\n }\n"
)


def test_rows_are_scanned_on_the_mirrored_base_file(tmp_path, capsys):
    repo = tmp_path / "mirrors" / "o+lib" / "repo"
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "lib.rs").write_text(LIB)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "base"], check=True)
    sha = subprocess.run(
        ["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repo)], check=True)
    rows = [
        {"org": "o", "repo": "lib", "number": n, "base": {"sha": sha}, "fix_patch": patch}
        for n, patch in ((1, RERUN), (2, HONEST))
    ] + [{"org": "x", "repo": "absent", "number": 3, "base": {"sha": sha}, "fix_patch": HONEST}]
    (tmp_path / "rows.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + "\nversion https://git-lfs\n"
    )
    assert row_fields(rows[0])[:2] == ("o__lib-1", "o/lib")
    main(["--rows", str(tmp_path / "rows.jsonl"), "--mirrors", str(tmp_path / "mirrors")])
    out = capsys.readouterr().out
    assert "rows: 3 (mirror: 2, no mirror: 1)" in out
    assert "voided: 1 (50.0%)" in out and "o__lib-1 src/lib.rs:2 rerun_binary" in out
