"""Per-instance grading artifacts a user can check a grade with: ``eval.log`` and ``report.json``.

``eval.log`` is the eval script's output (capped: head and tail kept around a marker);
``report.json`` has the verdict, every parsed test status, the FAIL_TO_PASS / PASS_TO_PASS
lists as graded, how the patch was applied (strategy and output), the grading network and
the timings. Written by eval/eval_swe.py, eval/certify.py and the slime plugin's saver.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swe_rl.grading.result import GradeResult

__all__ = ["MAX_EVAL_LOG_CHARS", "cap_log", "grade_report", "write_grade_artifacts"]

MAX_EVAL_LOG_CHARS = 2_000_000
"""eval.log keeps at most this many characters (half from the start, half from the end)."""


def cap_log(text: str, limit: int = MAX_EVAL_LOG_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut by swe-rl ...]\n{text[-half:]}"


def grade_report(grade: GradeResult, **extra: Any) -> dict[str, Any]:
    """The JSON of report.json (`extra`: timings and anything the caller knows, e.g. agent_seconds)."""
    return {
        "instance_id": grade.instance_id,
        "status": grade.status.value,
        "resolved": grade.resolved,
        "message": grade.message,
        "method": grade.method,
        "rule": grade.rule,  # the swebench 5.x rule that decided where 4.1.0 would not agree
        "FAIL_TO_PASS": grade.fail_to_pass.model_dump(),
        "PASS_TO_PASS": grade.pass_to_pass.model_dump(),
        "tests_status": grade.tests_status,
        "apply_strategy": grade.apply_strategy,
        "apply_output": grade.apply_output,
        "network": grade.network,
        "eval_seconds": grade.eval_seconds,
        "test_log_chars": len(grade.test_log),
        **extra,
    }


def write_grade_artifacts(out: Path, grade: GradeResult, **extra: Any) -> None:
    """Write ``out/eval.log`` (when tests ran) and ``out/report.json``."""
    out.mkdir(parents=True, exist_ok=True)
    if grade.test_log:
        (out / "eval.log").write_text(cap_log(grade.test_log), errors="replace")
    (out / "report.json").write_text(json.dumps(grade_report(grade, **extra), indent=1, ensure_ascii=False))
