"""Compare two eval runs instance by instance (our eval, mini-swe-agent graded by us, or one of each).

    python eval/compare_runs.py output/eval_runs/qwen3-ours output/minisweagent_runs/qwen3-mini
    python eval/compare_runs.py RUN_A RUN_B --json          # the same, machine-readable

A run is a directory with ``results.jsonl`` (as written by ``eval/eval_swe.py`` and
``eval/grade_predictions.py``) or the file itself. Prints both runs' headline rates (resolve,
no-patch, patch-apply-failed, env-error) over their own instances and over the instances they
share, the resolved overlap, and every shared instance whose status differs. Exit code 0
whatever the difference; 2 when a run cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from swe_rl.eval.report import last_rows, summarize

RATES = [
    ("resolve_rate", "resolve rate"),
    ("no_patch_rate", "no-patch rate"),
    ("patch_apply_failed_rate", "patch-apply-failed rate"),
    ("error_rate", "env-error rate"),
]


def results_path(run: Path) -> Path:
    path = run / "results.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise FileNotFoundError(
            f"{run}: no results.jsonl (grade mini-swe-agent runs with eval/grade_predictions.py)"
        )
    return path


def run_label(path: Path) -> str:
    """``model (harness)`` from the run's run.json, when there is one."""
    info_path = path.parent / "run.json"
    try:
        info = json.loads(info_path.read_text())
    except (OSError, json.JSONDecodeError):
        return path.parent.name
    harness = info.get("harness") or "swe-rl eval"
    return f"{info.get('model', '?')} ({harness})"


def compare(run_a: Path, run_b: Path) -> dict[str, Any]:
    pa, pb = results_path(run_a), results_path(run_b)
    rows_a, rows_b = last_rows(pa), last_rows(pb)
    common = sorted(set(rows_a) & set(rows_b))
    res_a = {i for i in common if rows_a[i]["status"] == "resolved"}
    res_b = {i for i in common if rows_b[i]["status"] == "resolved"}
    return {
        "a": {
            "path": str(pa.parent),
            "label": run_label(pa),
            "all": summarize(pa),
            "common": summarize(pa, common),
        },
        "b": {
            "path": str(pb.parent),
            "label": run_label(pb),
            "all": summarize(pb),
            "common": summarize(pb, common),
        },
        "common": len(common),
        "only_in_a": sorted(set(rows_a) - set(rows_b)),
        "only_in_b": sorted(set(rows_b) - set(rows_a)),
        "both_resolved": len(res_a & res_b),
        "only_a_resolved": sorted(res_a - res_b),
        "only_b_resolved": sorted(res_b - res_a),
        "neither_resolved": len(common) - len(res_a | res_b),
        "status_differs": [
            {"instance_id": i, "a": rows_a[i]["status"], "b": rows_b[i]["status"]}
            for i in common
            if rows_a[i]["status"] != rows_b[i]["status"]
        ],
    }


def _pct(x: float) -> str:
    return f"{100 * x:6.1f}%"


def render(c: dict[str, Any]) -> str:
    a, b = c["a"], c["b"]
    lines = [f"A: {a['path']}  {a['label']}", f"B: {b['path']}  {b['label']}", ""]
    head = f"{'':26}{'A (own)':>10}{'B (own)':>10}   {'A (common)':>11}{'B (common)':>11}"
    lines.append(head)
    lines.append(
        f"{'instances':26}{a['all']['total']:>10}{b['all']['total']:>10}   {c['common']:>11}{c['common']:>11}"
    )
    for key, name in RATES:
        lines.append(
            f"{name:26}{_pct(a['all'][key]):>10}{_pct(b['all'][key]):>10}   "
            f"{_pct(a['common'][key]):>11}{_pct(b['common'][key]):>11}"
        )
    lines += [
        "",
        (
            f"shared instances: {c['common']}; resolved by both: {c['both_resolved']}, "
            f"only A: {len(c['only_a_resolved'])}, only B: {len(c['only_b_resolved'])}, "
            f"neither: {c['neither_resolved']}"
        ),
    ]
    if c["only_in_a"] or c["only_in_b"]:
        lines.append(
            f"only in A: {len(c['only_in_a'])} instances; only in B: {len(c['only_in_b'])} instances"
        )
    if c["status_differs"]:
        width = max(len(d["instance_id"]) for d in c["status_differs"])
        lines += ["", f"status differs on {len(c['status_differs'])} shared instances (A -> B):"]
        lines += [f"  {d['instance_id']:<{width}}  {d['a']} -> {d['b']}" for d in c["status_differs"]]
    else:
        lines += ["", "every shared instance has the same status in both runs"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Compare two eval runs instance by instance")
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = p.parse_args(argv)
    try:
        c = compare(args.run_a, args.run_b)
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for side in ("a", "b"):
            for part in ("all", "common"):
                c[side][part].pop("meta", None)
        print(json.dumps(c, indent=1))
    else:
        print(render(c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
