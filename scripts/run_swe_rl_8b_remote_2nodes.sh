#!/usr/bin/env bash
# shellcheck disable=SC2034  # the settings below are read by lib/swe_rl_common.sh
# Qwen3-8B, 2 nodes x 8 GPUs, fresh start from the HF checkpoint, SWE rollouts on the remote fleet.
# Layout: actor (Megatron) on node 0, 4 SGLang engines (TP 2) on node 1; async, non-colocated.
# Run the same command on both nodes (NODE_RANK=0 on the head, 1 on the worker; MASTER_ADDR = head).
# Required: HF_CKPT, PROMPT_DATA, SLIME_DIR, MEGATRON_DIR, SWE_POOL_EXEC_URLS, SWE_EXEC_TOKEN(_FILE).
# Everything else has a default (docs/training.md); DRY_RUN=1 or --dry-run prints, runs nothing.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/swe_rl_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/swe_rl_common.sh"

RUN_NAME="${RUN_NAME:-swe-rl-8b-remote-2nodes}"
MODEL_NAME=qwen3-8B
NUM_NODES=2
ACTOR_NODES="${ACTOR_NODES:-1}"
ROLLOUT_GPUS="${ROLLOUT_GPUS:-8}"
ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-2}"
TP="${TP:-2}"
ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-16}"   # x 8 samples = 128 rollouts = SWE_MAX_CONCURRENT

swe_main "$@"
