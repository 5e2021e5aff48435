"""The dashboard figures of an eval run (`swe_rl.metrics.rollout`) as a section of report.html.

The names are the ones training logs under ``rollout/swe/`` and ``eval/<dataset>/swe/``
(``docs/metrics.md``), so an eval run and a training dashboard read the same way.
"""

from __future__ import annotations

import html
from typing import Any

from swe_rl.metrics.rollout import figures, trajectories_from_rows

__all__ = ["metrics_table_html", "run_metrics"]


def run_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The figures of the finished rows of a run (one row per instance), rounded for summary.json."""
    return {k: round(v, 4) for k, v in figures(trajectories_from_rows(rows)).items()}


def metrics_table_html(metrics: dict[str, float]) -> str:
    """A compact table of the figures, grouped by their first name part (outcome, behaviour, infra, ...)."""
    if not metrics:
        return ""
    sections: dict[str, list[str]] = {}
    for name, value in metrics.items():
        section = name.split("/", 1)[0] if "/" in name else "run"
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        sections.setdefault(section, []).append(
            f'<tr><td>{html.escape(name)}</td><td class="n">{html.escape(shown)}</td></tr>'
        )
    parts = [
        f"<details><summary>{html.escape(section)} ({len(rows)})</summary><table>{''.join(rows)}</table></details>"
        for section, rows in sections.items()
    ]
    return f'<h2>Dashboard figures (docs/metrics.md)</h2><div class="metrics">{"".join(parts)}</div>'
