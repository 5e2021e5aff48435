"""Patch capture that contains only the agent's changes: a baseline taken at episode start.

SWE-bench images are messy: their install step (`pip install .`, `setup.py develop`) leaves
untracked files in the repo (`build/`, egg-info) that `.gitignore` does not cover, and some
set-ups edit tracked files. A plain `git add -A && git diff --cached HEAD` sweeps all of that
into the patch. So, once the container is ready and before the first action,
`BASELINE_SCRIPT` records the work tree as it is:

- a git tree of HEAD plus every untracked (non-ignored) file and every uncommitted change,
  written with a private index and a private object directory under ``/tmp/.swe-rl/baseline``
  (the repository's own index and object store are not touched);
- the ignored files and folders that are present, as anchored exclude patterns, so they stay
  out of the patch even if the agent edits ``.gitignore``.

`DIFF_SCRIPT` then diffs the work tree against that tree, with an index and a private git directory
of its own kept under ``/tmp/.swe-rl/baseline`` from one diff to the next (two git processes, as a
plain `git add -A && git diff --cached HEAD`). Baseline files left alone are not
in the patch; files the agent creates, edits or deletes anywhere (inside ``build/`` too)
are, as ordinary git diffs that `git apply` applies to a fresh container of the same image
(where the same untracked files are present). Both scripts are POSIX sh plus git (no
Python), so they run on any task image. Used by the exec server (`/container/diff` with
``record_baseline``) and by the mini-swe-agent driver (through ``docker exec``).
"""

from __future__ import annotations

__all__ = [
    "BASELINE_CORE",
    "BASELINE_DIR",
    "BASELINE_SCRIPT",
    "DIFF_OR_SEED_SCRIPT",
    "DIFF_SCRIPT",
    "NO_BASELINE_EXIT",
    "SAFE_DIFF",
    "SAFE_GIT_ENV",
    "diff_script",
    "private_git_dir",
]

BASELINE_DIR = "/tmp/.swe-rl/baseline"
"""Inside the container, outside any work tree."""

NO_BASELINE_EXIT = 90
"""Exit code of `DIFF_SCRIPT` when no baseline was recorded in this container."""

SAFE_GIT_ENV = """
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_ATTR_NOSYSTEM=1 HOME=/nonexistent \\
  XDG_CONFIG_HOME=/nonexistent GIT_PAGER=cat GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0 \\
  GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
unset GIT_EXTERNAL_DIFF GIT_DIFF_OPTS GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE \\
  GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_NAMESPACE GIT_ATTR_SOURCE 2>/dev/null
"""
"""sh lines: git reads no system or global configuration, and nothing from the caller's environment
decides what a diff looks like (external diff programs, diff options); ownership checks off (the
global configuration that would list the repository as safe is not read)."""

SAFE_DIFF = (
    "git -c core.attributesFile=/dev/null -c core.hooksPath=/dev/null -c core.quotepath=off "
    "-c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.relative=false -c core.autocrlf=false "
    "-c core.fileMode=true -c core.symlinks=true -c diff.context=3 -c diff.interHunkContext=0 "
    "diff --binary --no-ext-diff --no-textconv --no-color --no-renames"
)
"""The diff command of every patch we take: binary-safe, no external diff driver, no text conversion,
no renames, a fixed format whatever configuration is in effect."""


_GIT_DIR_FILES = (
    "printf 'ref: refs/heads/swe-rl\\n' >\"$G/HEAD\" && "
    "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n' >\"$G/config\""
)
"""sh: the two files of a private git directory `$G` (with shell builtins only)."""


def private_git_dir(path: str) -> str:
    """sh lines making `path` an empty git directory (an empty configuration, no attributes, no hooks)
    and pointing git at it (``GIT_DIR``): run with ``GIT_WORK_TREE``, ``GIT_OBJECT_DIRECTORY`` and
    ``GIT_ALTERNATE_OBJECT_DIRECTORIES`` set, it reads the repository's objects and work tree but none
    of the repository's own settings (``.git/config`` diff drivers, ``.git/info/attributes``, hooks)."""
    return f"""
G="{path}"
rm -rf "$G" && mkdir -p "$G/refs" "$G/objects" "$G/info" && {_GIT_DIR_FILES} || exit 2
export GIT_DIR="$G"
"""


def reused_git_dir(path: str) -> str:
    """`private_git_dir` without a process: the directory the baseline made is used as it is, and made
    again only when it is gone. Like the baseline's tree, index, excludes and objects beside it, it is
    trusted: what it guards against is the repository's own settings (which the agent changes with
    plain git commands), not deliberate edits under ``/tmp/.swe-rl`` by a root agent, which could as
    well replace git; the patch that is graded is re-taken in a fresh container (`grading.canonical`)."""
    return f"""
G="{path}"
[ -s "$G/HEAD" ] && [ -s "$G/config" ] && [ -d "$G/refs" ] && [ -d "$G/objects" ] \\
  || {{ rm -rf "$G" && mkdir -p "$G/refs" "$G/objects" "$G/info" && {_GIT_DIR_FILES}; }} || exit 2
export GIT_DIR="$G"
"""


_COMMON = f"""{SAFE_GIT_ENV}
B={BASELINE_DIR}
top=$(git rev-parse --show-toplevel 2>/dev/null) || {{ echo "not inside a git work tree: $(pwd)" >&2; exit 2; }}
cd "$top" || exit 2
"""

_DIFF_ENV = f"""{SAFE_GIT_ENV}
B={BASELINE_DIR}
"""
_DIFF_TOP = """{ read -r top <"$B/top"; } 2>/dev/null || top=
if [ -z "$top" ] || [ "$PWD" != "$top" ]; then  # not at the baseline's work tree top: ask git where it is
  top=$(git rev-parse --show-toplevel 2>/dev/null) || { echo "not inside a git work tree: $(pwd)" >&2; exit 2; }
  cd "$top" || exit 2
fi
"""
"""The diff's start: at the top of the work tree; from there (the usual workdir) without a git call."""

BASELINE_CORE = (
    _COMMON
    + """
objects=$(cd "$(git rev-parse --git-path objects)" && pwd) || exit 2
index=$(git rev-parse --git-path index) || exit 2
G="$B/git"  # the diffs' private git directory (see `reused_git_dir`), made here once
rm -rf "$B" && mkdir -p "$B/objects" "$G/refs" "$G/objects" "$G/info" && """
    + _GIT_DIR_FILES
    + """ || exit 2
export GIT_INDEX_FILE="$B/index" GIT_OBJECT_DIRECTORY="$B/objects" GIT_ALTERNATE_OBJECT_DIRECTORIES="$objects"
# Start from a copy of the repository's index (its stat data spares rehashing every file), else from HEAD.
if ! { cp -p "$index" "$B/index" 2>/dev/null && git ls-files >/dev/null 2>&1; }; then
  rm -f "$B/index"
  if git rev-parse -q --verify HEAD >/dev/null; then git read-tree HEAD; else git read-tree --empty; fi || exit 2
fi
git add -A >/dev/null || exit 2
git write-tree >"$B/tree.tmp" || exit 2
# Ignored files present now, one anchored pattern each (glob characters escaped).
git ls-files -z --others --ignored --exclude-standard --directory | tr '\\000' '\\n' \\
  | sed -e 's/[][*?\\\\]/\\\\&/g' -e 's|^|/|' >"$B/exclude" || exit 2
printf '%s\\n' "$objects" >"$B/alternates"
printf '%s\\n' "$top" >"$B/top"
cp -p "$B/index" "$B/diff.index" || exit 2  # the diffs' own index, kept from one diff to the next
mv "$B/tree.tmp" "$B/tree"
"""
)
"""The baseline recorded, silently (a restore runs it: no summary, so fewer processes)."""

BASELINE_SCRIPT = (
    BASELINE_CORE
    + """
untracked=$(git diff --cached --name-only HEAD 2>/dev/null | wc -l)
ignored=$(wc -l <"$B/exclude")
echo "baseline $(cat "$B/tree") changed_or_untracked=$untracked ignored=$ignored"
"""
)


STALE_LOCK_MINUTES = 10
"""A ``diff.index.lock`` older than this was left by a diff killed partway (a diff takes well under a
minute): it is removed. A younger one belongs to a diff running now: that diff is left alone."""


SEED_DIFF = f"""git add -A >/dev/null || exit 2
{SAFE_DIFF} --cached HEAD && exit 0
git rev-parse -q --verify HEAD >/dev/null && exit 2
exec {SAFE_DIFF} --cached
"""
"""The diff with no baseline: everything untracked counts; two gits, as the seed's diff (a repository
without commits yet fails the first diff quietly on stdout and diffs against the empty tree)."""


def diff_script(
    base: str | None = None, tree_to: str | None = None, diff: bool = True, *, seed_fallback: bool = False
) -> str:
    """The agent's changes since the baseline; exits `NO_BASELINE_EXIT` when none was recorded.

    With `base` (a git revision) the diff is against that revision instead of the baseline
    tree, still leaving out what the baseline marks as ignored-present. With `tree_to` (a file) the
    git tree id of the work tree as the diff sees it and the baseline's are written there first
    (``tree <id>`` and ``base <id>`` lines: snapshots compare them after a restore); `diff=False` then
    stops there (a check, not a patch). With `seed_fallback` a container without a baseline gets
    `SEED_DIFF` in the same run instead of the exit (one exec per diff, whatever the caller recorded).
    """
    against = '"$against"' if base else '"$tree"'
    resolve = f'against=$(git rev-parse --verify "{base}^{{tree}}") || exit 2\n' if base else ""
    # As few processes as the seed's `git add -A && git diff --cached HEAD` (two gits; each process costs
    # a fork+exec, which a loaded node stretches): files are read with the shell's `read`; the private
    # git directory and the diff's index are made with the baseline and kept (the index's stat data is
    # git's own, refreshed by each `add`, so only files changed since the last diff are hashed again);
    # `LC_ALL=C` spares each git loading the locale's files; the baseline tree is looked for only when
    # the diff fails.
    missing = SEED_DIFF if seed_fallback else f'echo "no baseline recorded" >&2; exit {NO_BASELINE_EXIT}\n'
    return (
        _DIFF_ENV
        + f"""if ! [ -s "$B/tree" ] || ! [ -s "$B/index" ]; then
{missing}fi
"""
        + _DIFF_TOP
        + f"""
read -r tree <"$B/tree" && read -r alternates <"$B/alternates" || exit 2
{resolve}export GIT_INDEX_FILE="$B/diff.index" GIT_OBJECT_DIRECTORY="$B/objects" \\
  GIT_ALTERNATE_OBJECT_DIRECTORIES="$alternates" GIT_WORK_TREE="$top" LC_ALL=C
{reused_git_dir(BASELINE_DIR + "/git")}
[ -f "$GIT_INDEX_FILE" ] || cp -p "$B/index" "$GIT_INDEX_FILE" || exit 2
if [ -e "$GIT_INDEX_FILE.lock" ]; then  # a diff killed partway (or one running now) holds the kept index
  find "$B" -maxdepth 1 -name diff.index.lock -mmin +{STALE_LOCK_MINUTES} -delete  # stale: the next diff is fast
  export GIT_INDEX_FILE="$B/diff.index.$$"  # this one takes a private copy and leaves the kept one alone
  trap 'rm -f "$GIT_INDEX_FILE" "$GIT_INDEX_FILE.lock"' EXIT
  cp -p "$B/diff.index" "$GIT_INDEX_FILE" || exit 2
fi
git -c core.excludesFile="$B/exclude" -c core.attributesFile=/dev/null add -A >/dev/null || exit 2
{_tree_lines(tree_to)}{"" if diff else "exit 0"}
{SAFE_DIFF} --cached {against} && exit 0 || failed=$?
git cat-file -e "$tree" 2>/dev/null || {{ echo "the baseline was removed from $B" >&2; exit 3; }}
exit "$failed"
"""
    )


def _tree_lines(tree_to: str | None) -> str:
    if tree_to is None:
        return ""
    return f'''t=$(git write-tree) || exit 2
printf 'tree %s\\nbase %s\\n' "$t" "$tree" >"{tree_to}" || exit 2
'''


DIFF_SCRIPT = diff_script()
"""The agent's changes since the baseline tree."""

DIFF_OR_SEED_SCRIPT = diff_script(seed_fallback=True)
"""`DIFF_SCRIPT`, or `SEED_DIFF` in the same run when no baseline was recorded. Why: the exit-then-
second-exec fallback made a diff without a baseline 2.25x one with it (1.59x the seed's diff)."""
