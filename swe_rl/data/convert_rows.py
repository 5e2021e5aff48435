#!/usr/bin/env python3
"""Give older task rows swebench 5.x's fields, once: ``eval_script``, ``log_parser``, ``eval_type``, ``image``.

swebench 5.x reads how to run and grade an instance from its row; rows of the older schema
(SWE-bench before 5.x, SWE-Gym, exports of this project) carry only repo and version, and only
swebench 4.x can build their eval scripts (from its repo/version specs, offline). Run this
where swebench 4.1.0 is importable, e.g. a side directory that shadows the pinned 5.x::

    pip install --target /tmp/swebench41 swebench==4.1.0 --no-deps
    PYTHONPATH=/tmp/swebench41 swe-convert-rows old.jsonl new.jsonl

Each output row is the input row verbatim plus the missing fields; rows that already have all
four are copied. A row that cannot be converted (unknown repo or version, bad JSON) is reported
on stderr with its line and left out; the exit status is 1 when any row was left out.
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="JSONL of task rows")
    ap.add_argument("output", type=Path, help="JSONL to write (the rows with 5.x's fields)")
    args = ap.parse_args(argv)
    done = failed = 0
    with args.source.open(encoding="utf-8") as src, args.output.open("w", encoding="utf-8") as dst:
        for number, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                dst.write(json.dumps(convert_row(row)) + "\n")
                done += 1
            except (json.JSONDecodeError, RowInvalid, EvalSpecUnavailable, NoLogParser) as exc:
                print(f"line {number}: {exc}", file=sys.stderr)
                failed += 1
    print(f"{done} row(s) converted, {failed} left out -> {args.output}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
