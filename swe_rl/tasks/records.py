"""An instance as a flat SWE-bench-style row: what `instance_from_row` reads back unchanged.

Used by the rows `swe-preprocess` writes (`swe_rl.data.slime_rows`) and by the conversion of 4.x-schema
rows (`swe_rl.tasks.swebench4`).
"""

from __future__ import annotations

from typing import Any

from swe_rl.tasks.instance import TaskInstance

__all__ = ["instance_record"]


def instance_record(inst: TaskInstance) -> dict[str, Any]:
    """The instance as a flat SWE-bench-style row that `instance_from_row` reads back unchanged."""
    record: dict[str, Any] = {
        "instance_id": inst.instance_id,
        "repo": inst.repo,
        "base_commit": inst.base_commit,
        "problem_statement": inst.problem_statement,
        "patch": inst.patch,
        "test_patch": inst.test_patch,
        "FAIL_TO_PASS": list(inst.fail_to_pass),
        "PASS_TO_PASS": list(inst.pass_to_pass),
        "version": inst.version,
        "image_name": inst.image,
        "workdir": inst.workdir,
        "data_source": inst.data_source,
    }
    if inst.eval_script is not None:
        record["eval_script"] = inst.eval_script
    if inst.expected_statuses is not None:
        record["expected_statuses"] = dict(inst.expected_statuses)
    for key in ("log_parser", "eval_type"):  # swebench 5.x's row fields, when known
        if getattr(inst, key):
            record[key] = getattr(inst, key)
    if inst.image_assets:
        record["image_assets"] = inst.image_assets
    # Extra fields never collide with the ones above: the loader puts those in typed fields.
    record.update(inst.extra)
    return record
