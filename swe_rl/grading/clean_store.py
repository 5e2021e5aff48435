"""A task's clean-tree answers kept on disk, for every later process that grades the task.

`prerun` keeps a task's clean-tree answers (the test files' text, the probe's report on the clean tree,
the image's interpreter) in its process after the first grading: the group's other patches reuse them.
The first grading in each process still pays for them — a whole ``pytest --collect-only`` of the clean
tree, about a tenth of a group's integrity cost (issue 48) — and RL grades every task in many processes
and epochs. Certification grades every task's gold patch before training anyway: with a store directory
(``GraderConfig.clean_store``, ``SWE_CLEAN_STORE``) what it asked is written here and read back by any
grading of the same task afterwards.

What makes a stored answer the task's answer:

- **The image's content, not its name**: the key holds the image ID the fleet reported for the grading
  container (`Lease.image_id`); a lease without one (an older node or pool) neither reads nor writes.
- **The whole task**: the instance row as JSON (its test patch, its set-up), the eval script, the stages on.
- **The grader's own code**: a digest of every module of `swe_rl.grading`, so that a grader whose probe
  or reader changed never reads what an older one asked.
- **A second look before a void**: a grading voided because the runner's configuration differed from a
  *stored* clean answer drops it and grades again asking the clean tree live (`pipeline.grade_patch`), so a
  stored answer can spare work but never decide a void alone.

Only complete answers are written (as `prerun` keeps them); a file that does not parse is a miss. Files
are written whole (a temporary file renamed), so concurrent graders never read half an answer.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from swe_rl.grading.patch.canonical import InterpreterFacts
from swe_rl.grading.runner.probe import ProbeReport
from swe_rl.grading.runner.probe_languages import LanguageProbePlan, LanguageProbeReport

__all__ = [
    "STORE_ENV",
    "CleanAnswers",
    "CleanStore",
    "StoredClean",
    "beside_ledger",
    "found_beside",
    "grader_digest",
    "store_for",
]

STORE_ENV = "SWE_CLEAN_STORE"
"""The store directory when the grader's config names none."""
FORMAT = 1


class CleanAnswers(BaseModel):
    """One task's clean-tree answers and the names its probe ran under (`prerun` keeps them)."""

    model_config = ConfigDict(extra="forbid")

    names: tuple[str, str] | None
    sources: dict[str, str | None]
    clean: ProbeReport | None
    language_plan: LanguageProbePlan | None
    language_clean: LanguageProbeReport | None
    interpreter: InterpreterFacts | None = None
    """What the image's interpreter answered (None: no interpreter answered; asked again)."""

    def answers(self) -> dict[str, Any]:
        """The answers themselves (the same objects), to make the other kind of answers from."""
        return {name: getattr(self, name) for name in CleanAnswers.model_fields}


class StoredClean(CleanAnswers):
    """One task's clean-tree answers as the store holds them."""

    format: int = FORMAT
    key: str
    """The full key (`CleanStore.key`): a file renamed to another key's name is not that key's answer."""


@cache
def grader_digest() -> str:
    """A digest of every module of `swe_rl.grading` (what asks and reads the clean tree)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class CleanStore:
    """A directory of stored clean-tree answers, one JSON file per (task, image ID, grader code)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @staticmethod
    def key(task_key: str, instance_json: str, image_id: str) -> str:
        parts = (grader_digest(), task_key, instance_json, image_id)
        return hashlib.sha256(repr(parts).encode("utf-8", "surrogateescape")).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> StoredClean | None:
        try:
            stored = StoredClean.model_validate_json(self._path(key).read_bytes())
        except (OSError, ValidationError):
            return None
        return stored if stored.key == key and stored.format == FORMAT else None

    def put(self, stored: StoredClean) -> None:
        """Write one answer whole (a failure to write is not the grading's failure: it is skipped)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(stored.model_dump_json())
                os.replace(tmp, self._path(stored.key))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            return

    def has(self, key: str) -> bool:
        return self._path(key).is_file()

    def drop(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


def beside_ledger(ledger: str | os.PathLike[str]) -> str:
    """The store certification writes next to its ledger (``<ledger>.clean-trees``), where the plugin's
    ``swe_require_certified`` finds it without another setting."""
    return f"{os.fspath(ledger)}.clean-trees"


def found_beside(ledger: str | os.PathLike[str] | None) -> str | None:
    """The store beside a certification ledger when certification wrote one there (else None)."""
    if not ledger:
        return None
    beside = beside_ledger(ledger)
    return beside if os.path.isdir(beside) else None


def store_for(directory: str | None) -> CleanStore | None:
    """The store of a config's directory (None: ``SWE_CLEAN_STORE``, else no store; '': no store)."""
    if directory is None:
        directory = os.environ.get(STORE_ENV, "")
    return CleanStore(directory) if directory else None
