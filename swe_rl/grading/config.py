"""`GraderConfig`: how patches are graded on the fleet (the settings of every grading pipeline stage)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.grading.integrity import IntegrityConfig

__all__ = ["GraderConfig"]


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
    clean_store: str | None = None
    """A directory keeping each task's clean-tree answers across processes (`grading.clean_store`): a
    certification run writes them, later gradings of the same task on the same image ID read them instead
    of asking the clean tree again. None: ``SWE_CLEAN_STORE``, else none; '': none (in the process only)."""
    integrity: IntegrityConfig = Field(default_factory=IntegrityConfig)
    """Tamper-proof grading: the canonical patch, tree rules, capability scan, canaries, strict verdict,
    and the official verdict beside it."""
