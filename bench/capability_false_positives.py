#!/usr/bin/env python3
"""False positives of the capability scan on honest patches (SWE-bench Verified gold patches).

Reads dataset rows (a JSON list or JSONL; ``instance_id``, ``repo``, ``base_commit`` and the patch in
``patch`` or ``golden_patch``), scans every Python file of each patch as the grader would, and prints
how many patches the default configuration would void, each with why, and the findings per
capability. The data set is not part of the project: point ``--rows`` at an export of it.

Before/after contents come from a local git mirror of the repository (``--mirrors``: folders named
``owner+name`` holding a git directory ``repo``, or bare ``owner+name.git``): the base-commit file's
bytes and the patch applied to it in the file's own codec, read as the grader reads them
(``changed_source``: declared codec, BOM), exactly what the grader scans. A repository without a mirror is scanned
on **hunk fragments**: the old and the new side of every hunk, read as Python where they parse
(swe_rl/grading/scans/capabilities/fragments.py). Fragments lack the rest of the file (its imports), so
names are read as the standard modules they spell; ``--fragments`` scans every patch that way, to
compare the approximation with the mirrored files.

    python bench/capability_false_positives.py --rows verified.json --mirrors /work/.mirror
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from swe_rl.grading.scans.capabilities import (
    CapabilityConfig,
    CapabilityFinding,
    ChangedSource,
    changed_source,
    scan_changes,
    scan_source,
)
from swe_rl.grading.scans.capabilities.fragments import parseable_fragment
from swe_rl.grading.scans.capabilities.source_text import interpreter_text
from swe_rl.grading.scans.capabilities.visitor import find_sites

Hunk = tuple[int, list[str], list[str]]  # old start (1-based), old-side lines, new-side lines


def load_rows(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def select_rows(rows: list[dict], sample: int | None, agent_patches: str | None) -> list[dict]:
    """`sample` rows spread evenly over the file; with `agent_patches` (the key to put each patch under),
    one row per resolving agent patch (``resolved_by``) instead of the gold one."""
    if sample and sample < len(rows):
        rows = [rows[i * len(rows) // sample] for i in range(sample)]
    if agent_patches:
        rows = [
            {**row, "instance_id": f"{row['instance_id']}@{entry['name']}", agent_patches: entry["patch"]}
            for row in rows
            for entry in row.get("resolved_by") or []
            if isinstance(entry, dict) and entry.get("patch")
        ]
    return rows


def file_diffs(patch: str) -> dict[str, tuple[bool, list[Hunk]]]:
    """Path -> (file is new, hunks) of a unified diff (git's, or plain ``---``/``+++`` headers)."""
    files: dict[str, tuple[bool, list[Hunk]]] = {}
    hunks: list[Hunk] = []
    old: list[str] = []
    cur: list[str] = []
    new, left_old, left_new = False, 0, 0
    for line in patch.splitlines():
        if left_old > 0 or left_new > 0:  # inside a hunk: its header says how many lines
            tag, text = line[:1] or " ", line[1:]
            if tag in {" ", "-"}:
                old.append(text)
                left_old -= 1
            if tag in {" ", "+"}:
                cur.append(text)
                left_new -= 1
            continue
        if line.startswith("--- "):
            new = line.split()[1] == "/dev/null"
        elif line.startswith("+++ "):
            path = line[4:].split("\t")[0].strip()
            hunks = []
            if path != "/dev/null":
                files[path[2:] if path.startswith("b/") else path] = (new, hunks)
        elif line.startswith("@@ "):
            old_range, new_range = line.split()[1:3]
            start, _, count = old_range.lstrip("-").partition(",")
            left_old = int(count) if count else 1
            left_new = int(new_range.partition(",")[2] or 1)
            old, cur = [], []
            hunks.append((int(start), old, cur))
    return files


def apply_hunks(before: str, hunks: list[Hunk]) -> str:
    lines = before.splitlines()
    out: list[str] = []
    pos = 0
    for start, old, new in hunks:
        at = max(start - 1, 0)
        if lines[at : at + len(old)] != old:  # gold patches apply exactly; search near if offset
            found = [i for i in range(len(lines)) if lines[i : i + len(old)] == old]
            at = min(found, key=lambda i: abs(i - at)) if found else at
        out += lines[pos:at] + new
        pos = at + len(old)
    return "\n".join(out + lines[pos:]) + "\n"


def mirror_of(mirrors: Path, repo: str) -> Path | None:
    name = repo.replace("/", "+")
    for candidate in (mirrors / name / "repo", mirrors / f"{name}.git"):
        if candidate.is_dir():
            return candidate
    return None


def base_file(git_dir: Path, commit: str, path: str) -> bytes | None:
    res = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True, check=False
    )
    return res.stdout if res.returncode == 0 else None


def mirrored_change(path: str, raw: bytes | None, hunks: list[Hunk], extra: str) -> ChangedSource:
    """The file as the grader reads it: the base bytes, the patch applied in the file's own codec."""
    old = interpreter_text(raw) if raw is not None else None
    before = old.text if old and old.text is not None else (raw or b"").decode("utf-8", "replace")
    after = apply_hunks(before if raw is not None else "", hunks) + extra
    try:
        data = after.encode(old.encoding if old and old.encoding else "utf-8")
    except (UnicodeEncodeError, LookupError):
        data = after.encode("utf-8")
    return changed_source(path, raw, data)


def scan_row(
    row: dict,
    mirrors: Path | None,
    config: CapabilityConfig,
    coverage: Counter[str] | None = None,
    payload: str = "",
) -> tuple[str, list[CapabilityFinding]]:
    """(mode, findings) of one row's patch; mode is ``mirror`` or ``fragments`` (no `mirrors`: always).
    `payload` is appended to the first Python file the patch changes (the exploit check)."""
    patch = row.get("patch") or row.get("golden_patch") or ""
    git_dir = mirror_of(mirrors, row["repo"]) if mirrors else None
    findings: list[CapabilityFinding] = []
    spared: set[str] = set()
    for path, (new, hunks) in file_diffs(patch).items():
        if not path.endswith((".py", ".pyw", ".pyi")):
            continue
        extra, payload = payload, ""
        if git_dir is not None:
            raw = None if new else base_file(git_dir, row["base_commit"], path)
            change = mirrored_change(path, raw, hunks, extra)
            findings += scan_changes([change], config).findings
            if coverage is not None and change.before is not None:  # what the comparison with `before` spares
                sites = _all_sites(change.before)
                coverage["sites_before"] += len(sites)
                if any(config.action_for(site.capability) == "void" for site in sites):
                    spared.add(row["instance_id"])
        else:
            old = [] if new else [line for _, side, _ in hunks for line in side + [""]]
            cur = [line for _, _, side in hunks for line in side + [""]] + extra.splitlines()
            before_text = None if new else parseable_fragment(old)
            findings += scan_source(path, before_text, parseable_fragment(cur, coverage), config)
    if coverage is not None and spared:
        coverage["rows_spared"] += 1
    return ("mirror" if git_dir is not None else "fragments"), findings


def _all_sites(text: str) -> list:
    try:
        return find_sites(ast.parse(text))
    except (SyntaxError, ValueError):
        return []


def check_payloads(rows: list[dict], mirrors: Path | None, config: CapabilityConfig) -> None:
    """Each payload appended to every patch: it must be voided on every one (the scan's recall on real files)."""
    from tests.adversarial_patches import CAPABILITY_PAYLOADS  # run as a module from the checkout (-m)

    tests = "['tests/test_x.py::test_a']"
    print("payload appended to each patch: patches where it is voided")
    for name, (_, payload) in CAPABILITY_PAYLOADS.items():
        text = payload.format(tests=tests)
        voided = sum(
            any(f.action == "void" for f in scan_row(row, mirrors, config, payload=text)[1]) for row in rows
        )
        print(f"  {name:22} {voided}/{len(rows)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", required=True, type=Path, help="dataset rows (.json list or .jsonl)")
    p.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"), help="folder of git mirrors")
    p.add_argument(
        "--agent-patches",
        action="store_true",
        help="scan the agents' resolving patches of each row (``resolved_by``: [{name, patch}]) instead of gold",
    )
    p.add_argument(
        "--payloads",
        action="store_true",
        help="also append each threat-class-1 payload (tests/adversarial_patches.py) to every patch: "
        "how many of those the scan voids",
    )
    p.add_argument("--sample", type=int, help="scan only this many rows, spread evenly over the file")
    p.add_argument("--fragments", action="store_true", help="scan hunk fragments even where a mirror exists")
    p.add_argument("--json", type=Path, help="write every finding here")
    args = p.parse_args(argv)
    config = CapabilityConfig()
    rows = select_rows(load_rows(args.rows), args.sample, "patch" if args.agent_patches else None)
    modes: Counter[str] = Counter()
    coverage: Counter[str] = Counter()
    per_capability: Counter[tuple[str, str]] = Counter()
    voided, dump = [], {}
    for row in rows:
        mode, findings = scan_row(row, None if args.fragments else args.mirrors, config, coverage)
        modes[mode] += 1
        per_capability.update({(f.capability, f.action) for f in findings})
        dump[row["instance_id"]] = {"mode": mode, "findings": [f.model_dump() for f in findings]}
        void = [f for f in findings if f.action == "void"]
        if void:
            voided.append((row["instance_id"], mode, void))
    print(f"patches: {len(rows)} (mirror: {modes['mirror']}, fragments: {modes['fragments']})")
    if coverage["lines"]:
        share = 100 * coverage["parsed"] / coverage["lines"]
        print(f"fragments: {coverage['parsed']} of {coverage['lines']} new-side lines parsed ({share:.0f}%)")
    if coverage["sites_before"]:
        print(
            f"capability sites already in the modified files (not blamed): {coverage['sites_before']}; "
            f"patches whose files already held a voiding one: {coverage['rows_spared']}"
        )
    print(f"voided: {len(voided)} ({100 * len(voided) / max(len(rows), 1):.1f}%)")
    for instance_id, mode, void in voided:
        for f in void:
            print(f"  {instance_id} [{mode}] {f.path}:{f.line} {f.capability}: {f.detail}")
    print("patches with a finding, per capability (action):")
    for (capability, action), count in sorted(per_capability.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {capability:22} {action:6} {count}")
    if args.payloads:
        check_payloads(rows, None if args.fragments else args.mirrors, config)
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
