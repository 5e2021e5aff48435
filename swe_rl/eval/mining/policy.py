"""What makes a mined row a SWE-bench-like task, and the reason a row is dropped (or flagged) when it is not.

Four rules, each with its reason written to the drops file (or, with ``flag_only``, to the row's
``policy_flags``):

- **release-sized**: the gold patch touches more than ``max_files`` source files or changes more
  than ``max_lines`` lines, or FAIL_TO_PASS holds more than ``max_fail_to_pass`` tests: a release's
  whole diff is not a task an agent can solve from a statement;
- **copyable fix**: every hunk's added lines are found, in order and verbatim, in another file of
  the repository at the base commit (another build of the same file: ``dist/cjs`` beside
  ``dist/esm``): the agent copies the fix instead of finding it. Lines too short to tell anything
  (``}``, ``return x``: fewer than ``MIN_LINE_CHARS`` characters once stripped) are not looked for;
- **import failure**: every FAIL_TO_PASS test belongs to a test file none of whose tests ran before
  the fix (the file failed to import or collect: a new API's tests), so the tests tell whether a
  name exists, not whether a behaviour is right. The file is the part of the test id before ``::``
  (pytest); runners without files in their ids count the whole run: no test ran at all before;
- **no PASS_TO_PASS**: nothing would notice a fix that breaks what worked.

The first two need only the candidate and the repository (checked before the image is built); the
last two need the validation's maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from swe_rl.eval.mining.history import Candidate, git

__all__ = ["MIN_LINE_CHARS", "RowPolicy", "added_blocks", "after_validation", "before_build"]

MIN_LINE_CHARS = 12
"""Added lines shorter than this (stripped) are not evidence of a copy."""


@dataclass(frozen=True)
class RowPolicy:
    """The thresholds and switches of the rules (``swe-mine-tasks --max-files`` ...)."""

    max_files: int = 8
    max_lines: int = 300
    max_fail_to_pass: int = 25
    require_pass_to_pass: bool = True
    drop_import_failures: bool = True
    drop_copyable: bool = True
    flag_only: bool = False
    """Keep every row and list the reasons in ``policy_flags`` instead of dropping it."""


def _changed_lines(patch: str) -> int:
    return sum(1 for line in patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++ ", "--- ")))


def added_blocks(patch: str) -> list[tuple[str, list[str]]]:
    """(file, the hunk's added lines, stripped, long enough to tell) for every hunk that adds any."""
    blocks: list[tuple[str, list[str]]] = []
    path, current = "", list[str]()
    for line in [*patch.splitlines(), "@@"]:
        if line.startswith("@@") or line.startswith("diff --git"):
            if current:
                blocks.append((path, current))
            current = []
            if line.startswith("diff --git"):
                path = line.split(" b/", 1)[-1]
        elif line.startswith("+") and not line.startswith("+++ "):
            text = line[1:].strip()
            if len(text) >= MIN_LINE_CHARS:
                current.append(text)
    return blocks


def _contains_in_order(text: str, block: list[str]) -> bool:
    lines = [ln.strip() for ln in text.splitlines()]
    at = 0
    for want in block:
        try:
            at = lines.index(want, at) + 1
        except ValueError:
            return False
    return True


def copied_from(repo: Path, candidate: Candidate) -> str | None:
    """Another file at the parent that holds every hunk's added lines (in order), if any."""
    blocks = added_blocks(candidate.gold_patch)
    if not blocks:
        return None
    changed = set(candidate.source_files)
    holders: set[str] | None = None
    for _path, block in blocks:
        found = git(repo, "grep", "-l", "-F", "-e", block[0], candidate.parent, check=False).split()
        files = {f.split(":", 1)[1] for f in found if ":" in f} - changed
        files = {f for f in files if _contains_in_order(git(repo, "show", f"{candidate.parent}:{f}"), block)}
        holders = files if holders is None else holders & files
        if not holders:
            return None
    return sorted(holders)[0] if holders else None


def before_build(repo: Path, candidate: Candidate, policy: RowPolicy) -> list[str]:
    """Reasons known from the commit alone: release-sized, copyable."""
    reasons = []
    files, lines = len(candidate.source_files), _changed_lines(candidate.gold_patch)
    if files > policy.max_files:
        reasons.append(f"release-sized: the gold patch touches {files} files (max {policy.max_files})")
    if lines > policy.max_lines:
        reasons.append(f"release-sized: the gold patch changes {lines} lines (max {policy.max_lines})")
    if policy.drop_copyable:
        source = copied_from(repo, candidate)
        if source is not None:
            reasons.append(f"copyable fix: the gold patch's added lines are in {source} at the base commit")
    return reasons


def _group(test: str) -> str:
    return test.split("::", 1)[0] if "::" in test else ""


def import_failures(fail_to_pass: list[str], before: Mapping[str, str]) -> list[str]:
    """The test files (``""``: the whole run) of FAIL_TO_PASS none of whose tests ran before."""
    ran = {_group(t) for t in before}
    return sorted({_group(t) for t in fail_to_pass} - ran)


def after_validation(
    fail_to_pass: list[str], pass_to_pass: list[str], before: Mapping[str, str], policy: RowPolicy
) -> list[str]:
    """Reasons known from the two runs: too many FAIL_TO_PASS, import failures, no PASS_TO_PASS."""
    reasons = []
    if len(fail_to_pass) > policy.max_fail_to_pass:
        reasons.append(
            f"release-sized: {len(fail_to_pass)} FAIL_TO_PASS tests (max {policy.max_fail_to_pass})"
        )
    if policy.drop_import_failures:
        failed = import_failures(fail_to_pass, before)
        if failed and {_group(t) for t in fail_to_pass} <= set(failed):
            where = ", ".join(f or "the whole run" for f in failed)
            reasons.append(
                f"import failure: every FAIL_TO_PASS test is in {where}, where no test ran before the "
                "fix (the file failed to import or collect)"
            )
    if policy.require_pass_to_pass and not pass_to_pass:
        reasons.append("no PASS_TO_PASS: nothing guards against a fix that breaks what worked")
    return reasons
