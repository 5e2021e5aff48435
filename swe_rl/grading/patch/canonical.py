"""Stage 1 of the grading pipeline: the one canonical patch, re-derived in the grading container.

Whatever text the agent handed in (a git diff, a unified diff with ``Index:`` lines, a context
diff, prose around it), what is graded is what ``git apply`` accepts on the clean checkout and
nothing else: the patch is applied to a private index holding the checkout (the work tree is not
touched), and the canonical patch is re-taken from the two trees with
``git diff --binary --no-ext-diff --no-textconv --no-renames`` under a git configuration the
repository cannot change (no system or global configuration, a private empty git directory: the
repository's ``.git/config`` diff drivers, ``.git/info/attributes`` and hooks are not read).

The same container call also lists what changed (modes, blob ids: `TreeChange`), the content of
each changed blob (capped), and what the image's interpreter imports (`InterpreterFacts`), which
the tree rules (`swe_rl.grading.scans.tree`) need.
"""

from __future__ import annotations

import base64
import json
import secrets
import shlex
from typing import Any, Literal

from pydantic import BaseModel, Field

from swe_rl.fleet.patch_baseline import BASELINE_DIR, SAFE_DIFF, SAFE_GIT_ENV, private_git_dir

__all__ = [
    "CanonicalPatch",
    "InterpreterFacts",
    "TreeChange",
    "canonical_script",
    "canonicalise",
    "parse_batch",
    "parse_output",
    "parse_raw",
]

WORK_DIR = "/tmp/.swe-rl/canon"
"""Inside the grading container, outside the work tree."""
MAX_BLOB_BYTES = 1 << 20
"""Blobs larger than this are not read back (rules that need content treat them as unknown)."""

ChangeKind = Literal["added", "modified", "deleted", "type_changed"]
_KINDS: dict[str, ChangeKind] = {"A": "added", "M": "modified", "D": "deleted", "T": "type_changed"}
_NULL_SHA = "0" * 40


class TreeChange(BaseModel):
    """One path the canonical patch changes, as git records it (``git diff --raw``)."""

    path: str
    """Repository-relative path, as written."""
    kind: ChangeKind
    """added, modified, deleted or type_changed (e.g. a file becoming a symlink)."""
    old_mode: str = "000000"
    """Mode before (``100644`` file, ``100755`` executable, ``120000`` symlink, ``160000`` submodule)."""
    new_mode: str = "000000"
    """Mode after (``000000`` when deleted)."""
    old_blob: str = _NULL_SHA
    """Blob id before."""
    new_blob: str = _NULL_SHA
    """Blob id after."""

    @property
    def symlink_after(self) -> bool:
        return self.new_mode == "120000"


class InterpreterFacts(BaseModel):
    """What the image's Python imports, asked of the interpreter itself."""

    python: str = ""
    """Interpreter that answered ("" when none did: the rules that need it fall back to built-in lists)."""
    version: str = ""
    stdlib: list[str] = Field(default_factory=list)
    """``sys.stdlib_module_names``."""
    distributions: list[str] = Field(default_factory=list)
    """Top-level import names of every installed distribution."""
    import_roots: dict[str, list[str]] = Field(default_factory=dict)
    """Import roots inside the repository (``""`` = its top, ``src``, directories on ``sys.path``) ->
    the names present there at the base commit."""


class CanonicalPatch(BaseModel):
    """Stage 1's result: what ``git apply`` accepted, re-taken canonically."""

    applied: bool
    """``git apply`` accepted the patch on the clean checkout."""
    text: str = ""
    """The canonical patch (empty when it did not apply, or changed nothing)."""
    apply_output: str = ""
    """What ``git apply`` said."""
    changes: list[TreeChange] = Field(default_factory=list)
    blobs: dict[str, bytes] = Field(default_factory=dict)
    """Blob id -> content, for the blobs of `changes` up to `MAX_BLOB_BYTES`."""
    interpreter: InterpreterFacts = Field(default_factory=InterpreterFacts)

    def content(self, blob: str) -> str | None:
        """The text of a blob (None: absent, unknown or too large)."""
        data = self.blobs.get(blob)
        return None if data is None else data.decode("utf-8", errors="replace")


_QUERY = r"""
import json, os, sys
top, extra = sys.argv[1], sys.argv[2:]
std = sorted(getattr(sys, "stdlib_module_names", ()))
if not std:
    import sysconfig
    d = sysconfig.get_paths()["stdlib"]
    std = sorted({n.split(".")[0] for n in os.listdir(d)} | set(sys.builtin_module_names))
tops = set()
try:
    from importlib import metadata
    for dist in metadata.distributions():
        txt = dist.read_text("top_level.txt") or ""
        tops.update(t.strip() for t in txt.split() if t.strip())
        for f in [] if txt.strip() else list(dist.files or [])[:5000]:
            part = str(f).split("/")[0]
            if part.startswith(".") or part == "__pycache__" or ".dist-info" in part or ".egg-info" in part:
                continue
            tops.add(part.split(".")[0] if "." in part else part)
except Exception:
    pass
roots = {"": top, "src": os.path.join(top, "src"), "lib": os.path.join(top, "lib")}
for p in sys.path + [os.path.join(top, e) for e in extra]:
    p = os.path.abspath(p) if p else ""
    if p == top or p.startswith(top + os.sep):
        roots[os.path.relpath(p, top).replace(os.sep, "/").strip(".")] = p
listing = {}
for rel, p in roots.items():
    try:
        listing[rel] = sorted(os.listdir(p))
    except OSError:
        pass
print(json.dumps({"python": sys.executable, "version": sys.version.split()[0], "stdlib": std,
                  "distributions": sorted(tops), "import_roots": listing}))
"""

_PYTHONS = "/opt/miniconda3/envs/testbed/bin/python /opt/conda/envs/testbed/bin/python python3 python"


def canonical_script(marker: str, extra_roots: list[str] | None = None, interpreter: bool = True) -> str:
    """The sh script run in the grading container (the agent's patch is at ``$W/patch.diff``).

    `interpreter=False`: the interpreter is not asked (`InterpreterFacts` depend on the image and the
    clean tree, never on the patch: a task's later gradings reuse its first answer, `grading.prerun`)."""
    extra = " ".join(shlex.quote(r) for r in extra_roots or [])
    query = ""
    if interpreter:
        query = f"""echo "--$M-python--"
for py in {_PYTHONS}; do
  if command -v "$py" >/dev/null 2>&1; then
    (cd / && "$py" -c {shlex.quote(_QUERY)} "$top" {extra} 2>/dev/null) | base64 -w0; break
  fi
done
echo
"""
    return f"""{SAFE_GIT_ENV}
W={WORK_DIR}; B={BASELINE_DIR}; M={marker}
top=$(git rev-parse --show-toplevel 2>/dev/null) || {{ echo "not inside a git work tree: $(pwd)" >&2; exit 2; }}
cd "$top" || exit 2
objects=$(cd "$(git rev-parse --git-path objects)" && pwd) || exit 2
index=$(git rev-parse --git-path index) || exit 2
head=$(git rev-parse -q --verify 'HEAD^{{tree}}' 2>/dev/null || echo 4b825dc642cb6eb9a060e54bf8d69288fbee4904)
rm -rf "$W/objects" "$W/index" && mkdir -p "$W/objects" || exit 2
alt="$objects"
[ -s "$B/tree" ] && [ -d "$B/objects" ] && alt="$objects:$B/objects"
export GIT_OBJECT_DIRECTORY="$W/objects" GIT_ALTERNATE_OBJECT_DIRECTORIES="$alt" GIT_INDEX_FILE="$W/index" \\
  GIT_WORK_TREE="$top"
if [ -s "$B/tree" ]; then
  base=$(cat "$B/tree")
  {private_git_dir(WORK_DIR + "/git")}
else
  cp -p "$index" "$W/index" 2>/dev/null
  {private_git_dir(WORK_DIR + "/git")}
  git ls-files >/dev/null 2>&1 || {{ rm -f "$W/index"; git read-tree "$head" || exit 2; }}
  git -c core.attributesFile=/dev/null add -A >/dev/null 2>&1 || exit 2
  base=$(git write-tree) || exit 2
fi
git read-tree "$base" || exit 2
if ! git apply --cached --verbose "$W/patch.diff" >"$W/apply.log" 2>&1; then
  echo "--$M-failed--"; cat "$W/apply.log"; exit 0
fi
after=$(git write-tree) || exit 2
echo "--$M-apply--"; base64 -w0 <"$W/apply.log"; echo
echo "--$M-patch--"; {SAFE_DIFF} "$base" "$after" | base64 -w0; echo
echo "--$M-raw--"; git diff --raw -z --no-abbrev --no-renames "$base" "$after" | base64 -w0; echo
echo "--$M-blobs--"
git diff --raw --no-abbrev --no-renames "$base" "$after" | awk '{{print $3; print $4}}' | sort -u | \\
  git cat-file --batch-check | awk '$2 == "blob" && $3 <= {MAX_BLOB_BYTES} {{print $1}}' | \\
  git cat-file --batch | base64 -w0; echo
{query}echo "--$M-end--"
"""


def parse_batch(data: bytes) -> dict[str, bytes]:
    """``git cat-file --batch`` output (``<sha> <type> <size>``, the content, a newline, per object) -> blobs.

    One git process reads every changed blob (three per blob before: a second of git start-ups on a
    loaded machine for a patch of a few files); a stream cut short raises ValueError."""
    blobs: dict[str, bytes] = {}
    at = 0
    while at < len(data):
        end = data.find(b"\n", at)
        if end < 0:
            raise ValueError("canonical patch script: a blob header without its content")
        header = data[at:end].decode("ascii", "replace").split()
        if len(header) != 3 or not header[2].isdigit():
            raise ValueError(f"canonical patch script: not a blob header: {header!r}")
        size = int(header[2])
        body = data[end + 1 : end + 1 + size]
        if len(body) != size or data[end + 1 + size : end + 2 + size] != b"\n":
            raise ValueError(f"canonical patch script: blob {header[0]} cut short")
        if header[0] != _NULL_SHA:
            blobs[header[0]] = body
        at = end + 2 + size
    return blobs


def parse_raw(data: bytes) -> list[TreeChange]:
    """``git diff --raw -z --no-renames`` output -> changes."""
    fields = data.split(b"\0")
    out: list[TreeChange] = []
    i = 0
    while i + 1 < len(fields):
        meta = fields[i].decode("ascii", errors="replace").lstrip(":").split()
        path = fields[i + 1].decode("utf-8", errors="replace")
        i += 2
        if len(meta) < 5:
            continue
        old_mode, new_mode, old_blob, new_blob, status = meta[:5]
        kind = _KINDS.get(status[:1], "modified")
        out.append(
            TreeChange(
                path=path,
                kind=kind,
                old_mode=old_mode,
                new_mode=new_mode,
                old_blob=old_blob,
                new_blob=new_blob,
            )
        )
    return out


def _sections(output: str, marker: str) -> dict[str, str]:
    out: dict[str, str] = {}
    name: str | None = None
    for line in output.split("\n"):
        if line.startswith(f"--{marker}-") and line.endswith("--"):
            name = line[len(marker) + 3 : -2]
            out[name] = ""
            continue
        if name is not None:
            out[name] += line + "\n"
    return out


def _b64(text: str) -> bytes:
    return base64.b64decode("".join(text.split()) or b"")


def parse_output(output: str, marker: str) -> CanonicalPatch:
    """The script's output -> `CanonicalPatch` (raises ValueError on an output it did not finish)."""
    parts = _sections(output, marker)
    if "failed" in parts:
        return CanonicalPatch(applied=False, apply_output=parts["failed"].strip())
    if "end" not in parts:
        raise ValueError(f"canonical patch script did not finish: {output[-2000:]}")
    blobs = parse_batch(_b64(parts.get("blobs", "")))
    facts: dict[str, Any] = {}
    python = _b64(parts.get("python", ""))
    if python.strip():
        facts = json.loads(python)
    return CanonicalPatch(
        applied=True,
        text=_b64(parts.get("patch", "")).decode("utf-8", errors="replace"),
        apply_output=_b64(parts.get("apply", "")).decode("utf-8", errors="replace"),
        changes=parse_raw(_b64(parts.get("raw", ""))),
        blobs=blobs,
        interpreter=InterpreterFacts(**facts),
    )


async def canonicalise(lease: Any, patch: str, extra_roots: list[str] | None = None) -> CanonicalPatch:
    """Stage 1 on a fresh grading lease (baseline recorded or not): the work tree is left as it was.

    `extra_roots`: more repository directories whose names count as import roots (the test patch's
    directories, which pytest puts on ``sys.path``)."""
    marker = secrets.token_hex(8)
    await lease.write_file(f"{WORK_DIR}/patch.diff", patch.encode("utf-8"))
    res = await lease.exec(
        canonical_script(marker, extra_roots), timeout=300, max_output_bytes=16 << 20, separate_stderr=True
    )
    if res.returncode != 0 or res.truncated:
        raise ValueError(
            f"canonical patch script failed ({res.returncode}): {(res.stderr or res.output)[-2000:]}"
        )
    return parse_output(res.output, marker)
