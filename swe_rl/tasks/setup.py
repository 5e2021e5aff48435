"""Task set-up at the start of a container, for images shared by many tasks (one image per repo).

SWE-smith ships one image per repository whose HEAD is the clean code; each task's row carries the
patch that *introduces* its bug (``setup_patch``). Before anything else runs in a container of such
a task, the bug goes in:

- **agent episodes** (`commit=True`): the patch is applied to the work tree and the index and the
  result becomes the repository's only commit (no parent, fixed author and date). The bug is then
  neither a change ``git diff``/``git status`` show nor a commit ``git log -p``/``git show`` reveal,
  and the clean code is reachable from no ref: git hygiene, which runs next, prunes it from the
  object store. (Keeping the earlier history would keep the clean file's blob, and with it the fix.)
- **grading** (`commit=False`): the patch is applied to the work tree only. HEAD stays the clean
  commit, so an eval script that restores test files from it still finds them; the baseline recorded
  next holds the bug, so the agent's patch applies on top of it as it did in the episode.

Pure text plus one small async helper over anything with ``exec`` (a fleet lease or an agent
environment, the in-process one included): the patch travels inside the command, base64-encoded, so
no file is written outside the repository. A patch that does not apply is `TaskSetupFailed`, the
instance's fault, never a score.
"""

from __future__ import annotations

import base64
import shlex
from typing import Any, Protocol

from swe_rl.tasks.instance import TaskInstance

__all__ = ["TaskSetupFailed", "needs_setup", "set_up_task", "setup_script"]

_NOT_APPLIED = 97
_GIT_ENV = (
    "export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=/nonexistent GIT_TERMINAL_PROMPT=0 "
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*' "
    "GIT_AUTHOR_NAME=swe-rl GIT_AUTHOR_EMAIL=swe-rl@localhost GIT_COMMITTER_NAME=swe-rl "
    "GIT_COMMITTER_EMAIL=swe-rl@localhost GIT_AUTHOR_DATE='2000-01-01T00:00:00+0000' "
    "GIT_COMMITTER_DATE='2000-01-01T00:00:00+0000'"
)


class TaskSetupFailed(RuntimeError):
    """The task's set-up patch does not apply to its image: the instance is broken, not the policy."""


class _Container(Protocol):
    async def exec(self, command: str, timeout: float | None = None) -> Any: ...


def needs_setup(instance: TaskInstance) -> bool:
    """Whether the instance's container needs its set-up patch (a shared, per-repo image)."""
    return bool(instance.setup_patch.strip())


def setup_script(instance: TaskInstance, *, commit: bool) -> str:
    """The sh script that applies the instance's set-up patch in its repository (see the module doc)."""
    encoded = base64.b64encode(instance.setup_patch.encode("utf-8")).decode("ascii")
    target = "--index " if commit else ""
    lines = [
        "set -u",
        f"cd {shlex.quote(instance.workdir)} || exit 2",
        _GIT_ENV,
        f"printf '%s' '{encoded}' | base64 -d | git apply {target}--whitespace=nowarn - "
        f'|| {{ echo "the set-up patch does not apply"; exit {_NOT_APPLIED}; }}',
    ]
    if commit:
        lines += [
            "tree=$(git write-tree) || exit 3",
            'root=$(git commit-tree "$tree" -m "Task repository") || exit 3',
            'git update-ref HEAD "$root" || exit 3',
        ]
    return "\n".join(lines) + "\n"


async def set_up_task(container: _Container, instance: TaskInstance, *, commit: bool) -> bool:
    """Apply the instance's set-up patch in `container` (no-op for per-task images); True when applied."""
    if not needs_setup(instance):
        return False
    result = await container.exec(setup_script(instance, commit=commit), timeout=300)
    if result.returncode != 0:
        output = (getattr(result, "output", "") or "")[-2000:]
        raise TaskSetupFailed(f"{instance.instance_id}: set-up failed ({result.returncode}): {output}")
    return True
