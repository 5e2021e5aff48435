"""Commits of a repository's history that touch code and tests together, split into gold and test patches.

Read with the ``git`` command on a local repository (a mirror, or a history built from released
versions). A commit is a *candidate* when its diff against its first parent changes at least one
source file and at least one test file of the repository's language; its other files (docs,
changelogs, lock files) are left out of both patches. Merge commits are read against their first
parent, so a merged pull request counts as one change. Binary changes cannot be carried by a text
patch: such a commit is dropped with that reason.

With ``code_only_ok`` a commit that changes source files only is a candidate too: its judges are the
tests the repository has already (SWE-smith's method: a bug injected into real code, the commit that
restores the code is the task; see data/real_tasks/make_history.py ``--mutations``). Its tests to run
are the test files of the tree named after a changed source file (``version.js`` →
``test/version.test.js``), so that a runner that is given files runs those, not the whole suite;
runners that take none (Go, Rust) run everything anyway.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from swe_rl.eval.mining.languages import RepoLanguage

__all__ = ["Candidate", "Skipped", "commits_in_range", "git", "split_commit"]


def git(repo: Path, *args: str, check: bool = True) -> str:
    """Run git in ``repo`` under a fixed configuration (no user hooks, no pager, no colour)."""
    proc = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "-c", "color.ui=false", "-C", str(repo), *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:3])} failed: {proc.stderr.strip()[:300]}")
    return proc.stdout


@dataclass(frozen=True)
class Candidate:
    """One commit that changes code and tests together."""

    commit: str
    parent: str
    gold_patch: str
    test_patch: str
    message: str
    created_at: str
    source_files: list[str] = field(default_factory=list)
    test_files: list[str] = field(default_factory=list)
    """Test files the commit changes and keeps (deleted ones are not run)."""


@dataclass(frozen=True)
class Skipped:
    """A commit of the range that is not a candidate, and why."""

    commit: str
    reason: str


def commits_in_range(repo: Path, rev_range: str) -> list[str]:
    """The commits of ``rev_range`` (``A..B``, or one ref: its whole history), oldest first, first-parent."""
    return git(repo, "rev-list", "--reverse", "--first-parent", rev_range).split()


def _diff(repo: Path, parent: str, commit: str, files: list[str]) -> str:
    if not files:
        return ""
    return git(repo, "diff", "--no-ext-diff", "--no-renames", "--full-index", parent, commit, "--", *files)


def split_commit(
    repo: Path, commit: str, language: RepoLanguage, *, code_only_ok: bool = False
) -> Candidate | Skipped:
    """A commit → a `Candidate` (gold and test patches), or `Skipped` with the reason."""
    parents = git(repo, "rev-list", "--parents", "-n", "1", commit).split()[1:]
    if not parents:
        return Skipped(commit, "root commit: no parent to start from")
    parent = parents[0]
    numstat = git(repo, "diff", "--numstat", "--no-renames", parent, commit).splitlines()
    tests, sources, binary = [], [], []
    for line in numstat:
        added, _deleted, path = line.split("\t", 2)
        if added == "-":
            binary.append(path)
        elif language.is_test(path):
            tests.append(path)
        elif language.is_source(path):
            sources.append(path)
    if not sources:
        return Skipped(commit, "no source change")
    if not tests and not code_only_ok:
        return Skipped(commit, "no test change")
    if any(language.is_test(p) or language.is_source(p) for p in binary):
        return Skipped(commit, f"binary change in {binary[0]}: a text patch cannot carry it")
    deleted = set(git(repo, "diff", "--name-only", "--no-renames", "--diff-filter=D", parent, commit).split())
    if not tests:  # code only (code_only_ok): the tree's tests named after the changed sources
        tests = _tests_named_after(repo, commit, language, sources)
    message, created_at = git(repo, "show", "-s", "--format=%B%x00%aI", commit).split("\x00", 1)
    return Candidate(
        commit=commit, parent=parent, gold_patch=_diff(repo, parent, commit, sources),
        test_patch=_diff(repo, parent, commit, tests), message=message.strip(), created_at=created_at.strip(),
        source_files=sources, test_files=[t for t in tests if t not in deleted],
    )  # fmt: skip


def _tests_named_after(repo: Path, commit: str, language: RepoLanguage, sources: list[str]) -> list[str]:
    """Test files of ``commit``'s tree whose name contains a stem of ``sources`` (runnable ones only);
    those under a changed source's folder when there are any (a package of several builds, such as
    npm's ``dist/esm`` and ``dist/cjs``, tests each build in its own ``test/``)."""
    named = [
        path
        for path in git(repo, "ls-tree", "-r", "--name-only", commit).split()
        if language.is_test(path)
        and PurePosixPath(path).suffix in language.source_suffixes
        and any(PurePosixPath(s).stem in PurePosixPath(path).name for s in sources)
    ]
    folders = {PurePosixPath(s).parent for s in sources}
    near = [p for p in named if any(PurePosixPath(p).is_relative_to(f) for f in folders if f.parts)]
    return near or named
