#!/usr/bin/env bash
# shellcheck disable=SC2034  # the settings below are read by lib/swe_rl_common.sh
# Two-stage SWE RL for Qwen3-30B-A3B-Thinking-2507, stage 1: pivot. Single-turn decision points
# cut from expert trajectories (PROMPT_DATA from data/ pivot building), no sandbox; the reward
# compares the policy's action with the expert's (swe_rl.slime.pivot.generate / swe_rl.slime.reward.reward_func).
# Recipe where slime supports it: GRPO without KL, clip 0.2 / 0.28, constant lr 1e-6, MoE router
# frozen (--freeze-params-name-list) and aux loss 0, async non-colocated generation (train_async.py),
# thinking chat template (configs/chat_template_qwen3_thinking.jinja via the plugin YAML),
# 8 samples per prompt, 64 prompts per rollout, Megatron TP 2 x EP 8.
# Default layout: 4 nodes (actor nodes 0-1, 4 SGLang engines of TP 4 on nodes 2-3); for the
# recipe's scale set NUM_NODES=24 ACTOR_NODES=16 ROLLOUT_GPUS=64.
# The fleet is used by pivot samples only with swe_pivot_reward: execute (docs/pivot.md); the pool
# is started so the same run can also evaluate end-to-end (EVAL_PROMPT_DATA); SWE_POOL_EXEC_URLS is required as for every script.
# Convert the best checkpoint to HF (slime's tools/convert_torch_dist_to_hf.py) for stage 2.
# DRY_RUN=1 or --dry-run prints the commands, runs nothing. See docs/training.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/swe_rl_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/swe_rl_common.sh"

RUN_NAME="${RUN_NAME:-qwen3-30b-a3b-thinking-stage1-pivot}"
MODEL_NAME=qwen3-30B-A3B
NUM_NODES="${NUM_NODES:-4}"
ACTOR_NODES="${ACTOR_NODES:-2}"
ROLLOUT_GPUS="${ROLLOUT_GPUS:-16}"
ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-4}"
TP="${TP:-2}"
EP="${EP:-8}"
GENERATE_PATH="${GENERATE_PATH:-swe_rl.slime.pivot.generate}"
RM_PATH="${RM_PATH:-swe_rl.slime.reward.reward_func}"
ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-64}"
N_SAMPLES_PER_PROMPT="${N_SAMPLES_PER_PROMPT:-8}"
MAX_CONTEXT_LEN="${MAX_CONTEXT_LEN:-32768}"
MAX_RESPONSE_LEN="${MAX_RESPONSE_LEN:-8192}"
MAX_TOKENS_PER_GPU="${MAX_TOKENS_PER_GPU:-32768}"
FREEZE_MOE_ROUTER=1
KL_COEF=0
LR="${LR:-1e-6}"
EPS_CLIP=0.2
EPS_CLIP_HIGH=0.28

swe_main "$@"
