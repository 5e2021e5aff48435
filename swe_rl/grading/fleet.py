"""`FleetGrader`: grade a patch in a fresh container of the instance's image.

The agent's container is never reused for grading (the agent may have changed tests,
installed things, left processes behind). A fresh lease applies the patch and runs the
instance's eval script (`Lease.evaluate`); `swe_rl.grading.logs.grade` then reads the log.
Anything the fleet gets wrong (unreachable, image missing, container lost) and an eval
script that cannot be had give status ``env_error``, never a score.

With integrity grading on (default, `swe_rl.grading.fleet_integrity`), what reaches the test run is
the agent's patch without its changes to tests and test infrastructure, judged strictly; the
official verdict on the full patch is kept beside it (``GradeResult.official``).
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.fleet.client import EnvClient, FleetError
from swe_rl.grading.baseline import record_baseline
from swe_rl.grading.fleet_integrity import finish_integrity, neutralise_on
from swe_rl.grading.integrity import IntegrityConfig
from swe_rl.grading.logs import LogGrader, grade
from swe_rl.grading.result import GradeResult, GradeStatus
from swe_rl.tasks import EvalSpecUnavailable, TaskInstance, eval_script_for
from swe_rl.tasks.networks import network_for

__all__ = ["FleetGrader", "GraderConfig"]

log = logging.getLogger(__name__)

MAX_APPLY_OUTPUT = 16 << 10


class GraderConfig(BaseModel):
    """How patches are graded on the fleet."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    eval_timeout: float = 1800.0
    """Seconds the instance's tests may run before the grade is eval_timeout."""
    network: bool | str | None = None
    """Network of the grading container: False/"none", True/"default" (Docker's bridge), or the name of a
    network the exec servers allow (``SWE_EXEC_NETWORKS``); None: the instance row's ``network``, else none."""
    test_empty_patch: bool = True
    """Run the tests of an empty patch too (status stays no_patch; the result is a tests-without-patch
    baseline); False answers no_patch without a container (training, where it saves the fleet)."""
    record_baseline: bool = True
    """Record the grading container's untracked files before the patch goes in, so that any diff taken
    there is the patch's effect only."""
    integrity: IntegrityConfig = Field(default_factory=IntegrityConfig)
    """Tamper-proof grading: neutralise test/infrastructure changes, strict verdict, official verdict beside it."""


class FleetGrader:
    """Grades on the fleet through `client`; `log_grader` picks the log parser (default: swebench's)."""

    def __init__(
        self, client: EnvClient, config: GraderConfig | None = None, log_grader: LogGrader | None = None
    ) -> None:
        self.client = client
        self.config = config or GraderConfig()
        self.log_grader = log_grader

    async def grade(self, instance: TaskInstance, patch: str) -> GradeResult:
        empty = not patch or not patch.strip()
        if empty and not self.config.test_empty_patch:  # no container needed to say so
            return grade(instance, patch=patch, apply_status=False, test_log="")
        network = network_for(instance, self.config.network)
        try:
            script = eval_script_for(instance)
        except EvalSpecUnavailable as exc:  # (an empty patch stays no_patch whatever happens below)
            return grade(instance, patch=patch, apply_status=False, test_log="", env_error=str(exc))
        try:
            async with self.client.lease(
                instance.image,
                instance_id=instance.instance_id,
                workdir=instance.workdir,
                network=network,
                expected=0,
            ) as lease:  # nothing follows a grading lease: warm nothing
                if self.config.record_baseline:
                    await record_baseline(lease)
                ran, tamper = patch, None
                if self.config.integrity.enable and not empty:
                    ran, tamper = await neutralise_on(lease, instance, patch, script, self.config.integrity)
                run = await lease.evaluate(ran, script, timeout=self.config.eval_timeout)
        except FleetError as exc:
            log.warning("grading %s failed on the fleet: %s", instance.instance_id, exc)
            if empty:
                result = grade(instance, patch=patch, apply_status=False, test_log="")
                result.message += f"; the tests without a patch could not run: {type(exc).__name__}: {exc}"
                return result
            result = grade(
                instance,
                patch=patch,
                apply_status=False,
                test_log="",
                env_error=f"grading container: {type(exc).__name__}: {exc}",
            )
            result.network = network
            return result
        if empty:  # the verdict is no_patch; the tests' outcome is kept as the baseline
            result = grade(
                instance,
                patch="(tests without a patch)",
                apply_status=True,
                test_log=run.test_log,
                timed_out=run.timed_out,
                returncode=run.returncode,
                grader=self.log_grader,
            )
            result = result.model_copy(
                update={
                    "status": GradeStatus.NO_PATCH,
                    "resolved": False,
                    "message": f"empty patch; tests without a patch: {result.message}",
                }
            )
        else:
            result = grade(
                instance,
                patch=ran,
                apply_status=run.apply_status == "applied",
                test_log=run.test_log,
                timed_out=run.timed_out,
                returncode=run.returncode,
                grader=self.log_grader,
                strict=tamper is not None,
            )
        result.apply_strategy = run.apply_strategy
        result.apply_output = (run.apply_output or "")[-MAX_APPLY_OUTPUT:]
        result.eval_seconds = run.duration
        result.network = network
        result.test_log = run.test_log or ""
        if tamper is not None:
            result = await finish_integrity(self, instance, patch, result, run, tamper)
        return result
