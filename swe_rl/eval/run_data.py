"""The instances of an eval or certification run, read one way for `swe-eval` and `swe-certify`.

    run = load_run_instances(args.data, split=args.split, image_template=args.image_template,
                             instance_ids=instance_ids(args.instance_ids), limit=args.max_instances)
    run.instances        # loaded, cut to --limit, 4.x-schema rows converted
    run.load_errors      # rows that could not be read (each said on stderr)

Public SWE-bench rows of the 4.x schema (no ``eval_script``) are converted with swebench 4.1.0
(`swe_rl.tasks.swebench4.convert_instances`) after the limit, so ``--limit 2`` converts two rows.
Kept in one place because certify once read rows its own way: it graded public rows without
their eval scripts and called every one an env_error.
Raises `ConversionUnavailable` (the command that makes conversion possible) before anything runs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["RunInstances", "load_run_instances"]


@dataclass
class RunInstances:
    instances: list[Any]
    load_errors: int = 0
    unconverted: list[str] = field(default_factory=list)
    """Ids of 4.x rows swebench 4.1.0 could not convert (they run without an eval script: env_error)."""


def load_run_instances(
    data: Any,
    *,
    split: str = "test",
    image_template: str | None = None,
    instance_ids: list[str] | None = None,
    limit: int | None = None,
    err: TextIO | None = None,
) -> RunInstances:
    """Load, warn about bad rows, cut to ``limit``, convert 4.x rows (see the module docstring)."""
    from swe_rl.tasks import load_instances
    from swe_rl.tasks.swebench4 import convert_instances

    err = err or sys.stderr
    loaded = load_instances(data, image_template=image_template, instance_ids=instance_ids, split=split)
    for error in loaded.errors:
        print(f"warning: skipped bad row: {error}", file=err)
    instances = loaded.instances[:limit] if limit else loaded.instances
    instances, unconverted = convert_instances(instances, err)
    if unconverted:
        print(
            f"warning: {len(unconverted)} row(s) could not be converted (above); they run without an "
            "eval script and end in env_error",
            file=err,
        )
    return RunInstances(instances, len(loaded.errors), unconverted)
