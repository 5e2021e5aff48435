"""`FleetGrader`: grade a patch in a fresh container of the instance's image.

The agent's container is never reused for grading (the agent may have changed tests,
installed things, left processes behind). A fresh lease runs the grading pipeline
(`swe_rl.grading.pipeline`): with integrity on (default) the canonical patch, the tree rules,
the capability scan, the test run with canaries, the strict verdict, and the official verdict on
the full patch beside it (``GradeResult.official``); with integrity off, the official harness's
walk. Anything the fleet gets wrong (unreachable, image missing, container lost) and an eval
script that cannot be had give status ``env_error``, never a score.
"""

from __future__ import annotations

from swe_rl.fleet.client import EnvClient
from swe_rl.grading.config import GraderConfig
from swe_rl.grading.logs import LogGrader
from swe_rl.grading.pipeline import grade_patch
from swe_rl.grading.result import GradeResult
from swe_rl.tasks import TaskInstance

__all__ = ["FleetGrader", "GraderConfig"]


class FleetGrader:
    """Grades on the fleet through `client`; `log_grader` picks the log parser (default: swebench's)."""

    def __init__(
        self, client: EnvClient, config: GraderConfig | None = None, log_grader: LogGrader | None = None
    ) -> None:
        self.client = client
        self.config = config or GraderConfig()
        self.log_grader = log_grader

    async def grade(self, instance: TaskInstance, patch: str) -> GradeResult:
        return await grade_patch(self.client, self.config, self.log_grader, instance, patch)
