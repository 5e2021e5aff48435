"""Clean git history in an agent's container at episode start: nothing beyond the base commit.

Task images often carry more than the base commit: remote-tracking refs and tags of later
releases, reflogs and ``ORIG_HEAD`` pointing at the commit the image was reset from, stashes,
and the objects of future commits in the pack. A policy that runs ``git log --all`` or
``git cat-file --batch-all-objects`` reads the fix. `clean_history` removes every ref except
the checked-out branch (remotes, tags, notes, stash, replace refs), the reflogs and special
heads, and — only when some commit or tag object is not reachable from HEAD — prunes the
object store (``git gc --prune=now``). A clean image therefore pays two quick listings; an
image with future history pays one gc. The result is the same either way: refs = the current
branch, objects = those reachable from HEAD. Work tree, index and HEAD are not touched.
"""

from __future__ import annotations

import re
import time

from pydantic import BaseModel

from swe_rl.agent.protocols import Environment
from swe_rl.fleet.client import FleetUnavailable

__all__ = ["GitHygieneFailed", "GitHygieneResult", "clean_history", "hygiene_body", "hygiene_script"]

_SCRIPT = r"""
set -u
cd {workdir} 2>/dev/null || {{ echo "swe-git-hygiene: skipped=no-workdir"; exit 0; }}
git rev-parse -q --verify HEAD >/dev/null 2>&1 || {{ echo "swe-git-hygiene: skipped=no-repo"; exit 0; }}
gitdir=$(git rev-parse --git-dir) || exit 3
branch=$(git symbolic-ref -q HEAD || true)
refs=0
remotes=0
for r in $(git remote); do git remote remove "$r" >/dev/null 2>&1 || true; remotes=$((remotes+1)); done
for ref in $(git for-each-ref --format='%(refname)'); do
  [ "$ref" = "$branch" ] && continue
  git update-ref --no-deref -d "$ref" || exit 4
  refs=$((refs+1))
done
rm -rf "$gitdir"/logs "$gitdir"/refs/original "$gitdir"/worktrees "$gitdir"/rr-cache
rm -f "$gitdir"/ORIG_HEAD "$gitdir"/FETCH_HEAD "$gitdir"/MERGE_HEAD "$gitdir"/CHERRY_PICK_HEAD \
      "$gitdir"/REVERT_HEAD "$gitdir"/BISECT_LOG "$gitdir"/AUTO_MERGE "$gitdir"/shallow.lock
reach=$(mktemp) all=$(mktemp)
git rev-list HEAD | sort > "$reach" || exit 5
git cat-file --batch-all-objects --batch-check='%(objecttype) %(objectname)' \
  | awk '$1=="commit" || $1=="tag" {{print $2}}' | sort > "$all" || exit 6
extra=$(comm -23 "$all" "$reach" | wc -l)
rm -f "$reach" "$all"
pruned=0
if [ "$extra" -gt 0 ] || [ -s "$gitdir"/objects/info/alternates ]; then
  if [ -s "$gitdir"/objects/info/alternates ]; then
    git repack -a -d -q || exit 7
    rm -f "$gitdir"/objects/info/alternates
  fi
  git -c gc.reflogExpire=now -c gc.reflogExpireUnreachable=now -c gc.pruneExpire=now -c gc.cruftPacks=false \
    gc --prune=now --quiet || exit 8
  pruned=1
fi
echo "swe-git-hygiene: refs_removed=$refs remotes_removed=$remotes unreachable=$extra pruned=$pruned"
"""


def hygiene_body(workdir: str = "/testbed") -> str:
    """The bash script itself (data/clean_image_history.py runs it once per image)."""
    return _SCRIPT.format(workdir=_quote(workdir))


def hygiene_script(workdir: str = "/testbed") -> str:
    """A command line running the script (what episode start and bench/git_hygiene_bench.py run)."""
    return "bash -c " + _quote(hygiene_body(workdir))


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


class GitHygieneResult(BaseModel):
    """What was removed from one container's repository."""

    refs_removed: int = 0
    """Refs deleted (branches other than the current one, remote-tracking refs, tags, stash, notes...)."""
    remotes_removed: int = 0
    """Remotes removed from the configuration."""
    unreachable: int = 0
    """Commit and tag objects that were not reachable from HEAD (future history)."""
    pruned: bool = False
    """Whether the object store was pruned (``git gc --prune=now``)."""
    skipped: str | None = None
    """Why nothing was done (``no-repo``, ``no-workdir``)."""
    seconds: float = 0.0
    """Time it took, round trip included."""


class GitHygieneFailed(FleetUnavailable):
    """The clean-up did not finish: the episode must not start on an unclean repository (an environment
    failure: the rollout is removed, never scored)."""


async def clean_history(
    env: Environment, workdir: str = "/testbed", timeout: float = 600.0
) -> GitHygieneResult:
    """Strip everything beyond the base commit from the repository at `workdir` in `env`."""
    started = time.monotonic()
    res = await env.exec(hygiene_script(workdir), timeout=timeout)
    line = next((x for x in res.output.splitlines() if x.startswith("swe-git-hygiene:")), None)
    if res.returncode != 0 or line is None:
        raise GitHygieneFailed(f"git hygiene failed (exit {res.returncode}): {res.output.strip()[-500:]}")
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    if "skipped" in fields:
        return GitHygieneResult(skipped=fields["skipped"], seconds=round(time.monotonic() - started, 4))
    return GitHygieneResult(
        refs_removed=int(fields["refs_removed"]),
        remotes_removed=int(fields["remotes_removed"]),
        unreachable=int(fields["unreachable"]),
        pruned=fields["pruned"] == "1",
        seconds=round(time.monotonic() - started, 4),
    )
