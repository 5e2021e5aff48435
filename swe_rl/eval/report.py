"""Run summary (summary.json) and a self-contained HTML report of an eval run.

Both read `results.jsonl` (the last row per instance counts), so they can be
rebuilt for any run, finished or interrupted:

    swe-eval-report output/eval_runs/my_run          # or: python eval/report.py DIR
"""

from __future__ import annotations

import argparse
import html
import json
import statistics
from pathlib import Path
from typing import Any

from swe_rl.eval import report_extras, run_history
from swe_rl.eval.report_metrics import metrics_table_html, run_metrics
from swe_rl.metrics.env_errors import env_error_kind
from swe_rl.metrics.integrity import integrity_rates

STATUSES = ["resolved", "unresolved", "no_patch", "patch_apply_failed", "eval_timeout", "env_error"]
COLORS = {
    "resolved": "#2e7d32",
    "unresolved": "#c62828",
    "no_patch": "#9e9e9e",
    "patch_apply_failed": "#ef6c00",
    "eval_timeout": "#6a1b9a",
    "env_error": "#37474f",
}


def last_rows(results_path: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            try:
                row = json.loads(line)
                rows[row["instance_id"]] = row
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return rows


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 3) if values else 0.0


def _apply_label(row: dict[str, Any]) -> str:
    """How a row's patch went in: a strategy, ``failed``, ``none`` (tests ran without a patch), ``not graded``."""
    if row.get("apply_strategy"):
        return str(row["apply_strategy"])
    if row.get("status") == "patch_apply_failed":
        return "failed"
    return "none" if row.get("eval_log") else "not graded"


def _counts(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def summarize(
    results_path: Path,
    instance_ids: list[str] | None = None,
    meta: dict[str, Any] | None = None,
    *,
    wall_seconds: float | None = None,
    load_errors: int = 0,
) -> dict[str, Any]:
    """Rates are over the instances of the run (the ones not finished yet count as missing)."""
    rows = last_rows(results_path)
    ids = instance_ids if instance_ids is not None else list(rows)
    done = [rows[i] for i in ids if i in rows]
    total = len(ids)
    counts = {s: sum(1 for r in done if r["status"] == s) for s in STATUSES}

    def rate(n: int) -> float:
        return round(n / total, 4) if total else 0.0

    return {
        "total": total,
        "finished": len(done),
        "missing": total - len(done),
        "resolved": counts["resolved"],
        "resolve_rate": rate(counts["resolved"]),
        "no_patch_rate": rate(counts["no_patch"]),
        "patch_apply_failed_rate": rate(counts["patch_apply_failed"]),
        "eval_timeout_rate": rate(counts["eval_timeout"]),
        "error_rate": rate(counts["env_error"]),
        "status_counts": counts,
        "env_error_kinds": _counts(
            env_error_kind(r.get("error") or r.get("grade_message"))
            for r in done
            if r["status"] == "env_error"
        ),
        "exit_reasons": {
            k: sum(1 for r in done if r.get("exit_reason") == k)
            for k in sorted({r["exit_reason"] for r in done if r.get("exit_reason")})
        },
        "avg_steps": _mean([r.get("steps", 0) for r in done]),
        "avg_prompt_tokens": _mean([r.get("prompt_tokens", 0) for r in done]),
        "avg_completion_tokens": _mean([r.get("completion_tokens", 0) for r in done]),
        "avg_agent_seconds": _mean([r.get("agent_seconds", 0.0) for r in done]),
        "avg_grade_seconds": _mean([r.get("grade_seconds", 0.0) for r in done]),
        **run_history.summary_fields(
            results_path.parent, wall_seconds
        ),  # wall_seconds of all runs, runs, interrupted
        "format_errors": report_extras.format_error_stats(done),
        "step_histogram": report_extras.step_histogram(done),
        "time_split": report_extras.totals_time_split(done),
        "load_errors": load_errors,
        "meta": meta or {},
        "resolved_ids": sorted(r["instance_id"] for r in done if r["status"] == "resolved"),
        "apply_strategies": _counts(_apply_label(r) for r in done),
        "flaky_only": sum(1 for r in done if r.get("flaky_only")),
        "integrity": integrity_rates(done),
        "by_language": _by_language(done),
        "metrics": run_metrics(done),
    }


def _by_language(done: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Finished, resolved and resolve rate per ``repo_language`` (rows without one: python)."""
    out: dict[str, dict[str, Any]] = {}
    for row in done:
        part = out.setdefault(str(row.get("repo_language") or "python"), {"finished": 0, "resolved": 0})
        part["finished"] += 1
        part["resolved"] += row.get("status") == "resolved"
    for part in out.values():
        part["resolve_rate"] = round(part["resolved"] / part["finished"], 4)
    return dict(sorted(out.items()))


def _grade_links(run_dir: Path, row: dict[str, Any]) -> str:
    """Links to the grade's own artifacts (eval.log, report.json) where they exist, and its apply strategy."""
    d = row.get("dir", "")
    links = "".join(
        f' <a href="{html.escape(d)}/{name}">{label}</a>'
        for name, label in (("eval.log", "log"), ("report.json", "report"))
        if d and (run_dir / d / name).exists()
    )
    extra = [row.get("apply_strategy") or ""] + (["flaky-only"] if row.get("flaky_only") else [])
    tags = " ".join(html.escape(t) for t in extra if t)
    return links + (f' <span class="note">{tags}</span>' if tags else "")


def write_report(run_dir: Path, summary: dict[str, Any]) -> Path:
    """A single HTML page: headline rates, a status bar, and a table linking each instance's artifacts."""
    rows = last_rows(run_dir / "results.jsonl")
    total = max(1, summary["total"])
    bar = "".join(
        f'<div title="{s}: {n}" style="width:{100 * n / total:.2f}%;background:{COLORS[s]}"></div>'
        for s, n in summary["status_counts"].items()
        if n
    )
    legend = " ".join(
        f'<span class="chip" style="background:{COLORS[s]}">{s} {n}</span>'
        for s, n in summary["status_counts"].items()
    )
    cards = [
        ("resolve rate", f"{100 * summary['resolve_rate']:.1f}%"),
        ("resolved", f"{summary['resolved']} / {summary['total']}"),
        ("no patch", f"{100 * summary['no_patch_rate']:.1f}%"),
        ("patch apply failed", f"{100 * summary['patch_apply_failed_rate']:.1f}%"),
        ("env errors", f"{100 * summary['error_rate']:.1f}%"),
        ("avg steps", f"{summary['avg_steps']:.1f}"),
        (
            "avg tokens (in/out)",
            f"{summary['avg_prompt_tokens']:.0f} / {summary['avg_completion_tokens']:.0f}",
        ),
        (
            "apply strategies",
            ", ".join(f"{k} {v}" for k, v in summary.get("apply_strategies", {}).items()) or "-",
        ),
        ("avg agent / grade s", f"{summary['avg_agent_seconds']:.1f} / {summary['avg_grade_seconds']:.1f}"),
        ("format errors / turn", f"{100 * (summary.get('format_errors') or {}).get('rate', 0.0):.1f}%"),
        ("wall time", f"{summary.get('wall_seconds') or 0:.0f} s"),
    ]
    cards += _integrity_cards(summary.get("integrity") or {})
    card_html = "".join(
        f'<div class="card"><div class="v">{html.escape(v)}</div><div class="k">{html.escape(k)}</div></div>'
        for k, v in cards
    )
    table = []
    for iid in sorted(rows):
        r = rows[iid]
        d = html.escape(r.get("dir", ""))
        note = html.escape(r.get("error") or r.get("grade_message") or "")
        table.append(
            f'<tr><td>{html.escape(iid)}</td><td><span class="chip" style="background:{COLORS.get(r["status"], "#000")}">'
            f"{html.escape(r['status'])}</span></td><td>{html.escape(str(r.get('exit_reason', '')))}</td>"
            f'<td class="n">{r.get("steps", 0)}</td><td class="n">{r.get("prompt_tokens", 0)}/{r.get("completion_tokens", 0)}</td>'
            f'<td class="n">{r.get("agent_seconds", 0):.1f}</td><td class="n">{r.get("grade_seconds", 0):.1f}</td>'
            f"<td>{report_extras.split_bar(r)}</td>"
            f'<td><a href="{d}/traj.json">traj</a> <a href="{d}/patch.diff">patch</a>{_grade_links(run_dir, r)}</td>'
            f'<td class="note">{html.escape(_integrity_cell(r))}</td><td class="note">{note}</td></tr>'
        )
    meta = summary.get("meta", {})
    meta_line = " · ".join(
        f"{html.escape(str(k))}: <b>{html.escape(str(v))}</b>"
        for k, v in meta.items()
        if v is not None and k != "started"
    )
    metrics_html = metrics_table_html(summary.get("metrics") or {})
    title = f"SWE eval: {meta.get('model', '?')} ({summary['resolved']}/{summary['total']} resolved)"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>
body{{font-family:system-ui,sans-serif;margin:2em;color:#222}} h1{{font-size:1.4em}}
.cards{{display:flex;flex-wrap:wrap;gap:.8em;margin:1em 0}} .card{{border:1px solid #ddd;border-radius:8px;padding:.7em 1em;min-width:9em}}
.meta{{color:#555;font-size:.9em}} .card .v{{font-size:1.5em;font-weight:600}} .card .k{{color:#666;font-size:.85em}}
.bar{{display:flex;height:28px;border-radius:6px;overflow:hidden;border:1px solid #ccc;margin:.5em 0}}
.chip{{color:#fff;border-radius:10px;padding:1px 8px;font-size:.85em;white-space:nowrap}}
table{{border-collapse:collapse;width:100%;margin-top:1em}} td,th{{border-bottom:1px solid #eee;padding:4px 8px;text-align:left}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}} td.note{{color:#666;font-size:.85em;max-width:30em}}
{report_extras.CSS}
</style></head><body><h1>{html.escape(title)}</h1>
<div class="meta">{meta_line}</div>
<div class="cards">{card_html}</div><div class="bar">{bar}</div><div>{legend}</div>
{report_extras.extras_html(summary, list(rows.values()))}
{metrics_html}
<table><tr><th>instance</th><th>status</th><th>exit</th><th>steps</th><th>tokens in/out</th><th>agent s</th><th>grade s</th><th>time: model / commands / other / grading</th><th>files</th><th>integrity</th><th>note</th></tr>
{"".join(table)}</table></body></html>"""
    out = run_dir / "report.html"
    out.write_text(page)
    return out


def _integrity_cards(rates: dict[str, Any]) -> list[tuple[str, str]]:
    if not rates:
        return []
    return [
        ("tamper rate", f"{100 * rates['tamper_rate']:.1f}%"),
        (
            "voided / canary tripped / capability flagged",
            f"{100 * rates.get('voided_rate', 0.0):.1f}% / {100 * rates.get('canary_trip_rate', 0.0):.1f}%"
            f" / {100 * rates.get('capability_flag_rate', 0.0):.1f}%",
        ),
        ("flag rate", f"{100 * rates['flag_rate']:.1f}%"),
        (
            "official / integrity resolved",
            f"{100 * rates['official_resolve_rate']:.1f}% / {100 * rates['integrity_resolve_rate']:.1f}%",
        ),
        ("resolved only officially", str(rates["resolved_only_officially"])),
    ]


def _integrity_cell(row: dict[str, Any]) -> str:
    """Tamper rules, monitor flags, and the official verdict when it differs from ours."""
    parts = []
    if row.get("tamper_rules"):
        parts.append("tamper: " + ", ".join(row["tamper_rules"]))
    if row.get("flags"):
        parts.append("flags: " + ", ".join(f"{k}×{v}" for k, v in row["flags"].items()))
    official = row.get("official_status")
    if official and official != row.get("status"):
        parts.append(f"official: {official}")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Rebuild summary.json and report.html of an eval run from its results."
    )
    p.add_argument("run_dir", type=Path, help="the run's output directory (holds results.jsonl)")
    run_dir = p.parse_args(argv).run_dir
    meta = {}
    if (run_dir / "run.json").exists():
        meta = json.loads((run_dir / "run.json").read_text())
    summary = summarize(run_dir / "results.jsonl", meta=meta)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(write_report(run_dir, summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
