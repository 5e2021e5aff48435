#!/usr/bin/env bash
# shellcheck disable=SC2034  # the settings below are read by lib/swe_rl_common.sh
# Qwen3-8B with PRM step rewards, 5 nodes x 8 GPUs: nodes 0-3 form the ray cluster (actor on
# nodes 0-1, TP 2; 8 SGLang engines of TP 2 on nodes 2-3), node 4 serves the PRM judge with its
# own SGLang (PRM_MODEL_PATH, port PRM_PORT, data parallel over its 8 GPUs).
# Run the same command on every node (NODE_RANK 0..4; rank 4 becomes the prm node). The head
# waits for the judge at SWE_PRM_URL (e.g. http://<node-4>:30010/v1) before submitting.
# The PRM settings reach the plugin as SWE_PRM_ENABLE=1, SWE_PRM_URL, SWE_PRM_MODEL,
# SWE_PRM_M (votes, 3) and SWE_PRM_STEP_COEF (1.0).
# Required: HF_CKPT, PROMPT_DATA, SLIME_DIR, MEGATRON_DIR, SWE_POOL_EXEC_URLS, SWE_EXEC_TOKEN(_FILE),
# PRM_MODEL_PATH, SWE_PRM_URL. DRY_RUN=1 or --dry-run prints, runs nothing.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/swe_rl_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/swe_rl_common.sh"

RUN_NAME="${RUN_NAME:-swe-rl-8b-prm-5nodes-remote}"
MODEL_NAME=qwen3-8B
NUM_NODES=5
TRAIN_NODES=4
WITH_PRM=1
ACTOR_NODES="${ACTOR_NODES:-2}"
ROLLOUT_GPUS="${ROLLOUT_GPUS:-16}"
ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-2}"
TP="${TP:-2}"
ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-16}"
export SWE_PRM_ENABLE=1 SWE_PRM_MODEL="${SWE_PRM_MODEL:-prm}" SWE_PRM_M="${SWE_PRM_M:-3}"
export SWE_PRM_STEP_COEF="${SWE_PRM_STEP_COEF:-1.0}"

swe_main "$@"
