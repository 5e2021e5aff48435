"""The process-reward mix: the outcome plus a step bonus from the PRM judge's score (`swe_rl.rewards.prm`).

A step sample gets ``outcome + step_coef × its step's score``; a whole-trajectory sample the mean step
score instead. A step the judge did not score (failed, invalid, timed out) leaves the outcome alone.
The advantage post-process normalises the outcome alone and adds the bonus afterwards (docs/prm.md).
"""

from __future__ import annotations

__all__ = ["mixed_reward"]


def mixed_reward(outcome: float, step_score: float | None, coef: float) -> float:
    """outcome + coef × step_score; a missing score leaves the outcome alone."""
    return float(outcome) if step_score is None else float(outcome) + coef * float(step_score)
