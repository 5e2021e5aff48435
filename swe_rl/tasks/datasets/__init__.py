"""Loaders of the public SWE data sets: one module per set, and the name → loader map.

Each loader module has ``NAME``, ``DATA_SOURCE``, ``looks_like(row)`` (its schema, for
auto-detection) and ``convert(row)`` → a flat SWE-bench-style row that `instance_from_row` reads
(or `RowInvalid` with the reason). `convert_row` does both steps and returns a `TaskInstance`.
Sets and their caveats: docs/datasets.md.

``auto`` never invents an image: a row of no known set that names no image is taken only when it
has SWE-bench's own schema (``version`` and ``environment_setup_commit``, whose image name is
SWE-bench's convention) or an image override is given; any other row (an issue-only SWE-bench-Live
row, say) is refused, rather than sent to a ``swebench/sweb.eval.x86_64.<id>`` image that is not its.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from swe_rl.tasks.datasets import (
    multi_swe_bench,
    swe_bench_live,
    swe_bench_multilingual,
    swe_rebench_v2,
    swe_smith,
)
from swe_rl.tasks.images import ENV_IMAGE_PREFIX, ENV_IMAGE_TEMPLATE
from swe_rl.tasks.instance import TaskInstance
from swe_rl.tasks.rows import RowInvalid, instance_from_row

__all__ = ["AUTO", "FORMATS", "LOADERS", "convert_row", "detect_format"]

AUTO = "auto"
"""Pick the loader per row from its schema; rows of no known set go through `instance_from_row`."""

LOADERS: dict[str, ModuleType] = {
    m.NAME: m for m in (swe_rebench_v2, swe_smith, multi_swe_bench, swe_bench_live, swe_bench_multilingual)
}
FORMATS = (AUTO, *LOADERS)

# Order matters: the most specific schema first.
_DETECT_ORDER = ("swe-rebench-v2", "multi-swe-bench", "swe-smith", "swe-bench-live")


def detect_format(row: Mapping[str, Any]) -> str | None:
    """The loader whose schema the row has, or None (a SWE-bench / SWE-Gym / R2E / slime row, or a
    row a loader already converted: it has an ``eval_script`` and a ``log_parser``)."""
    if row.get("eval_script") and "log_parser" in row:
        return None
    for name in _DETECT_ORDER:
        if LOADERS[name].looks_like(row):
            return name
    return None


def convert_row(
    row: Any, fmt: str = AUTO, *, image_override: str | None = None, data_source: str | None = None
) -> TaskInstance:
    """One upstream row → a `TaskInstance`; `RowInvalid` (with the reason) when it cannot be converted."""
    if not isinstance(row, Mapping):
        raise RowInvalid(f"row must be a JSON object, got {type(row).__name__}")
    name = detect_format(row) if fmt == AUTO else fmt
    if name is None:
        if fmt == AUTO and not (
            image_override or os.environ.get(ENV_IMAGE_TEMPLATE) or os.environ.get(ENV_IMAGE_PREFIX)
        ):
            _refuse_guessed_image(row)
        return instance_from_row(row, data_source=data_source, image_override=image_override)
    loader = LOADERS.get(name)
    if loader is None:
        raise ValueError(f"unknown data-set format {name!r}; choose from {', '.join(FORMATS)}")
    convert: Callable[[Mapping[str, Any]], dict[str, Any]] = loader.convert
    flat = convert(row)
    return instance_from_row(
        flat, data_source=data_source or loader.DATA_SOURCE, image_override=image_override
    )


_IMAGE_KEYS = ("image_name", "image", "docker_image")
_SWEBENCH_KEYS = ("version", "environment_setup_commit")


def _refuse_guessed_image(row: Mapping[str, Any]) -> None:
    """`RowInvalid` when ``auto`` would have to make up the image of a row of no known set."""
    meta = row.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            meta = None
    inner = meta.get("instance") if isinstance(meta, Mapping) else None
    flat = inner if isinstance(inner, Mapping) else row
    if any(flat.get(k) for k in _IMAGE_KEYS) or "repo_name" in flat:  # R2E-Gym names its image itself
        return
    if all(flat.get(k) for k in _SWEBENCH_KEYS):
        return
    instance_id = flat.get("instance_id")
    raise RowInvalid(
        "no image_name/docker_image and not a SWE-bench row (no version/environment_setup_commit): "
        "--format auto does not guess its image; give the set's --format or --image-template",
        instance_id if isinstance(instance_id, str) else None,
    )
