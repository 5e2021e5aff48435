"""The slime layer: the only part of swe_rl that knows slime (imported lazily, so it installs without it).

Entry points given to slime on its command line:

- ``--custom-generate-function-path swe_rl.slime.e2e.generate`` (end-to-end; pivot rows are handed on) or
  ``swe_rl.slime.pivot.generate`` (stage-1 pivot mode), ``swe_rl.slime.agent_generate.generate``
  (upstream's coding-agent example on our fleet);
- ``--custom-rm-path swe_rl.slime.reward.reward_func`` (both modes);
- ``--custom-reward-post-process-path swe_rl.slime.post_process.post_process_rewards``;
- ``--dynamic-sampling-filter-path swe_rl.slime.filters.check_trajectory_reward_nonzero_std``;
- ``--custom-rollout-log-function-path swe_rl.slime.metrics.log_rollout_data`` (and its eval twin);
- ``--custom-config-path configs/plugin_swe.yaml`` (the ``swe_*`` keys of `swe_rl.slime.config.PluginConfig`).

Shared by both modes: `runtime` (the process state, slime's abort flag and options), `samples` (sample
builders), `records` (what generate stores in ``sample.metadata``), `reward`. The reward math itself is
pure and lives in `swe_rl.rewards`.
"""
