#!/usr/bin/env python3
"""Give older task rows swebench 5.x's fields, once: ``eval_script``, ``log_parser``, ``eval_type``, ``image``.

swebench 5.x reads how to run and grade an instance from its row; rows of the older schema
(SWE-bench before 5.x, SWE-Gym, exports of this project) carry only repo and version, and only
swebench 4.x can build their eval scripts (from its repo/version specs, offline)::

    swe-convert-rows old.jsonl new.jsonl

When 4.x is not importable here, the conversion runs in a child interpreter with swebench 4.1.0's
own folder first on its path (`swe_rl.tasks.swebench4`: ``~/.cache/swe-rl/swebench-4.1.0``, put there
by the set-up, or installed there now, saying so). When that cannot be done, the error names the
exact install command and no output is written (exit 2). `swe-preprocess` and `swe-eval` convert
such rows themselves; this tool is for keeping converted rows.

Each output row is the input row verbatim plus the missing fields; rows that already have all
four are copied. A row that cannot be converted (unknown repo or version, bad JSON) is reported
on stderr with its line and left out; the exit status is 1 when any row was left out, and the
output is written (atomically) only when at least one row converted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swe_rl.tasks import EvalSpecUnavailable, RowInvalid, eval_script_for, instance_from_row
from swe_rl.tasks.specs import NoLogParser, eval_type_for, log_parser_for

__all__ = ["convert_row", "main"]


def convert_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with 5.x's fields filled; raises `RowInvalid` / `EvalSpecUnavailable` / `NoLogParser`."""
    inst = instance_from_row(row)
    out = dict(row)
    if not out.get("eval_script"):
        out["eval_script"] = eval_script_for(inst)
    if not str(out.get("log_parser") or "").startswith("parse_log_"):
        out["log_parser"] = log_parser_for(inst)
    out.setdefault("eval_type", eval_type_for(inst))
    out.setdefault("image", inst.image)
    return out


def _swebench4_here() -> bool:
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # noqa: F401  (4.x only)
    except ImportError:
        return False
    return True


def _lacks_script(line: str) -> bool:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and not row.get("eval_script")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="JSONL of task rows")
    ap.add_argument("output", type=Path, help="JSONL to write (the rows with 5.x's fields)")
    ap.add_argument("--here", action="store_true", help=argparse.SUPPRESS)  # the child under 4.1.0
    args = ap.parse_args(argv)
    lines = args.source.read_text(encoding="utf-8").splitlines()
    if not args.here and not _swebench4_here() and any(_lacks_script(x) for x in lines if x.strip()):
        from swe_rl.tasks.swebench4 import ConversionUnavailable, convert_rows_file

        try:
            return convert_rows_file(args.source, args.output, sys.stderr)
        except ConversionUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    done = failed = 0
    converted: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            converted.append(json.dumps(convert_row(json.loads(line))) + "\n")
            done += 1
        except (json.JSONDecodeError, RowInvalid, EvalSpecUnavailable, NoLogParser) as exc:
            print(f"line {number}: {exc}", file=sys.stderr)
            failed += 1
    if converted:  # atomically: a reader never sees half a file
        tmp = args.output.with_name(f".{args.output.name}.tmp-{os.getpid()}")
        try:
            tmp.write_text("".join(converted), encoding="utf-8")
            tmp.replace(args.output)
        finally:
            tmp.unlink(missing_ok=True)
    target = args.output if converted else "nothing written"
    print(f"{done} row(s) converted, {failed} left out -> {target}", file=sys.stderr)
    return 1 if failed or not converted else 0


if __name__ == "__main__":
    raise SystemExit(main())
