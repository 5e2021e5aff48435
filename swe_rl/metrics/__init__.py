"""The figures a run is watched by: `rollout` (per-trajectory dashboard figures of a batch or an eval
run) and `integrity` (per-rollout integrity fields and their run-level rates). Pure functions, no slime."""
