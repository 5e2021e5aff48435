#!/usr/bin/env python3
"""Export what a SWE-bench (Verified) eval run and Docker-node pre-warming need, in one go.

Writes to ``--output-dir``:

- ``instance_ids.txt``: one instance id per line, in dataset order;
- ``docker_images.txt``: the image of every instance, each once, in first-use order
  (SWE-bench naming ``swebench/sweb.eval.x86_64.<id with __ -> _1776_>:latest`` unless the
  row names its own image; ``--image-prefix`` / ``--image-template`` override it), ready
  for ``IMAGE_LIST=.../docker_images.txt bash data/pull_swe_images.sh``;
- ``verified_eval.jsonl``: one flat SWE-bench row per instance (test lists as JSON lists)
  plus ``image_name``, ``workdir`` and ``data_source``, readable by `load_instances`.

    python data/export_swebench_verified_assets.py \\
        --dataset princeton-nlp/SWE-bench_Verified --split test --output-dir ~/swe_verified
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from swe_rl.data.preprocess_swe_dataset import (
    SourceUnreadable,
    image_override,
    load_split,
    parse_instance_ids,
    report_errors,
    write_jsonl,
)
from swe_rl.data.slime_rows import instance_record

DEFAULT_DATASET = "princeton-nlp/SWE-bench_Verified"


def write_lines(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    tmp.replace(path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Export instance ids, Docker image names and eval rows of a SWE-bench dataset.",
    )
    p.add_argument(
        "--dataset",
        default=DEFAULT_DATASET,
        help=f"local .jsonl/.json/.parquet file or Hugging Face dataset (default {DEFAULT_DATASET})",
    )
    p.add_argument("--split", default="test", help="dataset split (hub datasets only)")
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument(
        "--image-template", help="image name template, e.g. 'reg:5000/sweb.eval.x86_64.{id_swebench}:v1'"
    )
    p.add_argument(
        "--image-prefix", help="registry/namespace replacing 'swebench', e.g. 'mirror:5000/swebench'"
    )
    p.add_argument("--limit", type=int, help="export at most this many instances")
    p.add_argument("--instance-ids", help="only these ids: comma-separated, or a file with one id per line")
    p.add_argument(
        "--data-source-name",
        help="dataset name for rows that do not carry one (default: the hub name, else swe-bench)",
    )
    return p


def main(argv: list[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        override = image_override(args.image_template, args.image_prefix)
    except ValueError as exc:
        print(f"error: {exc}", file=err)
        return 2
    if args.limit is not None and args.limit < 1:
        print("error: --limit must be at least 1", file=err)
        return 2
    wanted = parse_instance_ids(args.instance_ids)
    try:
        result = load_split(
            args.dataset, args.split, override=override, limit=args.limit,
            instance_ids=wanted, data_source=args.data_source_name,
        )  # fmt: skip
    except SourceUnreadable as exc:
        print(f"error: {exc}", file=err)
        return 1
    report_errors(args.dataset, result, err)
    if result.missing_ids:
        print(
            f"warning: {len(result.missing_ids)} requested id(s) not found: "
            f"{', '.join(result.missing_ids[:10])}",
            file=err,
        )
    if not result.instances:
        print(f"error: no instance exported from {args.dataset!r}", file=err)
        return 1

    args.output_dir.mkdir(parents=True, exist_ok=True)
    ids = [i.instance_id for i in result.instances]
    images = list(dict.fromkeys(i.image for i in result.instances))
    write_lines(args.output_dir / "instance_ids.txt", ids)
    write_lines(args.output_dir / "docker_images.txt", images)
    write_jsonl(args.output_dir / "verified_eval.jsonl", (instance_record(i) for i in result.instances))
    skipped = f"; {len(result.errors)} bad row(s) skipped" if result.errors else ""
    print(f"exported {len(ids)} instance(s), {len(images)} image(s) to {args.output_dir}{skipped}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
