#!/usr/bin/env python3
"""Cost of reading a test log: the project's parsers and rules vs swebench 5.x's own functions.

Both grade the same logs in the same run (5.x is the baseline): the recorded logs of
tests/data/logs and a synthetic ``pytest -rA`` log of ``--tests`` lines with cut expected ids, for
the plain and the v2 pytest parsers. Prints the median per log and the ratio ours / 5.x, and checks
the verdicts agree. Needs swebench 5.x importable (e.g. ``PYTHONPATH=.deps``).

    python bench/log_grading_bench.py --tests 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

from swe_rl.grading import ApplyStatus, BuiltinGrader, grade
from swe_rl.tasks import TaskInstance
from swe_rl.tasks.specs import eval_type_for, log_parser_for

ROOT = Path(__file__).resolve().parents[1]


def synthetic(n: int) -> tuple[str, list[str], list[str]]:
    statuses = ["PASSED", "PASSED", "PASSED", "FAILED", "SKIPPED", "XFAIL"]
    lines = [f"{statuses[i % 6]} pkg/tests/test_m{i % 50}.py::test_case[{i}-a b]" for i in range(n)]
    f2p = [f"pkg/tests/test_m{i % 50}.py::test_case[{i}-a" for i in range(0, n, 97)]
    p2p = [f"pkg/tests/test_m{i % 50}.py::test_case[{i}-a b]" for i in range(1, n, 7)]
    return ">>>>> Start Test Output\n" + "\n".join(lines) + "\n>>>>> End Test Output\n", f2p, p2p


def timed(fn, repeat: int) -> tuple[float, object]:
    runs, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), out


def ours_grade(inst: TaskInstance, fp: Path):
    """Reading the file too, as 5.x does."""
    return grade(
        inst, patch="p", apply_status=ApplyStatus.APPLIED, test_log=fp.read_text(), grader=BuiltinGrader()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=20000, help="lines of the synthetic log")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from swebench.harness import grading
    from swebench.types import TestSpec

    text, f2p, p2p = synthetic(args.tests)
    cases = [
        (f"synthetic {args.tests} ({p})", text, f2p, p2p, p)
        for p in ("parse_log_pytest", "parse_log_pytest_v2")
    ]
    for path in sorted((ROOT / "tests/data/logs").glob("*.log")):
        cases.append((path.name, path.read_text(), ["x::y"], [], "parse_log_pytest"))
    print(f"{'log':40} {'ours ms':>9} {'5.x ms':>9} {'ratio':>6}  verdicts")
    with tempfile.TemporaryDirectory(prefix="h-bench-") as tmp:
        for name, log, f2p, p2p, parser in cases:
            inst = TaskInstance(instance_id="o__r-1", repo="o/r", problem_statement="x", image="i",
                                fail_to_pass=f2p, pass_to_pass=p2p, log_parser=parser)  # fmt: skip
            spec = TestSpec(instance_id="o__r-1", image="i", eval_script_list=[], repo="o/r", version="",
                            FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p, log_parser=log_parser_for(inst),
                            eval_type=eval_type_for(inst))  # fmt: skip
            fp = Path(tmp) / "test_output.txt"
            fp.write_text(log)
            pred = {"instance_id": "o__r-1", "model_patch": "p", "model_name_or_path": "m"}
            theirs_t, theirs = timed(partial(grading.get_eval_report, spec, pred, str(fp), True), args.repeat)
            ours_t, ours = timed(partial(ours_grade, inst, fp), args.repeat)
            same = ours.resolved == theirs["o__r-1"]["resolved"]  # type: ignore[attr-defined,index]
            print(
                f"{name:40} {ours_t * 1e3:9.2f} {theirs_t * 1e3:9.2f} {ours_t / theirs_t:6.2f}  {'same' if same else 'DIFFER'}"
            )


if __name__ == "__main__":
    main()
