#!/usr/bin/env python3
"""Certification at data-set scale: how fast a large ledger reads, and certification throughput.

Two parts, each printed with its baseline measured in the same run:

- **ledger** (no Docker): a synthetic ledger of ``--rows`` entries (each with ``--tests`` test rows,
  as a real SWE-bench instance has) is written, then read back the way ``swe-certify summary`` and the
  plugin's ``swe_require_certified`` gate read it (`swe_rl.grading.certification.read_ledger` +
  `swe_rl.eval.certify.summarize`). Baseline: a plain ``json.loads`` of every line of the same file.
- **fixtures** (``--fixtures``, needs Docker and the bundled images): ``swe-certify run`` over the
  bundled fixture instances on a local fleet (K gold runs + the empty patch per instance, as a real
  certification does), then the same command again (resume: nothing to do). Printed: instances per
  minute and the resumed run's seconds.

    python3 bench/certify_bench.py [--rows 50000] [--tests 30] [--fixtures]

Last line: ``certify: ledger R rows summary S s (json baseline B s); fixtures F instances/min``.
Printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from swe_rl.eval.certify import summarize
from swe_rl.grading.certification import read_ledger

ROOT = Path(__file__).resolve().parents[1]


def synthetic_ledger(path: Path, rows: int, tests: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(rows):
            names = [f"tests/test_mod_{i % 97}.py::test_case_{k}" for k in range(tests)]
            entry = {
                "instance_id": f"owner__repo-{i}",
                "certified": i % 7 != 0,
                "reason": "" if i % 7 else "gold not resolved in 1/2 runs (unresolved)",
                "image": f"swebench/sweb.eval.x86_64.owner_1776_repo-{i}:latest",
                "gold_runs": 2,
                "gold_statuses": ["resolved", "resolved"],
                "empty_status": "unresolved",
                "tests": {n: ["PASSED", "PASSED"] for n in names},
                "empty_tests": {n: "FAILED" for n in names[:2]},
                "flaky_tests": [names[0]] if i % 50 == 0 else [],
                "certified_at": 1_700_000_000.0 + i,
            }
            fh.write(json.dumps(entry) + "\n")


def ledger_part(rows: int, tests: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="swe-certify-bench-") as tmp:
        path = Path(tmp) / "ledger.jsonl"
        synthetic_ledger(path, rows, tests)
        size = path.stat().st_size / (1 << 20)
        t0 = time.perf_counter()
        for line in path.read_text().splitlines():
            json.loads(line)
        baseline = time.perf_counter() - t0
        t0 = time.perf_counter()
        summary = summarize(path)  # reads the ledger as the plugin's gate does (read_ledger), then sums
        ours = time.perf_counter() - t0
        ledger = read_ledger(path)
        print(
            f"ledger: {rows} rows ({size:.1f} MiB, {tests} tests each): read + summary {ours:.2f} s, "
            f"json.loads baseline {baseline:.2f} s (ratio {ours / baseline:.1f}); "
            f"{len(ledger.entries)} entries, certified {summary.get('certified')}"
        )
        return ours, baseline


def fixtures_part() -> float:
    data = ROOT / "data" / "fixtures" / "instances.jsonl"
    n = sum(1 for line in data.read_text().splitlines() if line.strip())
    with tempfile.TemporaryDirectory(prefix="swe-certify-bench-") as tmp:
        cmd = [sys.executable, "-m", "swe_rl.eval.certify", "run", "--data", str(data), "--ledger",
               f"{tmp}/ledger.jsonl", "--local-fleet", "--no-progress", "--runs", "2"]  # fmt: skip
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        resumed = time.perf_counter() - t0
    rate = n / first * 60
    print(f"fixtures: {n} instances certified (2 gold runs + empty each) in {first:.0f} s = {rate:.1f}/min; "
          f"resumed run (nothing to do, incl. fleet start) {resumed:.0f} s")  # fmt: skip
    return rate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--tests", type=int, default=30)
    p.add_argument("--fixtures", action="store_true", help="also certify the bundled fixtures (Docker)")
    args = p.parse_args(argv)
    ours, baseline = ledger_part(args.rows, args.tests)
    rate = fixtures_part() if args.fixtures else float("nan")
    print(
        f"certify: ledger {args.rows} rows summary {ours:.2f} s (json baseline {baseline:.2f} s); "
        f"fixtures {rate:.1f} instances/min"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
