"""Rewards as pure functions: outcome, pivot argument match, PRM step-bonus mix, per-trajectory advantages.

Nothing here knows slime or the fleet; `swe_rl.slime.reward` and `swe_rl.slime.post_process` call these.
"""
