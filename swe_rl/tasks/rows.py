"""One dataset row → one `TaskInstance`, whatever the row's format; a bad row is a `RowInvalid` saying why.

Handles JSON-encoded test lists, slime rows (``{"text", "metadata": {"instance": {...}}}``), R2E-Gym's
fields (``repo_name``, ``docker_image``, ``parsed_commit_content``, ``expected_output_json``) and where
each family keeps its image name. Every field the instance does not model is kept in ``extra``.

A row that could poison training is refused here, whatever loader produced it: a row with no
FAIL_TO_PASS test (an issue without tests yet, a broken conversion) would be graded by the exit code
of its tests, so the empty patch could earn a reward. It loads only when its format grades another
way on purpose and says so: R2E-Gym's exact expected statuses, or ``"grading": "exit-code"`` in the
row. A ``log_parser`` must name a parser: SWE-bench-Live's multi-language rows carry Python source
there (their harness executes it), and code from a row never runs in the trainer's or grader's process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from swe_rl.tasks.images import image_for
from swe_rl.tasks.instance import DataSource, TaskInstance

__all__ = ["EXIT_CODE_GRADING", "RowInvalid", "instance_from_row"]

EXIT_CODE_GRADING = "exit-code"
"""The value of a row's ``grading`` field that says it is graded by its tests' exit code on purpose."""

_PARSER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/@+-]{0,199}$")


class RowInvalid(ValueError):
    """A row that cannot become a `TaskInstance`; the message says why."""

    def __init__(self, message: str, instance_id: str | None = None) -> None:
        super().__init__(message)
        self.instance_id = instance_id


_CORE_KEYS = {
    "instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch",
    "FAIL_TO_PASS", "PASS_TO_PASS", "fail_to_pass", "pass_to_pass", "version",
    "image_name", "image", "docker_image", "eval_script", "workdir", "data_source",
    "expected_statuses", "log_parser", "eval_type", "image_assets",
}  # fmt: skip


def _unwrap_slime(row: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None]:
    """slime rows are ``{"text", "metadata": {"instance": {...}, "data_source"}}``."""
    meta = row.get("metadata")
    if isinstance(meta, str):  # some writers store metadata as a JSON string
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            raise RowInvalid("metadata is a string but not valid JSON") from None
    if isinstance(meta, Mapping) and "instance" in meta:
        inst = meta["instance"]
        if not isinstance(inst, Mapping):
            raise RowInvalid(f"metadata.instance must be an object, got {type(inst).__name__}")
        return inst, meta.get("data_source") or inst.get("data_source")
    return row, None


def _r2e_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """Map an R2E-Gym row (repo_name, docker_image, parsed_commit_content, expected_output_json).

    R2E-Gym images hold the repo at /testbed and its hidden tests at /r2e_tests, run by
    ``run_tests.sh`` (``pytest -rA``); a fix is correct when the run's statuses equal
    ``expected_output_json``. The gold patch is only stored in parsed form, so ``patch``
    stays empty unless the row carries one.
    """
    out: dict[str, Any] = {}
    commit: Mapping[str, Any] = {}
    raw_commit = row.get("parsed_commit_content")
    if isinstance(raw_commit, str) and raw_commit.strip():
        try:
            commit = json.loads(raw_commit)
        except json.JSONDecodeError:
            raise RowInvalid("parsed_commit_content is not valid JSON") from None
    repo = row.get("repo") or row.get("repo_name")
    out["repo"] = repo
    commit_hash = row.get("commit_hash") or commit.get("new_commit_hash")
    if not row.get("instance_id") and repo and commit_hash:
        out["instance_id"] = f"{repo}__{repo}-{commit_hash}"
    out["base_commit"] = row.get("base_commit") or commit.get("old_commit_hash") or ""
    expected = row.get("expected_output_json")
    if isinstance(expected, str) and expected.strip():
        try:
            expected = json.loads(expected)
        except json.JSONDecodeError:
            raise RowInvalid("expected_output_json is not valid JSON") from None
    if expected is not None:
        if not isinstance(expected, Mapping):
            raise RowInvalid("expected_output_json must map test names to statuses")
        out["expected_statuses"] = dict(expected)
    return out


def instance_from_row(
    row: Mapping[str, Any],
    *,
    data_source: str | None = None,
    image_override: str | None = None,
) -> TaskInstance:
    """Normalize one row of any supported format; raises `RowInvalid` with a clear message."""
    if not isinstance(row, Mapping):
        raise RowInvalid(f"row must be a JSON object, got {type(row).__name__}")
    row, wrapped_source = _unwrap_slime(row)
    name = row.get("data_source") or wrapped_source or data_source
    looks_r2e = "instance_id" not in row and ("repo_name" in row or "docker_image" in row)
    source = DataSource.R2EGYM if looks_r2e and not name else DataSource.detect(name)
    fields: dict[str, Any] = {k: row[k] for k in _CORE_KEYS if k in row and row[k] is not None}
    if source is DataSource.R2EGYM:
        fields.update({k: v for k, v in _r2e_fields(row).items() if v})
    instance_id = fields.get("instance_id")
    id_text = instance_id if isinstance(instance_id, str) else None
    if not instance_id:
        raise RowInvalid("missing required field 'instance_id'")
    for upper, lower in (("FAIL_TO_PASS", "fail_to_pass"), ("PASS_TO_PASS", "pass_to_pass")):
        if upper in fields:
            fields[lower] = fields.pop(upper)
    if "version" in fields and not isinstance(fields["version"], str):
        raise RowInvalid(
            f"'version' must be a string, got {type(fields['version']).__name__} "
            f"{fields['version']!r} (quote it: a number loses e.g. the 0 of '3.10')",
            id_text,
        )
    try:
        image = image_for({**row, **fields}, source=source, override=image_override)
    except ValueError as exc:
        raise RowInvalid(str(exc), id_text) from None
    for key in ("image_name", "docker_image"):
        fields.pop(key, None)
    fields["image"] = image
    fields["data_source"] = name or source.value
    fields["extra"] = {k: v for k, v in row.items() if k not in _CORE_KEYS}
    _check_log_parser(fields.get("log_parser"), id_text)
    try:
        instance = TaskInstance.model_validate(fields)
    except ValidationError as exc:
        raise RowInvalid(_describe(exc), id_text) from None
    _check_grading(instance)
    return instance


def _check_log_parser(value: Any, instance_id: str | None) -> None:
    """A parser *name* (``parse_log_gotest``, ``pytest``, ``multi-swe-bench:org/repo``); anything else
    is refused in one line, never echoed whole (it may be pages of code)."""
    if value is None or value == "":
        return
    if not isinstance(value, str):
        raise RowInvalid(f"field 'log_parser' must be a parser name, got {type(value).__name__}", instance_id)
    if _PARSER_NAME.match(value):
        return
    lines = value.strip().splitlines() or [""]
    first = lines[0].strip()
    looks_code = "\n" in value.strip() or first.startswith(("def ", "import ", "from ", "class ", "lambda"))
    what = f"Python source ({len(lines)} lines, starting {first[:40]!r})" if looks_code else f"{first[:40]!r}"
    raise RowInvalid(
        f"field 'log_parser' holds {what}, not a parser name: code from a row is never run by the "
        "grader; give a swebench 5.x parser name (parse_log_gotest, parse_log_cargo, ...)",
        instance_id,
    )


def _check_grading(instance: TaskInstance) -> None:
    """FAIL_TO_PASS must name a test, unless the row's format grades another way on purpose."""
    if instance.fail_to_pass:
        return
    if instance.expected_statuses:  # R2E-Gym: the exact statuses a fix yields (its own rule)
        return
    if instance.extra.get("grading") == EXIT_CODE_GRADING:
        return
    raise RowInvalid(
        "FAIL_TO_PASS is empty: nothing tells a fix from no fix (a row graded by exit code on "
        f'purpose says "grading": "{EXIT_CODE_GRADING}")',
        instance.instance_id,
    )


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "row"
        if err["type"] == "missing":
            parts.append(f"missing required field '{where}'")
        else:
            parts.append(f"field '{where}': {err['msg']}")
    return "; ".join(parts)
