"""bench/capability_false_positives.py: patches read right, before/after from a mirror or from fragments."""

from __future__ import annotations

import json
import subprocess

from bench.capability_false_positives import apply_hunks, file_diffs, main, scan_row
from swe_rl.grading.scans.capabilities import CapabilityConfig

BEFORE = "import sys\n\n\ndef here():\n    return sys._getframe(0)\n\n\ndef f(x):\n    return x + 1\n"
PATCH = (
    "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
    "@@ -8,2 +8,3 @@ def here():\n def f(x):\n-    return x + 1\n+    y = x + 2\n+    return y\n"
    "diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/pkg/new.py\n"
    "@@ -0,0 +1,2 @@\n+import atexit\n+atexit.register(print)\n"
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-old\n+import ctypes\n"
)


def test_diffs_are_read_with_or_without_git_headers():
    files = file_diffs(PATCH)
    assert list(files) == ["pkg/mod.py", "pkg/new.py", "README.md"]
    assert files["pkg/new.py"][0] and not files["pkg/mod.py"][0]
    plain = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -9 +9 @@\n-    return x + 1\n+    return x - 1\n"
    (hunk,) = file_diffs(plain)["pkg/mod.py"][1]
    assert hunk == (9, ["    return x + 1"], ["    return x - 1"])
    assert apply_hunks(BEFORE, file_diffs(PATCH)["pkg/mod.py"][1]).endswith("    y = x + 2\n    return y\n")


def test_a_row_is_scanned_on_mirrored_files_or_on_fragments(tmp_path):
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "mod.py").write_text(BEFORE)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    base = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "o+n" / "repo")], check=True)
    row = {"instance_id": "o__n-1", "repo": "o/n", "base_commit": base, "patch": PATCH}
    for mirror in (mirrors, None):
        mode, findings = scan_row(row, mirror, CapabilityConfig())
        assert mode == ("mirror" if mirror else "fragments")
        # the new file's atexit is blamed, the pre-existing _getframe is not, README.md is not Python
        assert [(f.path, f.capability) for f in findings] == [("pkg/new.py", "exit_hook")]
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([row]))
    assert main(["--rows", str(rows), "--mirrors", str(mirrors), "--json", str(tmp_path / "out.json")]) == 0
    assert (
        json.loads((tmp_path / "out.json").read_text())["o__n-1"]["findings"][0]["capability"] == "exit_hook"
    )
