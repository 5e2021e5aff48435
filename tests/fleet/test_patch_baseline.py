"""The baseline diff (`patch_baseline.DIFF_SCRIPT`) on a local repository (real git, no container): the
agent's changes since the episode start, whatever the agent does with git meanwhile, taken with an index
and a git directory of its own that are kept from one diff to the next.

The same scripts run in containers in tests/agent/test_patch_capture.py; here every edge runs in
milliseconds. Paths under ``/tmp/.swe-rl`` are moved into the test's temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from canonical_fixtures import agent_diff, git, make_repo, record_baseline

from swe_rl.fleet import patch_baseline

BASE = {
    "pkg/__init__.py": "",
    "pkg/core.py": "x = 1\ny = 2\n",
    "README": "hi\n",
    ".gitignore": "*.log\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path, BASE)
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("install output\n")  # untracked at the start: not the agent's
    record_baseline(repo, tmp_path)
    return repo


def files_of(patch: str) -> list[str]:
    return re.findall(r"^diff --git a/\S+ b/(\S+)$", patch, flags=re.MULTILINE)


def section(patch: str, path: str) -> str:
    return patch.split(f"diff --git a/{path} b/{path}\n")[1].split("diff --git")[0]


def test_nothing_done_is_an_empty_patch_and_a_second_diff_agrees(repo, tmp_path):
    assert agent_diff(repo, tmp_path) == ""
    assert agent_diff(repo, tmp_path) == ""


def test_a_file_changed_after_the_agents_git_add_is_diffed_as_it_is_on_disk(repo, tmp_path):
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    git(repo, "add", "pkg/core.py")
    (repo / "pkg" / "core.py").write_text("x = 3\ny = 2\n")
    index = (repo / ".git" / "index").read_bytes()
    patch = agent_diff(repo, tmp_path)
    assert "+x = 3" in patch and "+x = 2" not in patch
    assert (repo / ".git" / "index").read_bytes() == index  # the agent's own index is never written
    assert "+x = 2" in git(repo, "diff", "--cached")  # what it staged stays staged


def test_deleted_mode_changed_binary_and_new_files(repo, tmp_path):
    (repo / "README").unlink()
    (repo / "pkg" / "core.py").chmod(0o755)
    (repo / "data.bin").write_bytes(bytes(range(256)) * 4)
    (repo / "pkg" / "new.py").write_text("z = 1\n")
    patch = agent_diff(repo, tmp_path)
    assert sorted(files_of(patch)) == ["README", "data.bin", "pkg/core.py", "pkg/new.py"]
    assert "deleted file mode 100644" in section(patch, "README")
    assert "old mode 100644\nnew mode 100755" in section(patch, "pkg/core.py")
    assert "GIT binary patch" in section(patch, "data.bin")
    assert "new file mode 100644" in section(patch, "pkg/new.py")
    assert _apply(repo, patch, reverse=True) == ""  # back to the start, byte for byte
    assert agent_diff(repo, tmp_path) == ""


def _apply(repo: Path, patch: str, reverse: bool) -> str:
    """`git apply` of the patch (reversed: back to the baseline); '' when it applies."""
    args = ["git", "apply", "--binary", *(["-R"] if reverse else []), "-"]
    res = subprocess.run(args, cwd=repo, input=patch.encode(), capture_output=True)
    return res.stderr.decode()


def test_ignored_new_files_and_the_start_untracked_output_stay_out(repo, tmp_path):
    (repo / "debug.log").write_text("noise\n")
    (repo / "build" / "out2.txt").write_text(
        "more\n"
    )  # a new file inside the start's untracked folder is the agent's
    assert files_of(agent_diff(repo, tmp_path)) == ["build/out2.txt"]


def test_a_commit_by_the_agent_hides_nothing(repo, tmp_path):
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    (repo / "pkg" / "new.py").write_text("z = 1\n")
    before = agent_diff(repo, tmp_path)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "agent")
    assert agent_diff(repo, tmp_path) == before
    assert sorted(files_of(before)) == ["pkg/core.py", "pkg/new.py"]


def test_a_hard_reset_by_the_agent_drops_tracked_edits_and_keeps_new_files(repo, tmp_path):
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    (repo / "pkg" / "new.py").write_text("z = 1\n")
    assert sorted(files_of(agent_diff(repo, tmp_path))) == ["pkg/core.py", "pkg/new.py"]
    git(repo, "reset", "-q", "--hard", "HEAD")
    assert files_of(agent_diff(repo, tmp_path)) == ["pkg/new.py"]  # reset --hard keeps untracked files


def test_a_reset_to_an_earlier_commit_shows_the_difference_to_the_start(repo, tmp_path):
    (repo / "pkg" / "core.py").write_text("x = 5\ny = 2\n")
    git(repo, "commit", "-qam", "second")
    record_baseline(repo, tmp_path)  # the episode starts at the second commit
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    patch = agent_diff(repo, tmp_path)
    assert "-x = 5" in patch and "+x = 1" in patch


def test_an_edit_undone_leaves_no_trace_in_the_kept_index(repo, tmp_path):
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    (repo / "pkg" / "new.py").write_text("z = 1\n")
    assert sorted(files_of(agent_diff(repo, tmp_path))) == ["pkg/core.py", "pkg/new.py"]
    (repo / "pkg" / "core.py").write_text("x = 1\ny = 2\n")
    (repo / "pkg" / "new.py").unlink()
    assert agent_diff(repo, tmp_path) == ""


@pytest.mark.parametrize("round_", range(3))
def test_a_same_size_edit_in_the_second_of_the_previous_diff_is_in_the_next(repo, tmp_path, round_):
    """The kept index's stat data: an edit that keeps size and second after a diff must still be seen."""
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    assert "+x = 2" in agent_diff(repo, tmp_path)
    (repo / "pkg" / "core.py").write_text("x = 3\ny = 2\n")
    assert "+x = 3" in agent_diff(repo, tmp_path)


def test_a_removed_diff_index_or_git_directory_is_made_again_with_the_same_patch(repo, tmp_path):
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    patch = agent_diff(repo, tmp_path)
    baseline = tmp_path / "baseline"
    (baseline / "diff.index").unlink()
    assert agent_diff(repo, tmp_path) == patch
    shutil.rmtree(baseline / "git")
    assert agent_diff(repo, tmp_path) == patch
    (baseline / "git" / "config").write_text("")  # emptied: made again
    assert agent_diff(repo, tmp_path) == patch


def test_repository_settings_set_after_the_first_diff_do_not_shape_the_next(repo, tmp_path):
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    patch = agent_diff(repo, tmp_path)
    git(repo, "config", "diff.noprefix", "true")
    git(repo, "config", "core.excludesFile", str(repo / "pkg" / "core.py"))
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("pkg/\n")
    assert agent_diff(repo, tmp_path) == patch


def test_a_non_ascii_path_is_written_as_is(repo, tmp_path):
    name = "pkg/d\u00e9j\u00e0.py"
    (repo / name).write_text("v = 1\n")
    patch = agent_diff(repo, tmp_path)
    assert f"diff --git a/{name} b/{name}" in patch
    assert _apply(repo, patch, reverse=True) == ""
    assert not (repo / name).exists()


def test_a_lock_left_by_a_killed_diff_does_not_stop_the_next(repo, tmp_path):
    """A diff killed partway leaves ``diff.index.lock``: the next diffs still answer; a stale lock is
    removed, a fresh one (a diff running now) is left to its owner."""
    (repo / "pkg" / "core.py").write_text("x = 2\ny = 2\n")
    patch = agent_diff(repo, tmp_path)
    lock = tmp_path / "baseline" / "diff.index.lock"
    lock.write_bytes(b"")  # as if a diff were running now
    (repo / "README").write_text("hello\n")
    again = agent_diff(repo, tmp_path)
    assert files_of(again) == ["README", "pkg/core.py"]
    assert lock.exists()  # not ours to remove
    assert sorted(p.name for p in lock.parent.glob("diff.index*")) == ["diff.index", "diff.index.lock"]
    old = time.time() - 60 * (patch_baseline.STALE_LOCK_MINUTES + 1)
    os.utime(lock, (old, old))  # its diff was killed long ago
    assert agent_diff(repo, tmp_path) == again
    assert not lock.exists()
    (repo / "README").write_text("hi\n")
    assert agent_diff(repo, tmp_path) == patch


def _run(script: str, repo: Path, scratch: Path) -> subprocess.CompletedProcess[str]:
    moved = script.replace(patch_baseline.BASELINE_DIR, str(scratch / "baseline"))
    return subprocess.run(["bash", "-c", moved], cwd=repo, capture_output=True, text=True)


SEED = "git add -A >/dev/null && git -c core.quotepath=off diff --cached --binary --no-renames HEAD"


def test_the_one_exec_diff_without_a_baseline_is_the_seeds_diff(tmp_path):
    """`DIFF_OR_SEED_SCRIPT` in a container without a baseline answers in the same run what the second
    exec answered before: everything untracked counts (here the build output too), staged work as well."""
    repo = make_repo(tmp_path, BASE)
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("install output\n")
    (repo / "pkg" / "core.py").write_text("x = 1\ny = 3\n")
    (repo / "new.py").write_text("new\n")
    git(repo, "add", "new.py")
    assert _run(patch_baseline.DIFF_SCRIPT, repo, tmp_path).returncode == patch_baseline.NO_BASELINE_EXIT
    res = _run(patch_baseline.DIFF_OR_SEED_SCRIPT, repo, tmp_path)
    assert res.returncode == 0, res.stderr
    assert files_of(res.stdout) == ["build/out.txt", "new.py", "pkg/core.py"]
    assert res.stdout == subprocess.run(["bash", "-c", SEED], cwd=repo, capture_output=True, text=True).stdout


def test_the_one_exec_diff_of_a_repository_without_commits_is_against_the_empty_tree(tmp_path):
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    res = _run(patch_baseline.DIFF_OR_SEED_SCRIPT, repo, tmp_path)
    assert res.returncode == 0, res.stderr
    assert files_of(res.stdout) == ["a.txt"] and "+a" in res.stdout
    outside = tmp_path / "nogit"
    outside.mkdir()
    assert _run(patch_baseline.DIFF_OR_SEED_SCRIPT, outside, tmp_path).returncode != 0  # a 422 upstream


def test_the_one_exec_diff_with_a_baseline_is_the_baseline_diff(repo, tmp_path):
    (repo / "pkg" / "core.py").write_text("x = 1\ny = 3\n")
    res = _run(patch_baseline.DIFF_OR_SEED_SCRIPT, repo, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == agent_diff(repo, tmp_path) and files_of(res.stdout) == ["pkg/core.py"]
