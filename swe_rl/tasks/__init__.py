"""Tasks: SWE task instances, their images and eval scripts, and loading them from datasets.

- `instance`: `TaskInstance` (one typed shape for every dataset family) and `DataSource`.
- `rows`: a row of any supported format → a `TaskInstance` (`instance_from_row`), or a `RowInvalid`.
- `loading`: files and dataset names → instances and per-row errors (`load_instances`).
- `images`: the Docker image of an instance, with user overrides (`image_for`).
- `eval_scripts`: the script that applies the test patch and runs the tests (`eval_script_for`), framed
  as swebench 5.x runs it (`official_script`).
- `assets`: a row's ``image_assets`` (binary files), fetched and written by the eval script.
- `specs`: how an instance's log is read: swebench 5.x's ``log_parser`` / ``eval_type`` (older rows: by repo).
- `networks`: which Docker network a container of an instance gets (`network_for`).
- `datasets`: one loader per public set (SWE-rebench V2, SWE-smith, Multi-SWE-bench, SWE-bench-Live,
  SWE-bench Multilingual) and the name → loader map (`convert_row`, `detect_format`).
- `pass_rates`: attempts of policies per instance, pass rates, pass-rate bands.

The names most callers need are importable from here.
"""

from swe_rl.tasks.eval_scripts import (
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    EvalSpecUnavailable,
    eval_script_for,
    official_script,
)
from swe_rl.tasks.images import default_image, image_for
from swe_rl.tasks.instance import DEFAULT_WORKDIR, DataSource, TaskInstance
from swe_rl.tasks.loading import LoadResult, RowError, load_instances
from swe_rl.tasks.rows import RowInvalid, instance_from_row

__all__ = [
    "DEFAULT_WORKDIR",
    "END_TEST_OUTPUT",
    "START_TEST_OUTPUT",
    "DataSource",
    "EvalSpecUnavailable",
    "LoadResult",
    "RowError",
    "RowInvalid",
    "TaskInstance",
    "default_image",
    "eval_script_for",
    "image_for",
    "instance_from_row",
    "load_instances",
    "official_script",
]
