#!/usr/bin/env bash
# shellcheck disable=SC2034  # the settings below are read by lib/swe_rl_common.sh
# Two-stage SWE RL for Qwen3-30B-A3B-Thinking-2507, stage 2: end-to-end agentic RL on the remote
# Docker fleet, starting from the stage-1 checkpoint converted to HF (HF_CKPT). Multi-turn episodes
# with interleaved thinking kept across turns (thinking chat template), graded by the instance's
# tests (resolved → +1, else −1; infrastructure failures removed from training).
# Recipe where slime supports it: GRPO without KL, clip 0.2 / 0.28, constant lr 1e-6, MoE router
# frozen and aux loss 0, async non-colocated generation, 8 prompts x 8 samples per rollout,
# Megatron TP 4 x EP 8 x CP 2, long context (64K per turn window, 8K per response).
# Default layout: 4 nodes (actor nodes 0-1, 4 SGLang engines of TP 4 on nodes 2-3).
# Required: HF_CKPT (stage-1 result in HF format), PROMPT_DATA, SLIME_DIR, MEGATRON_DIR,
# SWE_POOL_EXEC_URLS, SWE_EXEC_TOKEN(_FILE). DRY_RUN=1 or --dry-run prints, runs nothing.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/swe_rl_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/swe_rl_common.sh"

RUN_NAME="${RUN_NAME:-qwen3-30b-a3b-thinking-stage2-e2e}"
MODEL_NAME=qwen3-30B-A3B
NUM_NODES="${NUM_NODES:-4}"
ACTOR_NODES="${ACTOR_NODES:-2}"
ROLLOUT_GPUS="${ROLLOUT_GPUS:-16}"
ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-4}"
TP="${TP:-4}"
EP="${EP:-8}"
CP="${CP:-2}"
ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-8}"
N_SAMPLES_PER_PROMPT="${N_SAMPLES_PER_PROMPT:-8}"
MAX_CONTEXT_LEN="${MAX_CONTEXT_LEN:-65536}"
MAX_RESPONSE_LEN="${MAX_RESPONSE_LEN:-8192}"
MAX_TOKENS_PER_GPU="${MAX_TOKENS_PER_GPU:-32768}"
FREEZE_MOE_ROUTER=1
KL_COEF=0
LR="${LR:-1e-6}"
EPS_CLIP=0.2
EPS_CLIP_HIGH=0.28

swe_main "$@"
