"""The shell scripts of a tree snapshot: what the capture and the restore run inside the container.

`capture_script` prints the snapshot tarball on stdout (the baseline diff, the tree ids, HEAD, the
staging area, the empty directories, the extra paths' manifest and tar); `restore_script` unpacks
one under `RESTORE_DIR`, records the baseline, applies the diff, puts the extra paths, the empty
directories and the staging area back (`restore_git_state`) and prints what the node checks against
the snapshot's record. Only sh, git, tar, find, sort and sha256sum run. `snapshot_ops` runs them
through the exec operations and judges their output.
"""

from __future__ import annotations

import hashlib

from swe_rl.fleet import patch_baseline
from swe_rl.fleet.exec.operations import SCRATCH, _sh_quote

__all__ = ["EMPTY_SHA", "RESTORE_DIR", "capture_script", "restore_git_state", "restore_script"]

RESTORE_DIR = f"{SCRATCH}/restore"
_APPLY = (
    "git -c core.hooksPath=/dev/null -c core.autocrlf=false -c core.fileMode=true -c core.symlinks=true "
    "-c apply.whitespace=nowarn apply --binary"
)


def _manifest(paths: list[str], out: str) -> str:
    """sh: the extra paths' manifest (type, mode, path, link target; sha256 of every file) into `out`."""
    quoted = " ".join(_sh_quote(p) for p in paths)
    return f"""
: >"{out}"
present=
for p in {quoted}; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    find "$p" -printf '%y %m %p %l\\n' | LC_ALL=C sort >>"{out}" || exit 2
    find "$p" -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum >>"{out}" || exit 2
    present=1
  else
    printf 'absent %s\\n' "$p" >>"{out}"
  fi
done
"""


EMPTY_SHA = hashlib.sha256(b"").hexdigest()
"""What sha256sum prints for nothing: the restore prints it without running sha256sum."""
_EMPTY_DIRS = "find . -path ./.git -prune -o -type d -empty -print | LC_ALL=C sort"
"""sh: the work tree's empty directories (git keeps none, so the diff cannot carry them)."""

_GIT_STATE = f"""{patch_baseline.SAFE_GIT_ENV}
read -r top <{patch_baseline.BASELINE_DIR}/top && cd "$top" || exit 2
git rev-parse -q --verify HEAD >"$S/head" || : >"$S/head"
if [ -s "$S/head" ]; then {patch_baseline.SAFE_DIFF} --cached HEAD >"$S/staged.diff" || exit 2; else : >"$S/staged.diff"; fi
{_EMPTY_DIRS} >"$S/dirs" || exit 2
"""
"""sh (in `$S`): HEAD's id, the staging area as a diff against HEAD, and the empty directories. Why: the
baseline diff is of the work tree only, so a restore gave back a staged new file as untracked and no
empty directory (both now restored and checked)."""


def restore_git_state(staged: str) -> str:
    """sh (at the work tree's top, after the diff applied): the empty directories made (and those the
    original did not have removed), the staging area put back when HEAD is the snapshot's; then the
    ``dirs`` and ``staged`` hashes that the node compares with the snapshot's. `staged` is the sha256 of
    the snapshot's staging diff: when the index already gives it (the common case: nothing staged,
    a clean index) it is left alone, so the usual restore runs one git diff here, not two. The
    directories are made by one process and listed once when they came out right."""
    return f"""
if [ -f "$S/dirs" ]; then
  want=
  if [ -s "$S/dirs" ]; then
    tr '\\n' '\\000' <"$S/dirs" | xargs -0 mkdir -p -- && want=$(cat "$S/dirs") || exit 7
  fi
  if [ -z "$want" ]; then  # the usual case: none to have, so one find that stops at the first one
    now=$(find . -path ./.git -prune -o -type d -empty -print -quit) || exit 7
    [ -z "$now" ] || now=$({_EMPTY_DIRS}) || exit 7
  else
    now=$({_EMPTY_DIRS}) || exit 7
  fi
  while [ "$now" != "$want" ]; do  # until no more go: a parent emptied by a pass goes in the next
    printf '%s\\n' "$now" | LC_ALL=C sort -r | while IFS= read -r d; do
      [ -z "$d" ] || grep -qxF -- "$d" "$S/dirs" || rmdir -- "$d" 2>/dev/null || :
    done
    was=$now && now=$({_EMPTY_DIRS}) || exit 7
    [ "$now" != "$was" ] || break
  done
  if [ -n "$now" ]; then printf 'dirs %s\\n' "$(printf '%s\\n' "$now" | sha256sum)"; else echo 'dirs {EMPTY_SHA}  -'; fi
fi
if [ -f "$S/head" ]; then
  read -r head <"$S/head" || head=
  now=$(git rev-parse -q --verify HEAD) || now=
  if [ -n "$head" ] && [ "$head" = "$now" ]; then
    if [ {_sh_quote(staged)} = {EMPTY_SHA} ] && {patch_baseline.SAFE_DIFF} --cached --quiet HEAD; then
      got='{EMPTY_SHA}  -'
    else
      got=$({patch_baseline.SAFE_DIFF} --cached HEAD | sha256sum)
    fi
    if [ "${{got%% *}}" != {_sh_quote(staged)} ]; then
      git read-tree -m HEAD || {{ echo "cannot reset the index" >&2; exit 8; }}
      if [ -s "$S/staged.diff" ]; then
        {_APPLY} --cached "$S/staged.diff" || {{ echo "the staged changes do not apply" >&2; exit 8; }}
      fi
      got=$({patch_baseline.SAFE_DIFF} --cached HEAD | sha256sum)
    fi
    printf 'staged %s\\n' "$got"
  fi
fi
"""


def capture_script(extra_paths: list[str]) -> str:
    """sh: the snapshot tarball (diff, tree ids, paths, manifest, extra tar) on stdout."""
    members = "patch.diff tree paths manifest head staged.diff dirs"
    extras = ': >"$S/manifest"\n'
    if extra_paths:
        relative = " ".join(_sh_quote(p.lstrip("/") or ".") for p in extra_paths)
        extras = (
            _manifest(extra_paths, "$S/manifest")
            + f"""
if [ -n "$present" ]; then
  tar -C / --ignore-failed-read -cf "$S/extra.tar" -- {relative} 2>/dev/null
  [ -f "$S/extra.tar" ] || exit 2
  members="$members extra.tar"
fi
"""
        )
    paths = " ".join(_sh_quote(p) for p in extra_paths) or "''"
    return f"""
S={SCRATCH}/snapshot
rm -rf "$S" && mkdir -p "$S" || exit 2
( {patch_baseline.diff_script(tree_to="$S/tree")} ) >"$S/patch.diff" 2>"$S/diff.err" || {{ rc=$?; cat "$S/diff.err" >&2; exit $rc; }}
printf '%s\\n' {paths} >"$S/paths"
( {_GIT_STATE} ) || {{ echo "cannot read the index and the empty directories" >&2; exit 2; }}
members="{members}"
{extras}
tar -C "$S" -cf - $members || exit 2
"""


def restore_script(extra_paths: list[str], inline: str = "", ahead: str = "", staged: str = "") -> str:
    """sh: (unpack `inline`, a base64 tar of `RESTORE_DIR` relative to /tmp), baseline, apply, extra paths;
    then the ``tree``/``base`` ids and the ``extras`` manifest hash on stdout. With `ahead` (the
    snapshot's baseline tree id, given only for a container whose baseline this node recorded when it
    warmed it) the baseline is recorded again only when the one there is not that tree."""
    unpack = ""
    if inline:
        unpack = f"""{{ ! [ -e "$S" ] || rm -rf "$S"; }} && printf '%s' '{inline}' | base64 -d | tar -C /tmp -xf - || \\
  {{ echo "cannot unpack the snapshot (base64 and tar are needed)" >&2; exit 2; }}
"""
    check = ""
    if extra_paths:
        check = (
            _manifest(extra_paths, "$S/manifest.now")
            + 'printf "extras %s\\n" "$(sha256sum <"$S/manifest.now")"\n'
        )
    record = ""
    if ahead:
        record = f'{{ read -r had <{patch_baseline.BASELINE_DIR}/tree; }} 2>/dev/null || had=\n[ "$had" = {_sh_quote(ahead)} ] || '
    return f"""
S={RESTORE_DIR}
{unpack}[ -f "$S/patch.diff" ] || {{ echo "the snapshot was not unpacked" >&2; exit 2; }}
{record}( {patch_baseline.BASELINE_CORE} ) >/dev/null || {{ echo "cannot record the baseline" >&2; exit 3; }}
{patch_baseline.SAFE_GIT_ENV}
read -r top <{patch_baseline.BASELINE_DIR}/top && cd "$top" || exit 2
if [ -s "$S/patch.diff" ]; then {_APPLY} "$S/patch.diff" || {{ echo "the diff does not apply" >&2; exit 4; }}; fi
if [ -f "$S/extra.tar" ]; then tar -C / -xpf "$S/extra.tar" || {{ echo "cannot unpack the extra paths" >&2; exit 5; }}; fi
{restore_git_state(staged)}( {patch_baseline.diff_script(tree_to="$S/tree.now", diff=False)} ) >/dev/null || {{ echo "cannot read the restored tree" >&2; exit 6; }}
while read -r line; do echo "$line"; done <"$S/tree.now"
{check}rm -rf "$S"
"""
