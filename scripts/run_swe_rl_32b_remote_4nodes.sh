#!/usr/bin/env bash
# shellcheck disable=SC2034  # the settings below are read by lib/swe_rl_common.sh
# Qwen3-32B, 4 nodes x 8 GPUs, fresh start from the HF checkpoint, SWE rollouts on the remote fleet.
# Layout: actor on nodes 0-1 (TP 8, DP 2, optimizer on CPU), 4 SGLang engines (TP 4) on nodes 2-3.
# Run the same command on every node (NODE_RANK 0..3, MASTER_ADDR = node 0).
# Required: HF_CKPT, PROMPT_DATA, SLIME_DIR, MEGATRON_DIR, SWE_POOL_EXEC_URLS, SWE_EXEC_TOKEN(_FILE).
# DRY_RUN=1 or --dry-run prints the commands, runs nothing. See docs/training.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/swe_rl_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/swe_rl_common.sh"

RUN_NAME="${RUN_NAME:-swe-rl-32b-remote-4nodes}"
MODEL_NAME=qwen3-32B
NUM_NODES=4
ACTOR_NODES="${ACTOR_NODES:-2}"
ROLLOUT_GPUS="${ROLLOUT_GPUS:-16}"
ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-4}"
TP="${TP:-8}"
OPTIMIZER_CPU_OFFLOAD="${OPTIMIZER_CPU_OFFLOAD:-1}"
ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-16}"

swe_main "$@"
