"""Stage 1: the canonical patch is what `git apply` accepts, re-taken under git settings the repo cannot change."""

from __future__ import annotations

import subprocess

import pytest
from canonical_fixtures import agent_diff, canonicalise_local, git, make_repo, record_baseline

from swe_rl.grading.patch.canonical import parse_batch

BASE = {"pkg/__init__.py": "", "pkg/core.py": "x = 1\ny = 2\n", "README": "hi\n"}
FIX = "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 3\n y = 2\n"
CONTEXT_DIFF_CONFTEST = """*** /dev/null
--- conftest.py
***************
*** 0 ****
--- 1,2 ----
+ import os
+ os.environ["PYTEST_ADDOPTS"] = "-p forcepass"
"""


@pytest.fixture
def repo(tmp_path):
    repo = make_repo(tmp_path, BASE)
    record_baseline(repo, tmp_path)
    return repo


def test_a_git_diff_comes_back_as_itself_and_the_work_tree_is_untouched(repo, tmp_path):
    canon = canonicalise_local(repo, tmp_path, FIX)
    assert canon.applied
    assert canon.text.endswith(FIX.split("\n", 2)[2]) and "index " in canon.text
    assert [(c.path, c.kind) for c in canon.changes] == [("pkg/core.py", "modified")]
    assert canon.content(canon.changes[0].new_blob) == "x = 3\ny = 2\n"
    assert git(repo, "status", "--porcelain") == ""  # applied to a private index only
    assert canon.interpreter.stdlib and "json" in canon.interpreter.stdlib
    assert "pkg" in canon.interpreter.import_roots[""]


def test_prose_index_lines_and_a_context_diff_leave_only_what_git_apply_took(repo, tmp_path):
    patch = (
        "I fixed it, here:\nIndex: pkg/core.py\n"
        + "=" * 20
        + "\n"
        + FIX.split("\n", 1)[1]
        + CONTEXT_DIFF_CONFTEST
    )
    canon = canonicalise_local(repo, tmp_path, patch)
    assert canon.applied
    assert [c.path for c in canon.changes] == ["pkg/core.py"]
    assert "conftest" not in canon.text and "I fixed it" not in canon.text
    assert canon.text.startswith("diff --git a/pkg/core.py b/pkg/core.py\n")


def test_what_git_apply_refuses_is_not_graded(repo, tmp_path):
    assert not canonicalise_local(repo, tmp_path, CONTEXT_DIFF_CONFTEST).applied
    assert not canonicalise_local(repo, tmp_path, FIX.replace("x = 1", "x = 9")).applied  # no fuzz
    refused = canonicalise_local(repo, tmp_path, "just prose\n")
    assert not refused.applied and "No valid patches" in refused.apply_output


def test_a_symlink_and_a_mode_change_are_listed_as_such(repo, tmp_path):
    (repo / "sitecustomize.py").symlink_to("pkg/core.py")
    (repo / "README").chmod(0o755)
    canon = canonicalise_local(repo, tmp_path, agent_diff(repo, tmp_path))
    kinds = {c.path: (c.kind, c.old_mode, c.new_mode) for c in canon.changes}
    assert kinds["sitecustomize.py"] == ("added", "000000", "120000")
    assert kinds["README"] == ("modified", "100644", "100755")


def test_the_repositorys_own_git_settings_do_not_shape_the_patch(repo, tmp_path):
    """An external diff driver, a textconv filter, attributes under .git/info: all ignored (threat class 4)."""
    evil = tmp_path / "evil.sh"
    evil.write_text("#!/bin/sh\nprintf 'diff --git a/conftest.py b/conftest.py\\n'\n")
    evil.chmod(0o755)
    git(repo, "config", "diff.external", str(evil))
    git(repo, "config", "diff.hide.textconv", "echo HIDDEN")
    git(repo, "config", "diff.noprefix", "true")
    git(repo, "config", "core.quotepath", "true")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* diff=hide\n")
    (repo / "pkg" / "core.py").write_text("x = 3\ny = 2\n")
    taken = agent_diff(repo, tmp_path)
    assert "conftest" not in taken and "HIDDEN" not in taken
    assert "+x = 3" in taken and "--- a/pkg/core.py" in taken
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
    canon = canonicalise_local(repo, tmp_path, taken)
    assert canon.applied and "+x = 3" in canon.text and "conftest" not in canon.text


@pytest.mark.parametrize("round_", range(3))
def test_an_edit_in_the_same_second_as_the_baseline_is_in_the_patch(tmp_path, round_):
    """Same size, same second: git must not trust the copied index's stat data (racy-git timestamps kept)."""
    repo = make_repo(tmp_path, BASE)
    record_baseline(repo, tmp_path)
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    assert "+x = 2" in agent_diff(repo, tmp_path)


def test_every_changed_blob_comes_back_exactly_from_one_git_process(repo, tmp_path):
    """Blobs are read by one `git cat-file --batch`: text, bytes that are not text, a last line without
    its newline, an added and a deleted file all come back byte for byte; a stream cut short is an error."""
    binary = bytes(range(256)) + b"\n\n--x--\n"
    (repo / "blob.bin").write_bytes(binary)
    (repo / "pkg" / "core.py").write_text("x = 3\ny = 2")  # no newline at the end
    (repo / "pkg" / "new.py").write_text("z = 1\n")
    (repo / "README").unlink()
    subprocess.run(["git", "add", "-N", "."], cwd=repo, check=True)
    patch = subprocess.run(
        ["git", "diff", "--binary", "HEAD"], cwd=repo, capture_output=True, check=True
    ).stdout.decode("latin-1")
    subprocess.run(["git", "reset", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
    subprocess.run(["git", "clean", "-qfd"], cwd=repo, check=True)
    canon = canonicalise_local(repo, tmp_path, patch)
    got = {c.path: (canon.blobs.get(c.old_blob), canon.blobs.get(c.new_blob)) for c in canon.changes}
    assert got == {
        "README": (b"hi\n", None),
        "blob.bin": (None, binary),
        "pkg/core.py": (b"x = 1\ny = 2\n", b"x = 3\ny = 2"),
        "pkg/new.py": (None, b"z = 1\n"),
    }
    whole = b"".join(
        f"{s} blob {len(b)}\n".encode() + b + b"\n" for s, b in [("a" * 40, binary), ("b" * 40, b"")]
    )
    assert parse_batch(whole) == {"a" * 40: binary, "b" * 40: b""}
    for cut in (whole[:-1], whole[:50], b"a" * 40 + b" blob"):
        with pytest.raises(ValueError):
            parse_batch(cut)
