#!/usr/bin/env python3
"""Build a training set by pass-rate band: keep the instances a policy sometimes, not always, solves.

Reads a slime task JSONL (from `swe-preprocess`) and one or more attempts files
(`swe_rl.tasks.pass_rates`: rows appended by eval / training / certification, or eval's
``results.jsonl``, given as ``PATH=POLICY_VERSION`` to name the policy of rows that carry none),
and writes the rows whose pass rate is in the band, each with ``metadata.instance.pass_rate``
(attempts, resolved, rate, policy version). The output is slime JSONL, so the plugin reads it as
any task file. Every dropped row goes to ``<output>.dropped.jsonl`` with its reason, and the
counts by reason are printed. Rows are streamed; only the pass-rate table is held in memory.

    python -m swe_rl.data.difficulty_band --tasks train.jsonl \\
        --attempts runs/step200/results.jsonl=step200 --attempts attempts.jsonl \\
        --policy-version step200 --min-rate 0.1 --max-rate 0.9 --output train.banded.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from swe_rl.tasks.pass_rates import PassRateBand, PassRateTable, read_attempts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Keep the task rows whose pass rate is inside a band.")
    p.add_argument(
        "--tasks", required=True, type=Path, help="slime JSONL of task rows (swe-preprocess output)"
    )
    p.add_argument(
        "--attempts",
        required=True,
        action="append",
        help="attempts JSONL, or eval results.jsonl; PATH=VERSION names the policy of its rows (repeatable)",
    )
    p.add_argument("--policy-version", help="rate under this policy version only (default: all attempts)")
    p.add_argument("--min-rate", type=float, default=0.0, help="lowest pass rate kept (inclusive)")
    p.add_argument("--max-rate", type=float, default=1.0, help="highest pass rate kept (inclusive)")
    p.add_argument("--keep-never-solved", action="store_true", help="keep instances no attempt resolved")
    p.add_argument("--keep-always-solved", action="store_true", help="keep instances every attempt resolved")
    p.add_argument("--min-attempts", type=int, default=1, help="fewer attempts: the instance is unseen")
    p.add_argument("--drop-unseen", action="store_true", help="drop instances without enough attempts")
    p.add_argument("--output", required=True, type=Path, help="banded slime JSONL")
    return p


def _instance_id(row: Any) -> str | None:
    meta = row.get("metadata") if isinstance(row, dict) else None
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            return None
    inst = meta.get("instance") if isinstance(meta, dict) else None
    value = inst.get("instance_id") if isinstance(inst, dict) else None
    return value if isinstance(value, str) else None


def main(argv: list[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        band = PassRateBand(
            min_rate=args.min_rate, max_rate=args.max_rate, min_attempts=args.min_attempts,
            drop_never_solved=not args.keep_never_solved, drop_always_solved=not args.keep_always_solved,
            keep_unseen=not args.drop_unseen,
        )  # fmt: skip
    except ValidationError as exc:
        print(f"error: bad band: {exc.errors()[0]['msg']}", file=err)
        return 2
    if not args.tasks.is_file():
        print(f"error: task file not found: {args.tasks}", file=err)
        return 2
    table = PassRateTable()
    try:
        for spec in args.attempts:
            path, _, version = spec.partition("=")
            for attempt in read_attempts(path, policy_version=version or None):
                table.add(attempt)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=err)
        return 2
    dropped_path = args.output.with_name(args.output.stem + ".dropped.jsonl")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(f".{args.output.name}.tmp-{os.getpid()}")
    reasons: Counter[str] = Counter()
    kept = 0
    try:
        with args.tasks.open(encoding="utf-8") as src, tmp.open("w", encoding="utf-8") as dst:
            with dropped_path.open("w", encoding="utf-8") as dropped:
                for lineno, line in enumerate(src, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        row = None
                    instance_id = _instance_id(row)
                    reason: str | None
                    if row is None or instance_id is None:
                        reason = "not a slime task row (no metadata.instance.instance_id)"
                    else:
                        rate = table.get(instance_id, args.policy_version)
                        reason = band.verdict(rate)
                    if reason is not None:
                        reasons[reason] += 1
                        dropped.write(
                            json.dumps({"line": lineno, "instance_id": instance_id, "reason": reason}) + "\n"
                        )
                        continue
                    assert isinstance(row, dict)
                    meta = (
                        row["metadata"] if isinstance(row["metadata"], dict) else json.loads(row["metadata"])
                    )
                    meta["instance"]["pass_rate"] = {
                        "attempts": rate.attempts, "resolved": rate.resolved, "rate": rate.rate,
                        "policy_version": args.policy_version,
                    }  # fmt: skip
                    row["metadata"] = meta
                    dst.write(json.dumps(row, ensure_ascii=False) + "\n")
                    kept += 1
        tmp.replace(args.output)
    finally:
        tmp.unlink(missing_ok=True)
    dropped_total = sum(reasons.values())
    print(
        f"kept {kept} instance(s) in {args.output}; dropped {dropped_total} "
        f"(pass rates of {len(table)} instance(s) known)",
        file=out,
    )
    for reason, count in reasons.most_common():
        print(f"  {count} x {reason}", file=out)
    if dropped_total:
        print(f"  every dropped row: {dropped_path}", file=out)
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
