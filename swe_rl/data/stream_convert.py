"""Streaming conversion of a large data set: rows in, slime JSONL out, in bounded memory.

`swe-preprocess --format <set>` (or ``--format auto``) runs this instead of loading the whole
split: each row is read, converted by its set's loader (`swe_rl.tasks.datasets`), written, and
forgotten. What is kept grows only with the number of distinct instance ids and images (for
duplicate detection and the image list), never with the rows' text. Rows that cannot be
converted go to a rejects file (line, instance id, reason) and are counted by reason in the
summary; none is dropped silently. Progress (rows, rows/s) goes to stderr every N rows.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, Field

from swe_rl.data.slime_rows import slime_row
from swe_rl.tasks import RowInvalid
from swe_rl.tasks.datasets import AUTO, convert_row

__all__ = ["ConversionSummary", "convert_file", "iter_rows"]

PARQUET_BATCH_ROWS = 256
MAX_REASONS = 100
"""Distinct reasons counted one by one; the rest are counted together (memory stays bounded)."""
OTHER_REASONS = "(other reasons: see the rejects file)"


class ConversionSummary(BaseModel):
    """What one streamed conversion did."""

    rows_read: int = 0
    """Rows (or unparseable lines) seen in the source."""
    converted: int = 0
    """Rows written to the output."""
    rejected: int = 0
    """Rows written to the rejects file (unconvertible, duplicate or unparseable)."""
    reasons: dict[str, int] = Field(default_factory=dict)
    """Rejected rows by reason (the reason text without the instance id)."""
    images: int = 0
    """Distinct image names of the converted rows."""
    seconds: float = 0.0
    """Wall time of the conversion."""

    @property
    def rows_per_second(self) -> float:
        return self.rows_read / self.seconds if self.seconds > 0 else 0.0


def iter_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(1-based row number, row or `RowInvalid`) from a .jsonl or .parquet file, one at a time."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    yield lineno, RowInvalid(f"invalid JSON: {exc.msg} at column {exc.colno}")
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        number = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for row in batch.to_pylist():
                number += 1
                yield number, row
    else:
        raise ValueError(f"{path}: streaming reads .jsonl or .parquet files, not {suffix!r}")


def _write_line(fh: TextIO, row: dict[str, Any]) -> None:
    fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def convert_file(
    source: Path,
    output: Path,
    *,
    fmt: str = AUTO,
    rejects: Path | None = None,
    images: Path | None = None,
    image_override: str | None = None,
    data_source: str | None = None,
    limit: int | None = None,
    instance_ids: Iterable[str] | None = None,
    progress_every: int = 10_000,
    err: TextIO | None = None,
) -> ConversionSummary:
    """Convert ``source`` row by row into slime JSONL at ``output`` (written atomically).

    ``rejects`` (default ``<output>.rejects.jsonl``) gets one line per rejected row;
    ``images`` (optional) gets the sorted distinct image names, one per line.
    """
    wanted = set(instance_ids) if instance_ids is not None else None
    rejects = rejects or output.with_name(output.stem + ".rejects.jsonl")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    summary = ConversionSummary()
    reasons: Counter[str] = Counter()
    seen: set[str] = set()
    image_names: set[str] = set()
    start = time.perf_counter()
    try:
        with tmp.open("w", encoding="utf-8") as out, rejects.open("w", encoding="utf-8") as bad:
            for number, raw in iter_rows(source):
                if limit is not None and summary.converted >= limit:
                    break
                summary.rows_read += 1
                try:
                    if isinstance(raw, RowInvalid):
                        raise raw
                    inst = convert_row(raw, fmt, image_override=image_override, data_source=data_source)
                    if wanted is not None and inst.instance_id not in wanted:
                        continue
                    if inst.instance_id in seen:
                        raise RowInvalid("duplicate instance_id (an earlier row has it)", inst.instance_id)
                except RowInvalid as exc:
                    summary.rejected += 1
                    key = str(exc) if len(reasons) < MAX_REASONS or str(exc) in reasons else OTHER_REASONS
                    reasons[key] += 1
                    _write_line(bad, {"row": number, "instance_id": exc.instance_id, "reason": str(exc)})
                    continue
                seen.add(inst.instance_id)
                image_names.add(inst.image)
                _write_line(out, slime_row(inst))
                summary.converted += 1
                if err is not None and progress_every and summary.rows_read % progress_every == 0:
                    rate = summary.rows_read / max(time.perf_counter() - start, 1e-9)
                    print(
                        f"{source.name}: {summary.rows_read} rows, {summary.converted} converted, "
                        f"{summary.rejected} rejected ({rate:.0f} rows/s)",
                        file=err,
                        flush=True,
                    )
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)
    if images is not None:
        images.parent.mkdir(parents=True, exist_ok=True)
        images.write_text("".join(f"{name}\n" for name in sorted(image_names)), encoding="utf-8")
    summary.images = len(image_names)
    summary.reasons = dict(reasons.most_common())
    summary.seconds = time.perf_counter() - start
    return summary
