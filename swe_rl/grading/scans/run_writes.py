"""Files the test run writes, judged like the patch (a stage after the test run).

The capability scan reads the patch; code under test can write a module at run time (a ``.py`` on an
import path, a ``.pth``, ``sitecustomize.py``, a ``conftest.py``, a ``.go``/``.js``/``.rs`` file before a
second compile) and import it by name, which the scan of the patch never sees. So the test run is followed
by a look at the tree it leaves:

- right before the test command (after the grader's canaries and twins are planted) the runner shell
  touches a marker file of a random name, and, for Python rows, notes the interpreter's import path
  (``sys.path``, asked before anything of the run executes);
- right after the test command (the code under test's processes are killed by then, before the end
  marker) it lists every regular file under the repository and those import directories whose mtime
  **or ctime** is newer than the marker (``touch -d`` sets an old mtime, never an old ctime), pruning
  normal artefacts (``.git``, ``__pycache__``, ``.pytest_cache``, ``.hypothesis``, ``.mypy_cache``,
  ``node_modules/.cache``, the repository's ``target/``), and prints the list's SHA-256 in the log;
- the list and the files the grader reads after the run (the probes' reports: ``carry``) are copied,
  base64 under random markers, into one bundle file, which the script then prints into the log (each
  part is checked as its own file was: the list against its hash in the log, a report against its
  signature): no container call reads anything after the run (`bundle_from_log`). A log the fleet's
  output cap cut is not used for it: the bundle file is read back in one call;
- the grader reads the list, then each listed source file (by suffix, as the patch scan picks them), and
  scans it with the capability scan of the patch, the version the run started from as ``before``
  (the patched tree's, else the base commit's, else none): whatever that scan would void voids; a new
  import hook file (``*.pth``, ``sitecustomize``/``usercustomize``, ``conftest.py``) voids whatever it
  holds. Rule ``run_written_file``.

Files the grader itself writes and restores (the test patch's files, the canary, the twins) are not
judged. Limits: directories outside the repository and the noted import path (``/tmp``, where tests write
their own modules) are not listed; a file written and removed within the run is not seen; at most
`MAX_FILES` files of at most `MAX_BYTES` each are read (past that the run is recorded, ``noted``).
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
import random
import shlex
from collections.abc import Sequence

from pydantic import BaseModel, Field

from swe_rl.grading.integrity import TamperRecord
from swe_rl.grading.scans.capabilities import CapabilityConfig, ChangedSource, changed_source, scan_changes
from swe_rl.grading.scans.capabilities.other_languages import LANGUAGE_SUFFIXES
from swe_rl.tasks.eval_scripts import END_TEST_OUTPUT, START_TEST_OUTPUT

__all__ = [
    "WritesPlan",
    "WrittenFiles",
    "bundle_from_log",
    "plan_writes",
    "read_listing",
    "unpack_bundle",
    "written_records",
    "written_sources_wanted",
]

WRITES_MARK = ">>>>> swe-rl run writes"
BUNDLE_MARK = ">>>>> swe-rl run bundle"
MAX_FILES = 200
"""Listed files read back and scanned at most (the rest is recorded as not read)."""
MAX_BYTES = 512 << 10
_PRUNED = (".git", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".tox", ".nox")
_HOOK_NAMES = ("sitecustomize.py", "usercustomize.py", "conftest.py")
_PY_SUFFIXES = (".py", ".pyw", ".pth")


class WritesPlan(BaseModel):
    """The marker and the listing around one test run."""

    script: str
    """The run script with the marker before the test command and the listing after it."""
    tag: str = ""
    listing: str = ""
    """Where the list of written files lands."""
    bundle: str = ""
    """One file holding the list and the `carried` files after the run (one read instead of several)."""
    carried: list[str] = Field(default_factory=list)
    """Files the grader reads after the run (the probes' reports), copied into the bundle."""
    skipped: str = ""


class WrittenFiles(BaseModel):
    """What the run wrote (paths as listed: absolute) and what the grader could read of it."""

    paths: list[str] = Field(default_factory=list)
    error: str = ""
    """Why there is no valid list ("" when there is)."""


def plan_writes(
    script: str,
    workdir: str,
    python: bool,
    rng: random.Random | None = None,
    carry: Sequence[str] = (),
    import_path: Sequence[str] = (),
) -> WritesPlan:
    """`script` (the final run script: canaries and twins planted) with the marker and the listing; the
    listing and the files of `carry` are then copied, base64 under markers, into one bundle file, printed
    into the log (each part checked as its own file was: the list against its hash in the log, a report
    against its signature). `import_path`: a Python row's import directories as the clean tree's probe
    plugin saw them (the test command's own interpreter, before any code of the repository); none: the
    script asks ``python`` for them before the test command."""
    rng = rng or random.SystemRandom()
    lines = script.split("\n")
    starts = [i for i, line in enumerate(lines) if START_TEST_OUTPUT in line]
    ends = [i for i, line in enumerate(lines) if END_TEST_OUTPUT in line and starts and i > starts[0]]
    if len(starts) != 1 or not ends:
        return WritesPlan(script=script, skipped="the script has no single pair of test-output markers")
    tag = f"{rng.getrandbits(64):016x}"
    folder = f"/tmp/.swe-rl-writes-{tag}"
    mark, listing, paths = f"{folder}/mark", f"{folder}/list", f"{folder}/paths"
    quiet, loud = "__swe_wf=$-; { set +x; } 2>/dev/null", 'case "$__swe_wf" in *x*) set -x ;; esac'
    code = shlex.quote(
        "import os, sys\nfor p in sys.path:\n    p = os.path.realpath(p or '.')\n"
        "    if os.path.isdir(p) and not p.startswith(('/tmp', '/proc', '/dev')): print(p)"
    )  # the interpreter the eval script put first (a conda env's `python`; Debian images: `python3`)
    ask = f"{{ python -c {code} || python3 -c {code}; }} > {paths} 2>/dev/null || true"
    if import_path:  # known: written down, no interpreter started
        ask = "printf '%s\\n' " + " ".join(map(shlex.quote, import_path)) + f" > {paths}"
    before = [quiet, f"mkdir -p {folder}", *([ask] if python else []), f": > {mark}", loud]
    root = shlex.quote(workdir)
    names = " -o ".join(f"-name {n}" for n in _PRUNED)
    find = (
        f"mapfile -t __swe_dirs < <(sort -u {paths} 2>/dev/null); "  # one word per line: spaces kept
        f'find {root} ${{__swe_dirs[@]+"${{__swe_dirs[@]}}"}} -xdev \\( {names} -o -path {root}/target '
        f"-o -path '*/node_modules/.cache' \\) -prune -o -type f \\( -newer {mark} -o -cnewer {mark} \\) "
        f"-print 2>/dev/null | sort -u | head -n 5000 > {listing}"
    )
    bundle = f"{folder}/bundle"
    pack = [f": > {bundle}"] + [
        f"[ -f {shlex.quote(p)} ] && {{ echo '--{tag}-{i}--'; base64 -w0 < {shlex.quote(p)}; echo; }} "
        f">> {bundle} 2>/dev/null || true"
        for i, p in enumerate([listing, *carry])
    ]
    show = (  # the bundle into the log, between two lines naming it (`bundle_from_log`)
        f"printf '%s %s begin\\n' '{BUNDLE_MARK}' {tag}; cat {bundle} 2>/dev/null; "
        f"printf '%s %s end\\n' '{BUNDLE_MARK}' {tag}"
    )
    after = [
        quiet,
        find,
        f"printf '%s %s %s\\n' '{WRITES_MARK}' {tag} \"$(sha256sum < {listing} | cut -d' ' -f1)\"",
        *pack,
        show,
        loud,
    ]
    start, end = starts[0], ends[0]
    out = [*lines[:start], *before, *lines[start : end + 1], *after, *lines[end + 1 :]]
    return WritesPlan(script="\n".join(out), tag=tag, listing=listing, bundle=bundle, carried=list(carry))


def bundle_from_log(log: str, plan: WritesPlan) -> tuple[str | None, str]:
    """The bundle the script printed at the end of `log` (None: no whole one, e.g. a log the fleet cut)
    and the log without it. The last pair of its lines counts: the script prints them after the test
    command's processes are gone, and nothing of the run's writes to the log after them."""
    begin, end = f"{BUNDLE_MARK} {plan.tag} begin\n", f"{BUNDLE_MARK} {plan.tag} end\n"
    if not plan.tag:
        return None, log
    start = log.rfind(begin)
    if start < 0 or (start > 0 and log[start - 1] != "\n"):
        return None, log
    stop = log.find(end, start + len(begin))
    if stop < 0 or log[stop - 1] != "\n":
        return None, log
    return log[start + len(begin) : stop], log[:start] + log[stop + len(end) :]


def unpack_bundle(text: str, plan: WritesPlan) -> dict[str, str | None]:
    """The bundle's parts: path -> text (None: the file was not there), for the listing and the carried
    files; a part that is not base64 is None (as an unreadable file)."""
    parts: dict[str, str] = {}
    name: str | None = None
    for line in text.split("\n"):
        if line.startswith(f"--{plan.tag}-") and line.endswith("--"):
            name = line[len(plan.tag) + 3 : -2]
            parts[name] = ""
        elif name is not None:
            parts[name] += line
    out: dict[str, str | None] = {}
    for i, path in enumerate([plan.listing, *plan.carried]):
        data = parts.get(str(i))
        try:
            out[path] = (
                None
                if data is None
                else base64.b64decode(data, validate=True).decode("utf-8", "surrogateescape")
            )
        except ValueError:
            out[path] = None
    return out


def read_listing(log: str, text: str | None, plan: WritesPlan) -> WrittenFiles:
    """The list's `text` (None: no file) checked against the hash printed in `log`."""
    head = f"{WRITES_MARK} {plan.tag} "
    line = next((ln for ln in log.split("\n") if ln.startswith(head)), None)
    if line is None or text is None:
        return WrittenFiles(error="no list of the files the run wrote (the listing did not run)")
    if hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest() != line[len(head) :].strip():
        return WrittenFiles(error="the list of written files does not match the hash in the log")
    return WrittenFiles(paths=[p for p in text.split("\n") if p])


def _is_source(path: str) -> bool:
    base = posixpath.basename(path)
    suffix = posixpath.splitext(base)[1].lower()
    return suffix in _PY_SUFFIXES or suffix in LANGUAGE_SUFFIXES or base in _HOOK_NAMES


def written_sources_wanted(written: WrittenFiles, workdir: str, grader_files: set[str]) -> list[str]:
    """The listed files to read back and scan: sources by suffix, not the grader's own (repo-relative
    `grader_files`), at most `MAX_FILES`."""
    root = workdir.rstrip("/") + "/"
    out = []
    for path in written.paths:
        rel = path[len(root) :] if path.startswith(root) else path
        if rel in grader_files or not _is_source(path):
            continue
        out.append(path)
    return out[:MAX_FILES]


def written_records(
    workdir: str,
    files: dict[str, tuple[bytes | None, bytes | None]],
    config: CapabilityConfig | None = None,
    unread: int = 0,
) -> list[TamperRecord]:
    """Records for the files the run wrote: `files` maps an absolute path to (the version the run started
    from or None, the bytes the run left or None when unreadable)."""
    root = workdir.rstrip("/") + "/"
    records: list[TamperRecord] = []
    changes: list[ChangedSource] = []
    for path, (before, after) in sorted(files.items()):
        rel = path[len(root) :] if path.startswith(root) else path
        base = posixpath.basename(path)
        if before is None and (base.endswith(".pth") or base in _HOOK_NAMES):
            records.append(
                TamperRecord(
                    path=rel,
                    rule="run_written_file",
                    action="voided",
                    reason=f"the test run wrote a new import hook file ({base})",
                )
            )
            continue
        if after is None:
            records.append(
                TamperRecord(
                    path=rel,
                    rule="run_written_file",
                    action="noted",
                    reason="written by the run, not readable",
                )
            )
            continue
        changes.append(changed_source(rel, before, after))
    for finding in scan_changes(changes, config).findings:
        if finding.action == "ignore":
            continue
        records.append(
            TamperRecord(
                path=finding.path,
                rule="run_written_file",
                action="voided" if finding.action == "void" else "noted",
                reason=f"written by the test run: {finding.capability} (line {finding.line}): {finding.detail}",
            )
        )
    if unread:
        records.append(
            TamperRecord(
                path="",
                rule="run_written_file",
                action="noted",
                reason=f"{unread} more written files not read",
            )
        )
    return records
