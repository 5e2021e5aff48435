#!/usr/bin/env python3
"""False positives of the Go, JavaScript/TypeScript and Rust capability scan on honest patches.

Reads Multi-SWE-bench rows (JSONL: ``org``, ``repo``, ``base.sha``, the patch in ``fix_patch``; or
SWE-bench-style ``repo``, ``base_commit``, ``patch``) and scans every Go/JS/TS/Rust file of each patch
as the grader would: the base-commit file from a local git mirror (``--mirrors``: folders
``owner+name/repo``) and the patch applied to it. Rows whose repository has no mirror are counted and
skipped (a hunk is not a whole file: the parsers need one). Prints the patches the default
configuration would void, each with why, and the findings per capability. The data set is not part
of the project.

    python bench/language_scan_false_positives.py --rows 'msb/*.jsonl' --mirrors /work/.mirror
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import posixpath
from collections import Counter
from pathlib import Path

from swe_rl.grading.scans.capabilities import CapabilityFinding
from swe_rl.grading.scans.capabilities.other_languages import LANGUAGE_SUFFIXES
from swe_rl.grading.scans.capabilities.scan import scan_language_source

# the capability bench's row and mirror helpers (run as a script: bench/ is on sys.path; imported: bench.*)
_cfp = importlib.import_module(
    f"{__package__}.capability_false_positives" if __package__ else "capability_false_positives"
)
apply_hunks, base_file, file_diffs, mirror_of = (
    _cfp.apply_hunks,
    _cfp.base_file,
    _cfp.file_diffs,
    _cfp.mirror_of,
)


def row_fields(row: dict) -> tuple[str, str, str, str]:
    """(instance id, owner/name, base commit, patch) of a Multi-SWE-bench or SWE-bench row."""
    if "fix_patch" in row:
        repo = f"{row['org']}/{row['repo']}"
        iid = row.get("instance_id") or f"{row['org']}__{row['repo']}-{row.get('number')}"
        return iid, repo, row["base"]["sha"], row["fix_patch"]
    return row["instance_id"], row["repo"], row["base_commit"], row.get("patch") or ""


def scan_row(row: dict, mirrors: Path) -> tuple[str, list[CapabilityFinding], int]:
    """(mode, findings, files scanned): mode ``mirror`` or ``no_mirror`` (skipped)."""
    _, repo, base, patch = row_fields(row)
    git_dir = mirror_of(mirrors, repo)
    if git_dir is None:
        return "no_mirror", [], 0
    findings: list[CapabilityFinding] = []
    scanned = 0
    for path, (new, hunks) in file_diffs(patch).items():
        if posixpath.splitext(path)[1].lower() not in LANGUAGE_SUFFIXES:
            continue
        raw = None if new else base_file(git_dir, base, path)
        before = raw.decode("utf-8", "replace") if raw is not None else None
        after = apply_hunks(before or "", hunks)
        findings += scan_language_source(path, before, after)
        scanned += 1
    return "mirror", findings, scanned


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", required=True, help="JSONL file(s) of rows (a glob)")
    p.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"), help="folder of git mirrors")
    args = p.parse_args(argv)
    rows = []
    for name in sorted(glob.glob(args.rows)):
        for line in Path(name).read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a Git LFS pointer or a blank line
    modes: Counter[str] = Counter()
    per_language: Counter[str] = Counter()
    per_capability: Counter[tuple[str, str]] = Counter()
    voided: list[tuple[str, CapabilityFinding]] = []
    files = 0
    for row in rows:
        mode, findings, scanned = scan_row(row, args.mirrors)
        modes[mode] += 1
        files += scanned
        if mode != "mirror":
            continue
        iid = row_fields(row)[0]
        suffixes = {posixpath.splitext(path)[1].lower() for path in file_diffs(row_fields(row)[3])}
        languages = {LANGUAGE_SUFFIXES[s] for s in suffixes if s in LANGUAGE_SUFFIXES}
        per_language.update(languages)
        per_capability.update({(f.capability, f.action) for f in findings})
        voided += [(iid, f) for f in findings if f.action == "void"]
    scanned_rows = modes["mirror"]
    voided_rows = len({iid for iid, _ in voided})
    print(
        f"rows: {len(rows)} (mirror: {scanned_rows}, no mirror: {modes['no_mirror']}); files scanned: {files}"
    )
    print("patches per language: " + ", ".join(f"{k} {v}" for k, v in sorted(per_language.items())))
    rate = 100 * voided_rows / scanned_rows if scanned_rows else 0.0
    print(f"voided: {voided_rows} ({rate:.1f}%)")
    for iid, f in voided:
        print(f"  {iid} {f.path}:{f.line} {f.capability}: {f.detail}")
    print("patches with a finding, per capability (action):")
    for (capability, action), count in sorted(per_capability.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {capability:22} {action:6} {count}")


if __name__ == "__main__":
    main()
