#!/usr/bin/env bash
# shellcheck disable=SC2034  # the settings below are read by lib/swe_rl_common.sh
# Upstream slime's coding-agent RL (examples/coding_agent_rl: claude-code or codex CLIs in a sandbox,
# the token-exact adapter on the training host) with our Docker fleet as the sandbox instead of E2B:
# --custom-generate-function-path swe_rl.slime.agent_generate.generate (docs/slime_agent_sandbox.md).
# The example sets each sample's reward itself (grading in a fresh container), so no custom rm.
# Qwen3-30B-A3B, 4 nodes x 8 GPUs (actor nodes 0-1, 4 SGLang engines of TP 4 on nodes 2-3).
# Required: HF_CKPT, PROMPT_DATA (upstream's row format: prompt, label, metadata.image/workdir/...),
# SLIME_DIR (with examples/coding_agent_rl), MEGATRON_DIR, SWE_POOL_EXEC_URLS, SWE_EXEC_TOKEN(_FILE),
# SLIME_AGENT_NODE_TARBALL and the CLI tarball (SLIME_AGENT_CC_TARBALL, or SLIME_AGENT_CODEX_TARBALL
# with SWE_AGENT=codex). ADAPTER_PUBLIC_HOST (default MASTER_ADDR) must be reachable from the
# containers on the Docker nodes. DRY_RUN=1 or --dry-run prints, runs nothing.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/swe_rl_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/swe_rl_common.sh"

RUN_NAME="${RUN_NAME:-coding-agent-qwen3-30b-a3b-fleet}"
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

# upstream's example: its generate, its row keys, its parsers; the reward comes with the samples
GENERATE_PATH=swe_rl.slime.agent_generate.generate
RM_PATH=""
REWARD_KEY=""
INPUT_KEY=prompt
LABEL_KEY=label
METADATA_KEY=metadata
EXTRA_TRAIN_ARGS="--sglang-tool-call-parser ${SGLANG_TOOL_CALL_PARSER:-qwen3_coder} --sglang-reasoning-parser ${SGLANG_REASONING_PARSER:-qwen3} ${EXTRA_TRAIN_ARGS:-}"

# the example's own knobs (read in the rollout process) and our sandbox's
export SWE_AGENT="${SWE_AGENT:-claude_code}"
export ADAPTER_PUBLIC_HOST="${ADAPTER_PUBLIC_HOST:-${MASTER_ADDR:-127.0.0.1}}"
export ADAPTER_BIND_HOST="${ADAPTER_BIND_HOST:-0.0.0.0}"
export ADAPTER_PORT="${ADAPTER_PORT:-18001}"
export SWE_AGENT_TIME_BUDGET_SEC="${SWE_AGENT_TIME_BUDGET_SEC:-1800}"
export SWE_EVAL_TIMEOUT_SEC="${SWE_EVAL_TIMEOUT_SEC:-600}"
export SWE_BOOT_CONCURRENCY="${SWE_BOOT_CONCURRENCY:-16}"
export SWE_FLEET_SANDBOX_NETWORK="${SWE_FLEET_SANDBOX_NETWORK:-true}"
export SWE_FLEET_SANDBOX_EVAL_NETWORK="${SWE_FLEET_SANDBOX_EVAL_NETWORK:-false}"
export no_proxy="${no_proxy:+$no_proxy,}127.0.0.1,${MASTER_ADDR:-127.0.0.1},$ADAPTER_PUBLIC_HOST"
export NO_PROXY="$no_proxy"
EXTRA_RUNTIME_ENV="SWE_AGENT SWE_TRAIN_PROTOCOL SWE_EVAL_PROTOCOL ADAPTER_PUBLIC_HOST ADAPTER_BIND_HOST ADAPTER_PORT
  SLIME_AGENT_NODE_TARBALL SLIME_AGENT_CC_TARBALL SLIME_AGENT_CODEX_TARBALL SLIME_AGENT_CC_EXTRA_ARGS
  SLIME_AGENT_CC_EXTRA_ENVS SLIME_AGENT_CODEX_EXTRA_ARGS SLIME_AGENT_CODEX_EXTRA_ENVS SWE_CC_PROMPT
  SWE_AGENT_TIME_BUDGET_SEC SWE_EVAL_TIMEOUT_SEC SWE_ROLLOUT_GUARD_SEC SWE_BOOT_CONCURRENCY SWE_BOOT_RETRIES
  SLIME_FORK_MERGE_MAX_RESPONSE_TOKENS SWE_FLEET_SANDBOX_NETWORK SWE_FLEET_SANDBOX_EVAL_NETWORK
  SWE_FLEET_SANDBOX_MEMORY SWE_FLEET_SANDBOX_CPUS SWE_FLEET_SANDBOX_PIDS_LIMIT SWE_FLEET_SANDBOX_WORKDIR
  SWE_FLEET_SANDBOX_CHUNK_BYTES SWE_FLEET_SANDBOX_MAX_OUTPUT_BYTES no_proxy NO_PROXY"
EXTRA_RUNTIME_ENV="${EXTRA_RUNTIME_ENV//$'\n'/ }"

swe_validate_extra() {  # problems are recorded and reported with the others (lib/swe_rl_common.sh)
  [[ -f "${SLIME_DIR:-}/examples/coding_agent_rl/generate.py" ]] || swe_problem head SLIME_DIR \
    "$(swe_shown SLIME_DIR) has no examples/coding_agent_rl/generate.py (slime at the pinned commit, third_party/slime.md)"
  case "$SWE_AGENT" in
    claude_code) swe_require_file SLIME_AGENT_CC_TARBALL "claude-code CLI npm tarball uploaded into each container" || true ;;
    codex) swe_require_file SLIME_AGENT_CODEX_TARBALL "codex CLI npm tarball uploaded into each container" || true ;;
    *) swe_problem head SWE_AGENT "SWE_AGENT must be claude_code or codex (got '$SWE_AGENT' from $(swe_origin SWE_AGENT))" ;;
  esac
  swe_require_file SLIME_AGENT_NODE_TARBALL "Node 22 linux-x64 tarball uploaded into each container" || true
  [[ "$ADAPTER_PUBLIC_HOST" != 127.* ]] || swe_problem head ADAPTER_PUBLIC_HOST \
    "ADAPTER_PUBLIC_HOST=$ADAPTER_PUBLIC_HOST: the containers on the Docker nodes cannot reach a loopback address (set it, or MASTER_ADDR, to this node's address)"
}

swe_main "$@"
