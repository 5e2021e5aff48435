"""What the exec server answers when a command's container fails under it, on a scripted backend (fast):
a container that died under a command is 410, a full node disk is 507, and a command that merely
failed in a live container keeps its own result. The Docker side: tests/grading/test_grading_faults.py
and tests/fleet/fakes/test_chaos.py (grading_kill, disk_full)."""

from __future__ import annotations

import time

import pytest

from swe_rl.fleet.exec.backend import BackendError, Conflict
from swe_rl.fleet.exec.containers import ContainerRecord
from swe_rl.fleet.exec.executor import CommandOutcome
from swe_rl.fleet.exec.operations import Operations
from swe_rl.fleet.protocol import ApiError

ENOSPC = b"error: unable to write new index file: No space left on device\n"


def outcome(returncode: int, output: bytes = b"") -> CommandOutcome:
    return CommandOutcome(returncode, output, b"", False, False, len(output), 0.01)


class ScriptedBackend:
    """Answers the command under test with `first`, then each probe (`true`, `df`) in turn."""

    def __init__(self, first: CommandOutcome, *probes: CommandOutcome | Exception) -> None:
        self.answers: list[CommandOutcome | Exception] = [first, *probes]
        self.commands: list[str] = []

    def exec_run(self, container_id: str, command: str, **kw: object) -> CommandOutcome:
        self.commands.append(command)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def run(backend: ScriptedBackend) -> CommandOutcome:
    ops = Operations.__new__(Operations)
    ops.backend = backend  # type: ignore[assignment]
    now = time.time()
    rec = ContainerRecord("c" * 64, "n", "img", "lease", "owner", "/testbed", now, now + 60, 60, now)
    return ops._run(rec, "the command", timeout=10, workdir=None, env=None, max_output=1024)


def df(avail_kib: int) -> CommandOutcome:
    return outcome(0, f"overlay 1000000 900000 {avail_kib} 99% /\n".encode())


def test_a_container_that_died_under_the_command_is_410():
    with pytest.raises(ApiError) as err:
        run(ScriptedBackend(outcome(137), Conflict("container is not running")))
    assert err.value.status == 410 and "died during the command" in err.value.message


def test_a_sigkill_in_a_live_container_is_the_commands_own_result():
    backend = ScriptedBackend(outcome(137), outcome(0))
    assert run(backend).returncode == 137 and backend.commands == ["the command", "true"]


def test_a_full_node_disk_is_507():
    with pytest.raises(ApiError) as err:
        run(ScriptedBackend(outcome(128, ENOSPC), df(12)))
    assert err.value.status == 507 and "no space left" in err.value.message


def test_a_node_that_cannot_start_the_disk_probe_is_full():
    with pytest.raises(ApiError) as err:
        run(ScriptedBackend(outcome(1, ENOSPC), BackendError("OCI runtime exec failed")))
    assert err.value.status == 507


def test_an_image_without_df_keeps_the_commands_result():
    assert run(ScriptedBackend(outcome(1, ENOSPC), outcome(127, b"sh: df: not found"))).returncode == 1


def test_no_space_on_a_disk_that_has_room_is_the_commands_own_result():
    """ENOSPC from a tmpfs the command filled, not the container's root: the command's failure."""
    assert run(ScriptedBackend(outcome(1, ENOSPC), df(5_000_000))).returncode == 1


def test_a_failure_without_enospc_or_a_kill_asks_nothing():
    backend = ScriptedBackend(outcome(1, b"FAILED test_x"))
    assert run(backend).returncode == 1 and backend.commands == ["the command"]
