"""Figures of an eval run beyond the status counts: format errors per harness, step counts,
where the time went; plus their HTML for `report.html` (see `report.py`).

All read the last row per instance of ``results.jsonl``. A row written by an older run (or by
grading mini-swe-agent predictions) may miss a field; it is then left out of that figure.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["format_error_stats", "runs_html", "step_histogram", "extras_html", "time_split"]


def format_error_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Turns that did not parse into an action: totals and rates (per policy turn) overall and per harness."""

    def block(group: list[dict[str, Any]]) -> dict[str, Any]:
        steps = sum(int(r.get("steps") or 0) for r in group)
        errors = sum(int(r.get("format_errors") or 0) for r in group)
        return {
            "instances": len(group),
            "steps": steps,
            "format_errors": errors,
            "rate": round(errors / steps, 4) if steps else 0.0,
            "instances_with_errors": sum(1 for r in group if r.get("format_errors")),
            "ended_by_format_errors": sum(1 for r in group if r.get("exit_reason") == "format_errors"),
        }

    counted = [r for r in rows if r.get("format_errors") is not None]
    by_harness: dict[str, list[dict[str, Any]]] = {}
    for r in counted:
        by_harness.setdefault(str(r.get("harness") or "?"), []).append(r)
    return {**block(counted), "by_harness": {h: block(g) for h, g in sorted(by_harness.items())}}


def step_histogram(rows: list[dict[str, Any]], bins: int = 10) -> list[dict[str, Any]]:
    """Instances per step count: one bin per count up to ``bins`` distinct counts, else equal-width ranges."""
    steps = [int(r.get("steps") or 0) for r in rows]
    if not steps:
        return []
    lo, hi = min(steps), max(steps)
    width = max(1, -(-(hi - lo + 1) // bins))
    out = []
    for start in range(lo, hi + 1, width):
        end = start + width - 1
        out.append({"from": start, "to": end, "instances": sum(1 for s in steps if start <= s <= end)})
    return out


def time_split(row: dict[str, Any]) -> dict[str, float]:
    """Seconds of one instance: model (policy calls), commands (in the container), grading, other
    (container start, final diff, bookkeeping: the rest of the agent's time)."""
    model = float(row.get("policy_seconds") or 0.0)
    commands = float(row.get("exec_seconds") or 0.0)
    agent = float(row.get("agent_seconds") or 0.0)
    return {
        "model": round(model, 3),
        "commands": round(commands, 3),
        "other": round(max(0.0, agent - model - commands), 3),
        "grading": round(float(row.get("grade_seconds") or 0.0), 3),
    }


def totals_time_split(rows: list[dict[str, Any]]) -> dict[str, float]:
    out = {"model": 0.0, "commands": 0.0, "other": 0.0, "grading": 0.0}
    for r in rows:
        for k, v in time_split(r).items():
            out[k] += v
    return {k: round(v, 3) for k, v in out.items()}


# ---------------------------------------------------------------------------- HTML

SPLIT_COLORS = {"model": "#1565c0", "commands": "#2e7d32", "other": "#bdbdbd", "grading": "#ef6c00"}


def split_bar(row: dict[str, Any]) -> str:
    """A small stacked bar of one instance's time (title: the seconds)."""
    split = time_split(row)
    total = sum(split.values())
    if total <= 0:
        return ""
    parts = "".join(
        f'<div style="width:{100 * v / total:.1f}%;background:{SPLIT_COLORS[k]}"></div>'
        for k, v in split.items()
        if v > 0
    )
    title = html.escape(" · ".join(f"{k} {v:.1f}s" for k, v in split.items()))
    return f'<div class="split" title="{title}">{parts}</div>'


def _histogram_html(hist: list[dict[str, Any]]) -> str:
    if not hist:
        return ""
    top = max(b["instances"] for b in hist) or 1
    cols = []
    for b in hist:
        label = str(b["from"]) if b["from"] == b["to"] else f"{b['from']}-{b['to']}"
        cols.append(
            f'<div class="hcol" title="{b["instances"]} instance(s)"><div class="hbar" '
            f'style="height:{80 * b["instances"] / top:.0f}px"></div><div class="hl">{label}</div>'
            f'<div class="hn">{b["instances"]}</div></div>'
        )
    return f'<h2>Steps per instance</h2><div class="hist">{"".join(cols)}</div>'


def _format_html(stats: dict[str, Any]) -> str:
    by = stats.get("by_harness") or {}
    if not by:
        return ""
    rows = "".join(
        f'<tr><td>{html.escape(h)}</td><td class="n">{s["instances"]}</td><td class="n">{s["steps"]}</td>'
        f'<td class="n">{s["format_errors"]}</td><td class="n">{100 * s["rate"]:.1f}%</td>'
        f'<td class="n">{s["instances_with_errors"]}</td><td class="n">{s["ended_by_format_errors"]}</td></tr>'
        for h, s in by.items()
    )
    return (
        '<h2>Format errors (turns that did not parse into an action)</h2><table class="small"><tr><th>harness</th>'
        "<th>instances</th><th>turns</th><th>format errors</th><th>rate per turn</th><th>instances with any</th>"
        f"<th>ended by them</th></tr>{rows}</table>"
    )


def runs_html(runs: list[dict[str, Any]]) -> str:
    if len(runs) < 2 and not any(r.get("interrupted") for r in runs):
        return ""
    body = "".join(
        f'<tr><td>{html.escape(str(r.get("started")))}</td><td class="n">{r["wall_seconds"]:.1f}</td>'
        f'<td class="n">{r.get("finished", 0)}</td><td>{html.escape(r.get("interrupted") or "completed")}</td></tr>'
        for r in runs
    )
    return (
        '<h2>Runs (first run and resumes)</h2><table class="small"><tr><th>started</th><th>wall s</th>'
        f"<th>instances finished</th><th>ended</th></tr>{body}</table>"
    )


def extras_html(summary: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Warnings, runs, format errors, step histogram and the run's time split, for report.html."""
    notes = list(summary.get("warnings") or [])
    if summary.get("interrupted"):
        notes.insert(
            0,
            f"Interrupted ({summary['interrupted']}): {summary.get('finished', 0)} of "
            f"{summary.get('total', 0)} instances finished; run the same command again to resume.",
        )
    warnings = "".join(f'<div class="warn">{html.escape(w)}</div>' for w in notes)
    split = summary.get("time_split") or totals_time_split(rows)
    total = sum(split.values()) or 1.0
    legend = " ".join(
        f'<span class="chip" style="background:{SPLIT_COLORS[k]}">{k} {v:.1f}s '
        f"({100 * v / total:.0f}%)</span>"
        for k, v in split.items()
    )
    return (
        warnings
        + runs_html(summary.get("runs") or [])
        + _format_html(summary.get("format_errors") or {})
        + _histogram_html(summary.get("step_histogram") or [])
        + f"<h2>Where the time went</h2><div>{legend}</div>"
    )


CSS = """.split{display:flex;height:12px;width:10em;border-radius:3px;overflow:hidden;background:#eee}
.hist{display:flex;align-items:flex-end;gap:4px;margin:.5em 0}.hcol{text-align:center;font-size:.8em;min-width:2.5em}
.hbar{background:#1565c0;border-radius:3px 3px 0 0}.hl{color:#666}.hn{font-weight:600}
table.small{width:auto}h2{font-size:1.1em;margin-top:1.4em}
.warn{background:#fff3e0;border:1px solid #ef6c00;border-radius:6px;padding:.5em 1em;margin:.5em 0}"""
