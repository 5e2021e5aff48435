#!/usr/bin/env bash
# shellcheck disable=SC2034  # the settings below are read by lib/swe_rl_common.sh
# Qwen3-32B, 8 nodes x 8 GPUs, auto-resume: a FIXED checkpoint folder (SAVE_CKPT, default
# output/ckpt/swe-rl-32b-remote-8nodes_${CKPT_TAG:-fixed}); re-running the same command continues
# from its latest iteration. The first run starts from REF_LOAD, a Megatron torch_dist checkpoint
# converted once from the HF checkpoint (on a GPU node, from the slime checkout):
#
#   source scripts/models/qwen3-32B.sh        # this repository's; sets MODEL_ARGS
#   cd "$SLIME_DIR" && PYTHONPATH="$MEGATRON_DIR" torchrun --nproc-per-node 8 \
#     tools/convert_hf_to_torch_dist.py "${MODEL_ARGS[@]}" \
#     --hf-checkpoint /path/to/Qwen3-32B --save "$EXPORT_ROOT/ckpt/qwen3-32b_torch_dist"
#
# REF_LOAD defaults to that output path ($EXPORT_ROOT/ckpt/qwen3-32b_torch_dist).
# Rollout artifacts still go to a timestamped output/swe_rollouts/... folder per launch.
# Required: HF_CKPT (tokenizer, SGLang), PROMPT_DATA, SLIME_DIR, MEGATRON_DIR, SWE_POOL_EXEC_URLS,
# SWE_EXEC_TOKEN(_FILE); REF_LOAD must exist. DRY_RUN=1 or --dry-run prints, runs nothing.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/swe_rl_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/swe_rl_common.sh"

RUN_NAME="${RUN_NAME:-swe-rl-32b-remote-8nodes}"
MODEL_NAME=qwen3-32B
NUM_NODES=8
CKPT_MODE=resume
REF_LOAD="${REF_LOAD:-${EXPORT_ROOT:-$SWE_ROOT/output}/ckpt/qwen3-32b_torch_dist}"
ACTOR_NODES="${ACTOR_NODES:-4}"
ROLLOUT_GPUS="${ROLLOUT_GPUS:-32}"
ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-4}"
TP="${TP:-8}"
OPTIMIZER_CPU_OFFLOAD="${OPTIMIZER_CPU_OFFLOAD:-1}"
ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-16}"

swe_main "$@"
