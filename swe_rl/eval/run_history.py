"""Every invocation of a run directory (first run and each resume), so its summary adds up.

    history = RunHistory(run_dir, fresh=args.no_resume)   # --no-resume starts the history over
    history.begin(command="python eval/eval_swe.py ...")
    ...
    history.end(finished=3, interrupted="SIGINT")          # one line appended to runs.jsonl

`summary_fields(run_dir)` gives what `summary.json` carries: ``wall_seconds`` (all runs
together), ``runs`` (one entry per invocation: started, wall_seconds, instances finished,
how it ended) and ``interrupted`` (how the last run ended, None when it completed).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["RunHistory", "read_runs", "summary_fields"]

FILE = "runs.jsonl"


class RunHistory:
    """Appends one row per invocation to ``<run_dir>/runs.jsonl``."""

    def __init__(self, run_dir: Path, *, fresh: bool = False) -> None:
        self.path = Path(run_dir) / FILE
        if fresh and self.path.exists():
            self.path.unlink()
        self._t0 = time.monotonic()
        self._started = time.time()
        self._command: str | None = None

    def begin(self, command: str | None = None) -> None:
        self._t0, self._started, self._command = time.monotonic(), time.time(), command

    def end(self, *, finished: int, interrupted: str | None = None) -> dict[str, Any]:
        row = {
            "started": datetime.fromtimestamp(self._started, timezone.utc).isoformat(timespec="seconds"),
            "wall_seconds": round(time.monotonic() - self._t0, 3),
            "finished": finished,
            "interrupted": interrupted,
            "command": self._command,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        return row


def read_runs(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / FILE
    runs = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line of a killed run
            if isinstance(row, dict) and isinstance(row.get("wall_seconds"), (int, float)):
                runs.append(row)
    return runs


def summary_fields(run_dir: Path, wall_seconds: float | None = None) -> dict[str, Any]:
    """Totals over every recorded run; without a history, ``wall_seconds`` as given."""
    runs = read_runs(run_dir)
    if not runs:
        return {
            "wall_seconds": round(wall_seconds, 3) if wall_seconds is not None else None,
            "runs": [],
            "interrupted": None,
        }
    return {
        "wall_seconds": round(sum(r["wall_seconds"] for r in runs), 3),
        "runs": runs,
        "interrupted": runs[-1].get("interrupted"),
    }
