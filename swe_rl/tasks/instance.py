"""`TaskInstance`: one typed shape for SWE-bench, SWE-Gym, R2E-Gym, fixture and slime rows.

Everything downstream (agent, grader, image pulling) reads a `TaskInstance`, so the quirks of each
dataset are settled once, when a row becomes an instance (`swe_rl.tasks.rows`). `DataSource` names
the dataset family, which decides image naming and eval-script defaults.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DEFAULT_WORKDIR", "DataSource", "TaskInstance"]

DEFAULT_WORKDIR = "/testbed"


class DataSource(str, Enum):
    """Where a row comes from; decides image naming and eval-script defaults."""

    SWEBENCH = "swe-bench"
    SWEGYM = "swe-gym"
    R2EGYM = "r2e-gym"
    FIXTURES = "swe-rl-fixtures"

    @classmethod
    def detect(cls, name: str | None) -> DataSource:
        """Classify a free-form dataset name ("SWE-Gym/SWE-Gym", "R2E-Gym/R2E-Gym-Lite", ...).

        "r2e" is checked before "gym" because R2E-Gym's name contains both.
        """
        low = (name or "").lower()
        if "r2e" in low:
            return cls.R2EGYM
        if "swe-rl-fixtures" in low:
            return cls.FIXTURES
        if "gym" in low:
            return cls.SWEGYM
        return cls.SWEBENCH


class TaskInstance(BaseModel):
    """One SWE task, normalized from any supported row format."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_id: str = Field(min_length=1)
    """Unique id, e.g. ``psf__requests-2317``."""
    repo: str = Field(min_length=1)
    """``owner/name`` on GitHub (R2E-Gym: its short repo name, e.g. ``pandas``)."""
    base_commit: str = ""
    """Commit the image's ``/testbed`` is at; eval scripts reset test files to it."""
    problem_statement: str
    """The issue text the agent is given."""
    patch: str = ""
    """Gold patch (source files only); empty when the dataset does not ship one."""
    test_patch: str = ""
    """Patch adding/updating the tests, applied by the eval script before the run."""
    fail_to_pass: list[str] = Field(default_factory=list)
    """Tests that fail before the gold patch and must pass after it."""
    pass_to_pass: list[str] = Field(default_factory=list)
    """Tests that pass before and must still pass after."""
    version: str = ""
    """SWE-bench repo version (selects install/test specs), e.g. ``"2.26"``."""
    image: str = Field(min_length=1)
    """Docker image the task runs in, after any user override."""
    eval_script: str | None = None
    """Bash script that applies the test patch and runs the tests, when the row ships one."""
    log_parser: str = ""
    """swebench 5.x parser name reading the test log (``parse_log_pytest``, ...); empty: by repo
    (`swe_rl.tasks.specs.log_parser_for`)."""
    eval_type: str = ""
    """swebench 5.x ``pass_and_fail`` or ``fail_only``; empty: by repo (`swe_rl.tasks.specs.eval_type_for`)."""
    image_assets: dict[str, list[dict[str, str]]] = Field(default_factory=dict)
    """Binary files a text patch cannot carry: ``{"test_patch": [{"path", "url"}], "patch": [...]}``."""
    workdir: str = DEFAULT_WORKDIR
    """Repository checkout inside the container."""
    data_source: str = DataSource.SWEBENCH.value
    """Dataset name as given by the row or caller (free form, see `DataSource.detect`)."""
    expected_statuses: dict[str, str] | None = None
    """R2E-Gym only: the exact test -> status map a correct fix yields (its own grading rule)."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Every other field of the row, kept verbatim (hints_text, created_at, ...)."""

    @field_validator("fail_to_pass", "pass_to_pass", mode="before")
    @classmethod
    def _decode_test_list(cls, value: Any) -> Any:
        # SWE-bench stores the lists as JSON strings; SWE-Gym and our fixtures as lists.
        if value is None:
            return []
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of test names: {exc.msg}") from None
        if hasattr(value, "tolist"):  # numpy arrays from pandas-read parquet
            value = value.tolist()
        if not isinstance(value, list):
            # pydantic turns ValueError (not TypeError) into a validation error
            raise ValueError(f"expected a list of test names, got {type(value).__name__}")
        return value

    @field_validator("image_assets", mode="before")
    @classmethod
    def _decode_assets(cls, value: Any) -> Any:
        # swebench 5.x datasets ship image_assets as a JSON string, local rows as an object.
        if value is None or value == "":
            return {}
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"image_assets is not valid JSON: {exc.msg}") from None
        return value

    @field_validator("eval_type", mode="before")
    @classmethod
    def _check_eval_type(cls, value: Any) -> Any:
        if value is None:
            return ""
        if value not in ("", "pass_and_fail", "fail_only"):
            raise ValueError(f"eval_type must be 'pass_and_fail' or 'fail_only', got {value!r}")
        return value

    @property
    def source(self) -> DataSource:
        """The dataset family this instance comes from."""
        return DataSource.detect(self.data_source)

    @property
    def setup_patch(self) -> str:
        """The patch that puts this task's bug into a shared per-repo image (SWE-smith), else ""."""
        return str(self.extra.get("setup_patch") or "")

    @property
    def has_test_lists(self) -> bool:
        """Whether FAIL_TO_PASS / PASS_TO_PASS grading applies (else exit-code grading)."""
        return bool(self.fail_to_pass or self.pass_to_pass)
