"""Which task instances a mini-swe-agent run takes: source, ids, filter, then slice and shard.

The instances come from any file `swe_rl.tasks.load_instances` reads or a dataset name (`SUBSETS`
maps the shortcuts), narrowed by ``--instance-ids`` (a list or ``@file``) and ``--filter``, then cut
by ``--slice`` (Python slicing) and ``--shard I/N`` (near-equal contiguous parts, so N nodes cover the
list exactly once). `run_minisweagent` calls `select_instances` with its parsed arguments.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["SUBSETS", "select_instances", "shard_instances", "slice_instances"]

SUBSETS = {
    "verified": "princeton-nlp/SWE-bench_Verified",
    "lite": "princeton-nlp/SWE-bench_Lite",
    "full": "princeton-nlp/SWE-bench",
}


def slice_instances(items: list[Any], spec: str) -> list[Any]:
    """``a:b`` / ``a:`` / ``:b`` / ``a:b:c`` over the list, as Python slicing."""
    if not spec:
        return items
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"--slice {spec!r}: expected start:stop[:step]")
    try:
        bounds = [int(x) if x.strip() else None for x in parts]
    except ValueError:
        raise ValueError(f"--slice {spec!r}: bounds must be integers") from None
    return items[slice(*bounds)]


def shard_instances(items: list[Any], spec: str) -> list[Any]:
    """``I/N``: the I-th of N contiguous, near-equal parts (0-based), so N nodes cover the list exactly once."""
    if not spec:
        return items
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard {spec!r}: expected I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {spec!r}: need 0 <= I < N")
    size, extra = divmod(len(items), count)
    start = index * size + min(index, extra)
    return items[start : start + size + (index < extra)]


def select_instances(args: argparse.Namespace) -> list[Any]:
    from swe_rl.tasks import load_instances

    source = args.data or SUBSETS.get(args.subset, args.subset)
    ids = None
    if args.instance_ids:
        spec = args.instance_ids
        ids = (
            [x.strip() for x in Path(spec[1:]).read_text().splitlines() if x.strip()]
            if spec.startswith("@")
            else [x.strip() for x in spec.split(",") if x.strip()]
        )
    loaded = load_instances(source, image_template=args.image_template, instance_ids=ids, split=args.split)
    for err in loaded.errors:
        print(f"warning: skipped bad row: {err}", file=sys.stderr)
    instances = loaded.instances
    if args.filter_spec:
        instances = [i for i in instances if re.match(args.filter_spec, i.instance_id)]
    return shard_instances(slice_instances(instances, args.slice_spec), args.shard)
