"""Loading task instances from a .jsonl / .json / .parquet file or a `datasets` name.

Loading never stops at a bad row: each one becomes a `RowError` that names the row (line or index)
and what is wrong with it, and the other rows still load (`LoadResult`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from swe_rl.tasks.instance import TaskInstance
from swe_rl.tasks.rows import RowInvalid, instance_from_row

__all__ = ["LoadResult", "RowError", "load_instances"]


class RowError(BaseModel):
    """A row that failed to load; the other rows of the file still load."""

    line: int | None = None
    """1-based line number (JSONL files)."""
    index: int | None = None
    """0-based row index (JSON lists, parquet, `datasets`)."""
    instance_id: str | None = None
    """The row's instance id, when it could be read."""
    message: str
    """What is wrong, in words a dataset author can act on."""

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else f"row {self.index}"
        who = f" ({self.instance_id})" if self.instance_id else ""
        return f"{where}{who}: {self.message}"


class LoadResult(BaseModel):
    """Instances that loaded, and one error per row that did not."""

    instances: list[TaskInstance] = Field(default_factory=list)
    """Valid instances, in file order, after filtering."""
    errors: list[RowError] = Field(default_factory=list)
    """Rows that were skipped, with the reason."""
    missing_ids: list[str] = Field(default_factory=list)
    """Ids asked for with ``instance_ids`` that no valid row had."""

    @property
    def ok(self) -> bool:
        return not self.errors and not self.missing_ids


# (1-based line or None, 0-based index or None, parsed row or the error for that row)
_RawRow = tuple[int | None, int | None, Any]


def _jsonl_rows(path: Path) -> Iterator[_RawRow]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, None, json.loads(line)
            except json.JSONDecodeError as exc:
                yield lineno, None, RowInvalid(f"invalid JSON: {exc.msg} at column {exc.colno}")


def _json_rows(path: Path) -> Iterator[_RawRow]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, Mapping) and isinstance(data.get("instances"), list):
        data = data["instances"]
    if not isinstance(data, list):
        raise ValueError(f'{path}: expected a JSON list of rows or {{"instances": [...]}}')
    for i, row in enumerate(data):
        yield None, i, row


def _parquet_rows(path: Path) -> Iterator[_RawRow]:
    try:
        import pyarrow.parquet as pq

        rows: list[Any] = pq.read_table(path).to_pylist()
    except ImportError:
        try:  # pandas reads parquet through fastparquet when pyarrow is absent
            import pandas as pd

            records = pd.read_parquet(path).to_dict("records")
        except ImportError:
            raise ImportError(
                f"reading {path} needs pyarrow (or pandas with fastparquet): pip install 'swe-rl[eval]'"
            ) from None
        rows = [{k: _plain(v) for k, v in r.items()} for r in records]
    for i, row in enumerate(rows):
        yield None, i, row


def _plain(value: Any) -> Any:
    """pandas gives numpy arrays for list columns and NaN for nulls."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _dataset_rows(name: str, split: str) -> Iterator[_RawRow]:
    try:
        import datasets
    except ImportError:
        raise FileNotFoundError(
            f"{name!r} is not a local file, and the 'datasets' package to load it by name is not installed"
        ) from None
    for i, row in enumerate(datasets.load_dataset(name, split=split)):
        yield None, i, row


def _rows(source: str | Path, split: str) -> Iterator[_RawRow]:
    path = Path(source)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            return _jsonl_rows(path)
        if suffix == ".json":
            return _json_rows(path)
        if suffix == ".parquet":
            return _parquet_rows(path)
        raise ValueError(f"{path}: unsupported file type {suffix!r} (use .jsonl, .json or .parquet)")
    text = str(source)
    if text.startswith("hf:"):
        return _dataset_rows(text[3:], split)
    if path.suffix.lower() in {".jsonl", ".json", ".parquet"} or path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    return _dataset_rows(text, split)


def load_instances(
    source: str | Path,
    *,
    image_template: str | None = None,
    limit: int | None = None,
    instance_ids: Iterable[str] | None = None,
    data_source: str | None = None,
    split: str = "test",
) -> LoadResult:
    """Load task instances from a .jsonl / .json / .parquet file or a `datasets` name.

    A name that is not a local file (or starts with ``hf:``) is loaded with the optional
    ``datasets`` package. ``image_template`` overrides image names (see `image_for`);
    ``data_source`` names the dataset for rows that do not say. ``instance_ids`` filters
    before ``limit`` counts; bad rows are reported in ``errors``, not raised.
    """
    wanted = set(instance_ids) if instance_ids is not None else None
    result = LoadResult()
    seen: dict[str, str] = {}
    for line, index, raw in _rows(source, split):
        if limit is not None and len(result.instances) >= limit:
            break
        where = f"line {line}" if line is not None else f"row {index}"
        try:
            if isinstance(raw, RowInvalid):
                raise raw
            inst = instance_from_row(raw, data_source=data_source, image_override=image_template)
        except RowInvalid as exc:
            known = exc.instance_id
            if wanted is None or known is None or known in wanted:
                result.errors.append(RowError(line=line, index=index, instance_id=known, message=str(exc)))
            continue
        if wanted is not None and inst.instance_id not in wanted:
            continue
        if inst.instance_id in seen:
            result.errors.append(
                RowError(
                    line=line, index=index, instance_id=inst.instance_id,
                    message=f"duplicate instance_id (first at {seen[inst.instance_id]})",
                )
            )  # fmt: skip
            continue
        seen[inst.instance_id] = where
        result.instances.append(inst)
    if wanted is not None and (limit is None or len(result.instances) < limit):
        result.missing_ids = sorted(wanted - seen.keys())
    return result
