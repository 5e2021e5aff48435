#!/usr/bin/env python3
"""Convert SWE task rows into slime prompt JSONL: one row per task instance.

Input is anything `swe_rl.tasks.load_instances` reads: a local ``.jsonl`` / ``.json`` /
``.parquet`` file (SWE-bench, SWE-Gym, R2E-Gym, fixture or slime rows), or a Hugging
Face dataset name with a split (needs the ``datasets`` package and the hub). Output
rows look like::

    {"text": "<problem_statement>",
     "metadata": {"instance": {"instance_id": ..., "image_name": ..., ...},
                  "data_source": "SWE-Gym/SWE-Gym"}}

``metadata.instance`` carries every field needed to run and grade the task (test lists
as JSON lists, the resolved image name, the eval script when the row had one) plus the
row's other fields verbatim, so loading the output with `load_instances` gives back the
same instances. Bad rows are reported on stderr and skipped; the exit status is
non-zero only when a split converts nothing (or its source cannot be read at all).

    python data/preprocess_swe_dataset.py --train-data-source SWE-Gym/SWE-Gym \\
        --train-split train --output-dir ~/data/swe_gym

With ``--format`` (a set's name, or ``auto``: per row from its schema) a local .jsonl / .parquet
file is converted in streaming, in bounded memory, by the set's loader (`swe_rl.tasks.datasets`;
SWE-rebench V2, SWE-smith, Multi-SWE-bench, SWE-bench-Live, SWE-bench Multilingual), with
progress on stderr, rejected rows in ``<split>.rejects.jsonl`` and the image list in
``<split>.images.txt`` (see `swe_rl.data.stream_convert` and docs/datasets.md).

Rows of swebench's 4.x schema (public SWE-bench Verified / Lite, SWE-Gym: no ``eval_script``) are
converted in the same run with swebench 4.1.0 from its own folder (`swe_rl.tasks.swebench4`, installed
there on demand); when that cannot run, the error names the install command and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from swe_rl.data.slime_rows import slime_row
from swe_rl.data.stream_convert import convert_file
from swe_rl.tasks import LoadResult, load_instances
from swe_rl.tasks.datasets import FORMATS
from swe_rl.tasks.swebench4 import ConversionUnavailable, convert_instances

MAX_ERRORS_SHOWN = 10


class SourceUnreadable(RuntimeError):
    """The whole source failed (missing file, no `datasets`, hub unreachable)."""


def is_local(source: str) -> bool:
    """Whether ``source`` names a local file rather than a dataset on the hub."""
    return Path(source).expanduser().is_file() or Path(source).suffix.lower() in {
        ".jsonl", ".json", ".parquet",
    }  # fmt: skip


def default_source_name(source: str) -> str | None:
    """A hub dataset is named by itself (as slime rows usually are); local files by their rows."""
    if source.startswith("hf:"):
        return source[3:]
    return None if is_local(source) else source


def image_override(template: str | None, prefix: str | None) -> str | None:
    """One override for `swe_rl.tasks.image_for`; a prefix must not look like a template."""
    if template and prefix:
        raise ValueError("give --image-template or --image-prefix, not both")
    if prefix and "{" in prefix:
        raise ValueError(f"--image-prefix {prefix!r} has a placeholder; use --image-template")
    return template or prefix or None


def parse_instance_ids(value: str | None) -> list[str] | None:
    """``a,b,c`` or the path of a file with one id per line (``#`` starts a comment)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if path.is_file():
        lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
        return [line for line in lines if line]
    return [part.strip() for part in value.split(",") if part.strip()]


def load_split(
    source: str,
    split: str,
    *,
    override: str | None = None,
    limit: int | None = None,
    instance_ids: Iterable[str] | None = None,
    data_source: str | None = None,
) -> LoadResult:
    """`load_instances` with every whole-source failure turned into `SourceUnreadable`."""
    source = str(Path(source).expanduser()) if is_local(source) else source
    name = data_source or default_source_name(source)
    try:
        return load_instances(
            source, image_template=override, limit=limit, instance_ids=instance_ids,
            data_source=name, split=split,
        )  # fmt: skip
    except Exception as exc:  # datasets raises anything from OSError to hub HTTP errors
        raise SourceUnreadable(
            f"cannot read {source!r} (split {split!r}): {type(exc).__name__}: {exc}"
        ) from exc


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows atomically (a temp file renamed into place); returns the row count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    count = 0
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                # default=str: parquet/datasets may give timestamps in the verbatim extra fields
                fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                count += 1
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def report_errors(label: str, result: LoadResult, err: TextIO) -> None:
    """Bad rows: how many, and the first few with their line/row and reason."""
    if not result.errors:
        return
    print(f"{label}: skipped {len(result.errors)} bad row(s):", file=err)
    for error in result.errors[:MAX_ERRORS_SHOWN]:
        print(f"  {error}", file=err)
    if len(result.errors) > MAX_ERRORS_SHOWN:
        print(f"  ... and {len(result.errors) - MAX_ERRORS_SHOWN} more", file=err)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Convert SWE task rows (local file or Hugging Face dataset) to slime JSONL.",
    )
    p.add_argument(
        "--train-data-source",
        required=True,
        help="local .jsonl/.json/.parquet file, or a Hugging Face dataset name",
    )
    p.add_argument("--train-split", default="train", help="dataset split (hub datasets only)")
    p.add_argument("--val-data-source", help="optional second source, written to val.jsonl")
    p.add_argument("--val-split", default="test", help="split of --val-data-source")
    p.add_argument("--output-dir", required=True, type=Path, help="directory for train.jsonl (and val.jsonl)")
    p.add_argument(
        "--image-template",
        help="image name template, e.g. 'reg:5000/sweb.eval.x86_64.{id_swebench}:latest' "
        "(placeholders: instance_id, id_swebench, id_swegym, repo, image)",
    )
    p.add_argument(
        "--image-prefix", help="registry/namespace replacing the image's own, e.g. 'mirror:5000/swebench'"
    )
    p.add_argument("--limit", type=int, help="convert at most this many instances per split")
    p.add_argument("--instance-ids", help="only these ids: comma-separated, or a file with one id per line")
    p.add_argument(
        "--data-source-name",
        help="dataset name for rows that do not carry one (decides image naming: "
        "'SWE-Gym/SWE-Gym', 'R2E-Gym/R2E-Gym-Lite', ...); defaults to the hub "
        "dataset name, or 'swe-bench' for local files",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="convert with a data set's loader, streaming a local .jsonl/.parquet file in bounded "
        "memory ('auto': per row from its schema); writes <split>.rejects.jsonl and <split>.images.txt",
    )
    p.add_argument(
        "--progress-every", type=int, default=10_000, help="with --format: report progress every N rows"
    )
    return p


def stream_split(
    args: argparse.Namespace,
    label: str,
    source: str,
    override: str | None,
    wanted: list[str] | None,
    out: TextIO,
    err: TextIO,
) -> int:
    """One split converted in streaming (``--format``); the exit status of that split."""
    path = Path(source).expanduser()
    if not path.is_file():
        print(
            f"error: {label}: --format streams local .jsonl/.parquet files; {source!r} is not one", file=err
        )
        return 1
    try:
        summary = convert_file(
            path, args.output_dir / f"{label}.jsonl", fmt=args.format,
            rejects=args.output_dir / f"{label}.rejects.jsonl",
            images=args.output_dir / f"{label}.images.txt",
            image_override=override, data_source=args.data_source_name, limit=args.limit,
            instance_ids=wanted, progress_every=args.progress_every, err=err,
        )  # fmt: skip
    except (OSError, ValueError, ImportError) as exc:
        print(f"error: {label}: cannot read {source!r}: {type(exc).__name__}: {exc}", file=err)
        return 1
    print(
        f"{label}: wrote {summary.converted} instance(s) to {args.output_dir / f'{label}.jsonl'} "
        f"({summary.rows_read} rows, {summary.rejected} rejected, {summary.images} image(s), "
        f"{summary.rows_per_second:.0f} rows/s)",
        file=out,
    )
    if summary.rejected:
        print(f"{label}: rejected {summary.rejected} row(s), by reason:", file=err)
        for reason, count in list(summary.reasons.items())[:MAX_ERRORS_SHOWN]:
            print(f"  {count} x {reason}", file=err)
        print(f"  every rejected row: {args.output_dir / f'{label}.rejects.jsonl'}", file=err)
    return 0 if summary.converted else 1


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
    if wanted is not None and not wanted:
        print("error: --instance-ids names no instance", file=err)
        return 2

    splits = [("train", args.train_data_source, args.train_split)]
    if args.val_data_source:
        splits.append(("val", args.val_data_source, args.val_split))
    status = 0
    found: set[str] = set()
    if args.format:
        for label, source, _split in splits:
            status = max(status, stream_split(args, label, source, override, wanted, out, err))
        return status
    for label, source, split in splits:
        try:
            result = load_split(
                source, split, override=override, limit=args.limit, instance_ids=wanted,
                data_source=args.data_source_name,
            )  # fmt: skip
        except SourceUnreadable as exc:
            print(f"error: {label}: {exc}", file=err)
            status = 1
            continue
        report_errors(label, result, err)
        try:  # 4.x-schema rows (no eval_script): converted with swebench 4.1.0 (swe_rl.tasks.swebench4)
            instances, unconverted = convert_instances(result.instances, err)
        except ConversionUnavailable as exc:
            print(f"error: {label}: {exc}", file=err)
            return 2  # nothing written: a split without its scripts would only fail later, as env_error
        if unconverted:
            print(
                f"warning: {label}: {len(unconverted)} row(s) could not be converted (above) and are kept "
                "without eval_script: grading them ends in env_error unless their rows gain one",
                file=err,
            )
        result = result.model_copy(update={"instances": instances})
        found.update(i.instance_id for i in result.instances)
        if not result.instances:
            print(f"error: {label}: no instance converted from {source!r}", file=err)
            status = 1
            continue
        path = args.output_dir / f"{label}.jsonl"
        count = write_jsonl(path, (slime_row(i) for i in result.instances))
        skipped = f", {len(result.errors)} bad row(s) skipped" if result.errors else ""
        print(f"{label}: wrote {count} instance(s) to {path}{skipped}", file=out)
    if wanted is not None:
        missing = [i for i in dict.fromkeys(wanted) if i not in found]
        if missing:
            shown = ", ".join(missing[:MAX_ERRORS_SHOWN]) + (
                " ..." if len(missing) > MAX_ERRORS_SHOWN else ""
            )
            print(f"warning: {len(missing)} requested instance id(s) not found: {shown}", file=err)
    return status


if __name__ == "__main__":
    sys.exit(main())
