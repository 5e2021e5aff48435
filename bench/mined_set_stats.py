"""What the mined set (data/mined_tasks/) is made of, beside SWE-bench's published figures.

    python3 bench/mined_set_stats.py [--rows data/mined_tasks/instances.jsonl] [--markdown] [--write-docs]

Prints the yield per repository (commits looked at → candidates → certified, how many of those have
a dependency environment (``env_image``), and the drops by stage, from the set's drops ledger) and the distributions of the gold patch's size (lines added
plus lines removed, diff headers left out), the files it touches, and the FAIL_TO_PASS and
PASS_TO_PASS counts: mean, median, 90th percentile and max, per language and overall. With
``--markdown`` the same as Markdown tables; ``--write-docs`` puts those in docs/datasets.md ("The
mined set", between its ``mined-set-tables`` markers; a test checks they are the set's).

SWE-bench's figures are the *published* ones (never recomputed here: the dataset is not on this
machine): the SWE-bench paper's Table 1 (Jimenez et al., ICLR 2024; the full test set of 2,294
tasks: means and maxima) and, for Verified's 500 tasks, the share of single-file gold patches
published by an analysis of the set (429 of 500). A cell no publication gives is "n/p".
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SET_DIR = ROOT / "data/mined_tasks"

PUBLISHED = {
    "lines": {"mean": 32.8, "max": 5888},
    "files": {"mean": 1.7, "max": 31},
    "fail_to_pass": {"mean": 9.1, "max": 1633},
    "tests": {"mean": 120.8, "max": 9459},
}
"""SWE-bench (full test set, 2,294 tasks), Table 1 of the paper: gold patch lines and files edited,
FAIL_TO_PASS tests and all tests (FAIL_TO_PASS + PASS_TO_PASS) per task."""
VERIFIED_SINGLE_FILE = (429, 500)
"""SWE-bench Verified: tasks whose gold patch edits one file, of all (published analysis)."""
STAGES = ("split", "policy", "env", "build", "validate", "certify")
DOCS = ROOT / "docs/datasets.md"
BEGIN, END = (
    "<!-- mined-set-tables: python3 bench/mined_set_stats.py --markdown -->",
    "<!-- /mined-set-tables -->",
)


def patch_size(patch: str) -> tuple[int, int]:
    """(lines added + removed, files touched) of a unified diff."""
    lines = files = 0
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            files += 1
        elif line.startswith(("+++ ", "--- ")):
            continue
        elif line.startswith(("+", "-")):
            lines += 1
    return lines, files


def _count(value: str | list[str]) -> int:
    return len(json.loads(value) if isinstance(value, str) else value)


def measures(row: dict) -> dict[str, int]:
    """The four quantities of one row (and their sum of tests)."""
    lines, files = patch_size(row["patch"])
    f2p, p2p = _count(row["FAIL_TO_PASS"]), _count(row["PASS_TO_PASS"])
    return {"lines": lines, "files": files, "fail_to_pass": f2p, "pass_to_pass": p2p, "tests": f2p + p2p}


def distribution(values: list[int]) -> dict[str, float]:
    """mean, median, 90th percentile (nearest rank) and max; zeros for no values."""
    if not values:
        return {"mean": 0.0, "median": 0.0, "p90": 0.0, "max": 0.0}
    ranked = sorted(values)
    p90 = ranked[max(0, -(-len(ranked) * 9 // 10) - 1)]
    return {
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "p90": p90,
        "max": ranked[-1],
    }


def yield_per_repo(rows: list[dict], drops: list[dict]) -> dict[str, Counter[str]]:
    """Per repository: commits looked at, candidates (past the split), certified, drops per stage."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        out[row["repo"]]["certified"] += 1
        out[row["repo"]]["with deps"] += bool(row.get("env_image"))
    for drop in drops:
        out[drop["repo"]][drop["stage"]] += 1
    for counts in out.values():
        counts["looked"] = counts["certified"] + sum(counts[s] for s in STAGES)
        counts["candidates"] = counts["looked"] - counts["split"]
    return dict(sorted(out.items()))


def _read(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def _fmt(x: float) -> str:
    return f"{x:.1f}" if x != int(x) else str(int(x))


def report(
    rows: list[dict], drops: list[dict], *, markdown: bool, pending: dict[str, int] | None = None
) -> str:
    """The yield table and the distributions table, as text or as Markdown tables."""
    sep = " | "
    out = []
    langs = {r["repo"]: r.get("language", "?") for r in rows}
    head = [
        "repository",
        "language",
        "commits",
        "candidates",
        "certified",
        "with deps",
        "yield",
        *[f"{s} drops" for s in STAGES],
        "pending",
    ]
    out.append(sep.join(head))
    if markdown:
        out.append(sep.join("---" for _ in head))
    tot: Counter[str] = Counter()
    for repo, c in yield_per_repo(rows, drops).items():
        tot.update(c)
        share = f"{100 * c['certified'] / c['candidates']:.0f}% of candidates" if c["candidates"] else "-"
        cells = [
            repo,
            langs.get(repo, "-"),
            c["looked"],
            c["candidates"],
            c["certified"],
            c["with deps"],
            share,
        ]
        out.append(sep.join(str(x) for x in [*cells, *(c[s] for s in STAGES), (pending or {}).get(repo, 0)]))
    out.append(sep.join(str(x) for x in ["**all**" if markdown else "all", len(set(langs.values())), tot["looked"],
                                         tot["candidates"], tot["certified"], tot["with deps"], "",
                                         *(tot[s] for s in STAGES),
                                         sum((pending or {}).values())]))  # fmt: skip
    out.append("")
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[row.get("language", "?")].append(row)
    groups = {**dict(sorted(groups.items())), f"mined set ({len(rows)})": rows}
    head = ["quantity", *groups, "SWE-bench (published, mean / max)"]
    out.append(sep.join(head))
    if markdown:
        out.append(sep.join("---" for _ in head))
    names = {"lines": "gold patch lines (+/-)", "files": "files touched", "fail_to_pass": "FAIL_TO_PASS tests",
             "pass_to_pass": "PASS_TO_PASS tests", "tests": "tests (F2P + P2P)"}  # fmt: skip
    for key, name in names.items():
        cells = []
        for group in groups.values():
            d = distribution([measures(r)[key] for r in group])
            cells.append(f"{_fmt(d['mean'])} / {_fmt(d['median'])} / {_fmt(d['p90'])} / {_fmt(d['max'])}")
        pub = PUBLISHED.get(key)
        cells.append(f"{_fmt(pub['mean'])} / {_fmt(pub['max'])}" if pub else "n/p")
        out.append(sep.join([name, *cells]))
    single = sum(1 for r in rows if measures(r)["files"] == 1)
    share = f"{single} of {len(rows)} ({100 * single / len(rows):.0f}%)" if rows else "-"
    n, of = VERIFIED_SINGLE_FILE
    out.append(sep.join(["single-file gold patches", *([""] * (len(groups) - 1)), share,
                         f"Verified: {n} of {of} ({100 * n / of:.1f}%)"]))  # fmt: skip
    out.append("")
    out.append(
        "cells: mean / median / p90 / max per task; with deps: rows whose task image is built on a "
        "dependency environment (the row's env_image; the others on the toolchain image); pending: "
        "validated, not certified when the run was cut"
    )
    if markdown:
        out = [f"| {ln} |" if sep in ln else ln for ln in out]
    return "\n".join(out)


def with_tables(doc: str, tables: str) -> str:
    """``doc`` with ``tables`` between its markers; ValueError when the markers are missing."""
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the markers {BEGIN!r} and {END!r} are not in the document")
    return f"{head}{BEGIN}\n{tables}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=Path, default=SET_DIR / "instances.jsonl")
    ap.add_argument("--drops", type=Path, default=None, help="default: drops.jsonl beside --rows")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument(
        "--write-docs", action="store_true", help=f"write the tables into {DOCS.relative_to(ROOT)}"
    )
    args = ap.parse_args(argv)
    rows = _read(args.rows)
    if not rows:
        ap.error(f"no rows in {args.rows}")
    drops = _read(args.drops or args.rows.with_name("drops.jsonl"))
    pending = {r["repo"]: int(r.get("pending", 0)) for r in _read(args.rows.with_name("runs.jsonl"))}
    if args.write_docs:
        DOCS.write_text(with_tables(DOCS.read_text(), report(rows, drops, markdown=True, pending=pending)))
        return 0
    print(report(rows, drops, markdown=args.markdown, pending=pending))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
