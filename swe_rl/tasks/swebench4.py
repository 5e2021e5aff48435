"""swebench 4.1.0 beside the pinned 5.x, for rows of the 4.x schema (no ``eval_script``).

Public SWE-bench rows (Verified, Lite, SWE-Gym) name a repo and a version; only swebench 4.x builds
their eval scripts (from its repo/version specs, offline), and the pinned 5.x dropped those specs.
The set-up (scripts/install_package.sh) places 4.1.0 in a folder of its own, never on the normal
import path: ``~/.cache/swe-rl/swebench-4.1.0`` (``SWE_SWEBENCH4_DIR`` names another). The tools that
read rows (`swe-preprocess`, `swe-eval` on a rows file, `swe-convert-rows`) convert such rows in one
step: a child interpreter with that folder first on ``PYTHONPATH`` runs `swe_rl.data.convert_rows`
(this process keeps 5.x). A missing folder is installed on demand (``pip install --target``, said on
stderr); when that cannot be done, `ConversionUnavailable` carries the exact command that makes it
possible, and nothing is written.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from swe_rl.tasks.instance import DataSource, TaskInstance
from swe_rl.tasks.loading import load_instances
from swe_rl.tasks.records import instance_record

__all__ = [
    "REQUIREMENT",
    "ConversionUnavailable",
    "convert_instances",
    "convert_rows_file",
    "ensure_side_folder",
    "install_command",
    "needs_conversion",
    "side_folder",
]

REQUIREMENT = "swebench==4.1.0"


class ConversionUnavailable(RuntimeError):
    """swebench 4.1.0 is not in its folder and could not be installed there; the message says how."""


def side_folder() -> Path:
    """``SWE_SWEBENCH4_DIR``, else ``$XDG_CACHE_HOME`` (``~/.cache``) ``/swe-rl/swebench-4.1.0``."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "swe-rl" / "swebench-4.1.0"
    return Path(os.environ.get("SWE_SWEBENCH4_DIR") or default).expanduser()


def install_command(folder: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(folder), REQUIREMENT]


def needs_conversion(instance: TaskInstance) -> bool:
    """A row without its eval script whose script only swebench 4.x can build (R2E-Gym has its own)."""
    return not instance.eval_script and instance.source is not DataSource.R2EGYM


def ensure_side_folder(err: TextIO) -> Path:
    """The folder holding swebench 4.1.0, installed there first when missing."""
    folder = side_folder()
    if (folder / "swebench" / "__init__.py").is_file():
        return folder
    print(f"installing {REQUIREMENT} into {folder} (once): rows without eval_script need its specs", file=err)
    tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        done = subprocess.run(install_command(tmp), capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (tmp / "swebench" / "__init__.py").is_file():
            reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["pip failed"]
            raise ConversionUnavailable(
                f"rows without eval_script need {REQUIREMENT}, which is not in {folder} and could not be "
                f"installed there ({reason[0]}). Make it possible with:\n  {shlex.join(install_command(folder))}\n"
                "(or set SWE_SWEBENCH4_DIR to a folder holding it), then run the same command again"
            )
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"installed {REQUIREMENT} into {folder}", file=err)
    return folder


def convert_rows_file(source: Path, output: Path, err: TextIO) -> int:
    """Run `swe_rl.data.convert_rows` under swebench 4.1.0 (a child interpreter); its exit status.
    Its reports (rows left out) reach ``err``."""
    folder = ensure_side_folder(err)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "swe_rl.data.convert_rows", "--here", str(source), str(output)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.stderr:
        err.write(done.stderr)
    return done.returncode


def convert_instances(instances: Sequence[TaskInstance], err: TextIO) -> tuple[list[TaskInstance], list[str]]:
    """``instances`` with the 4.x-schema ones converted (order kept), and the ids that could not be
    (a repo or version 4.x does not know): those stay as they were, as before this step existed."""
    todo = [i for i in instances if needs_conversion(i)]
    if not todo:
        return list(instances), []
    print(f"{len(todo)} row(s) without eval_script: converting them with {REQUIREMENT}", file=err)
    with tempfile.TemporaryDirectory(prefix="swe-rows-") as tmp:
        src, dst = Path(tmp) / "rows.jsonl", Path(tmp) / "converted.jsonl"
        src.write_text("".join(json.dumps(instance_record(i), default=str) + "\n" for i in todo))
        convert_rows_file(src, dst, err)
        converted = load_instances(str(dst)).instances if dst.is_file() else []
    by_id = {i.instance_id: i for i in converted}
    unconverted = [i.instance_id for i in todo if i.instance_id not in by_id]
    return [by_id.get(i.instance_id, i) if needs_conversion(i) else i for i in instances], unconverted
