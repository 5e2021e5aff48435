# shellcheck shell=bash
# Shared library of the training launch scripts (scripts/run_*.sh). Source it, set the
# configuration variables, then call `swe_main "$@"`.
#
# One script runs on every node of the cluster; the node's role comes from the environment:
#   SWE_NODE_ROLE=head|worker|prm, or else NODE_RANK (0 → head, others → worker; with a PRM
#   judge the last rank, NNODES-1, → prm). MASTER_ADDR is the head's address (all roles).
# head:   ray start --head, wait for every node's GPUs, check the exec servers, start the pool
#         server, wait for the PRM judge (if any), `ray job submit` slime's train script.
# worker: ray start --address=MASTER_ADDR:RAY_PORT --block (retries until the head is up).
# prm:    SGLang serving the PRM judge model on this node (OpenAI-compatible, PRM_PORT).
# Everything a script started is stopped on exit (pool server, SGLang, the local ray node).
#
# Settings: the environment (and the command line, `NAME=value bash scripts/run_...sh`) wins over
# .env.swe (or the file SWE_ENV_FILE names), which wins over the scripts' defaults; .env.swe is read
# when this file is sourced, before the configuration script sets its defaults (lib/env_file.sh).
# Every input is checked at once before anything runs: a real launch with a problem prints the
# report (each item, where its value came from, how to fix it) and exits 2.
# DRY_RUN=1 (or --dry-run) prints that report, then the plan of every node role (the settings and
# where each came from, every command, the environment, slime's arguments) even when items are
# missing (marked `# <- problem: NAME`), and runs nothing; it exits 2 when something is missing.

set -euo pipefail

SWE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SWE_PIDS=()
SWE_RAY_STARTED=0
SWE_PROBLEMS=()   # "scopes<TAB>NAME<TAB>message": scopes are the roles a problem blocks (head worker prm)
SWE_WARNINGS=()
declare -A SWE_BAD=()
# shellcheck source-path=SCRIPTDIR source=env_file.sh
source "$SWE_ROOT/scripts/lib/env_file.sh"
swe_env_file_load "$SWE_ROOT"
# shellcheck source-path=SCRIPTDIR source=launch_checks.sh
source "$SWE_ROOT/scripts/lib/launch_checks.sh"
DRY_RUN="${DRY_RUN:-0}"

swe_die() { echo "error: $*" >&2; exit 2; }
swe_log() { echo "[swe-rl $(date +%H:%M:%S)] $*" >&2; }

# Quote a command the way a shell would re-read it, masking secrets.
swe_quote() {
  local out="" a
  for a in "$@"; do out+="$(printf '%q' "$a") "; done
  swe_mask "${out% }"
}
swe_mask() {  # replace the values of known secrets by ***
  local text="$1" name value
  for name in SWE_EXEC_TOKEN SWE_POOL_TOKEN SWE_POOL_OPERATOR_TOKEN WANDB_API_KEY HF_TOKEN; do
    value="${!name:-}"
    if [[ -n "$value" ]]; then text="${text//"$value"/***}"; fi
  done
  printf '%s\n' "$text"
}

swe_mark() {  # the names of problem settings whose (path-like or placeholder) value a plan line shows
  local line="$1" name value marks=""
  for name in "${!SWE_BAD[@]}"; do
    value="${!name:-}"
    [[ ${#value} -ge 4 && ( "$value" == */* || "$value" == MISSING_* ) && "$line" == *"$value"* ]] && marks+=" $name"
  done
  [[ -n "$marks" ]] && printf '   # <- problem:%s' "$marks"
  return 0
}

swe_run() {  # run a command, or print it in a dry run
  if [[ "$DRY_RUN" == "1" ]]; then local q; q="$(swe_quote "$@")"; echo "+ $q$(swe_mark "$q")"; return 0; fi
  swe_log "+ $(swe_quote "$@")"
  "$@"
}

swe_run_bg() {  # swe_run_bg LOG CMD...: start in the background; stopped by the exit trap
  local log="$1"; shift
  if [[ "$DRY_RUN" == "1" ]]; then local q; q="$(swe_quote "$@")"; echo "+ $q > $log 2>&1 &$(swe_mark "$q")"; return 0; fi
  swe_log "+ $(swe_quote "$@") > $log &"
  "$@" >"$log" 2>&1 &
  SWE_PIDS+=("$!")
}

swe_last_pid() { (( ${#SWE_PIDS[@]} )) && echo "${SWE_PIDS[-1]}"; return 0; }

swe_cleanup() {
  local rc=$? pid
  for pid in "${SWE_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SWE_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ "$SWE_RAY_STARTED" == "1" ]]; then ray stop --force >/dev/null 2>&1 || true; fi
  exit "$rc"
}

swe_cacert() {  # "--cacert FILE " when the variable named $1 is set (a dry run's plan line)
  [[ -z "${!1:-}" ]] || printf -- '--cacert %s ' "${!1}"
}

swe_wait_http() {  # swe_wait_http URL SECONDS [WHAT]
  local url="$1" secs="$2" what="${3:-$1}" i
  if [[ "$DRY_RUN" == "1" ]]; then echo "+ wait for $url (up to ${secs}s)"; return 0; fi
  for ((i = 0; i < secs; i += 2)); do
    curl -fs -o /dev/null --max-time 5 "$url" && return 0
    sleep 2
  done
  swe_die "$what did not answer at $url within ${secs}s"
}

# ---------------------------------------------------------------- inputs

swe_usage() {  # the usage line, then the script's header comment (without shellcheck directives)
  echo "usage: [NAME=value ...] bash scripts/$(basename "$0") [--dry-run] [--help]   (settings: the environment, .env.swe)"
  sed -n '2,/^set -euo/p' "$0" | sed '/^# shellcheck/d; /^set -euo/d; s/^# \{0,1\}//'
}

swe_parse_args() {
  local a
  for a in "$@"; do
    case "$a" in
      --dry-run) DRY_RUN=1 ;;
      -h|--help) swe_usage; exit 0 ;;
      *) swe_die "unknown argument: $a (only --dry-run and --help; settings come from the environment)" ;;
    esac
  done
}

# Pool settings renamed to one SWE_POOL_* prefix: an old name is refused, naming the new one.
SWE_RENAMED_VARS=(SWE_EXEC_SERVER_URLS:SWE_POOL_EXEC_URLS SWE_LEASE_TTL:SWE_POOL_LEASE_TTL
                  SWE_MAX_CONTAINERS_PER_NODE:SWE_POOL_MAX_PER_NODE SWE_HEALTH_INTERVAL:SWE_POOL_HEALTH_INTERVAL
                  SWE_NODE_DOWN_AFTER:SWE_POOL_NODE_DOWN_AFTER)
swe_refuse_renamed() {  # a renamed variable still set is an error, never a silently dropped setting
  local pair old new
  for pair in "${SWE_RENAMED_VARS[@]}"; do
    old="${pair%%:*}" new="${pair#*:}"
    if [[ -n "${!old:-}" ]]; then
      swe_problem "head worker prm" "$old" "$old was renamed: set $new instead (and remove $old)"
    fi
  done
}

swe_problem() {  # swe_problem "ROLES" NAME "what is wrong and how to fix it"
  SWE_PROBLEMS+=("$1"$'\t'"$2"$'\t'"$3")
  SWE_BAD[$2]=1
}
swe_shown() {  # NAME=value [from where], for a report line (secrets masked)
  swe_mask "$1=${!1:-} [from $(swe_origin "$1")]"
}
# The checks record a problem (never exit) so that one run reports every item; the optional last
# argument names the roles the item blocks (default: head).
swe_require() {  # swe_require VAR "what it is" [ROLES]
  [[ -n "${!1:-}" ]] && return 0
  swe_problem "${3:-head}" "$1" "set $1 in .env.swe or the environment: the $2 (see .env.swe.example, docs/training.md)"
  return 1
}
swe_require_dir() {  # swe_require_dir VAR "what it is" [ROLES]
  swe_require "$@" || return 1
  [[ -d "${!1}" ]] && return 0
  swe_problem "${3:-head}" "$1" "$(swe_shown "$1") is not a directory: it must be the $2"
  return 1
}
swe_require_file() {  # swe_require_file VAR "what it is" [ROLES]
  swe_require "$@" || return 1
  [[ -f "${!1}" ]] && return 0
  swe_problem "${3:-head}" "$1" "$(swe_shown "$1") is not a file: it must be the $2"
  return 1
}
swe_require_int() {  # swe_require_int VAR: a positive integer
  [[ "${!1:-}" =~ ^[1-9][0-9]*$ ]] && return 0
  swe_problem "head" "$1" "$1 must be a positive integer (got '${!1:-}' from $(swe_origin "$1"))"
  return 1
}

swe_check_slime_pin() {  # a warning when SLIME_DIR is not at the pinned commit
  local want have
  # shellcheck source=/dev/null
  source "$SWE_ROOT/third_party/pins.env"
  want="$SLIME_COMMIT"
  have="$(git -C "$SLIME_DIR" rev-parse HEAD 2>/dev/null || echo unknown)"
  if [[ "$have" != "$want" ]]; then
    SWE_WARNINGS+=("SLIME_DIR is at $have, the scripts are written for slime $want (git -C $SLIME_DIR checkout $want; third_party/training_stack.md)")
  fi
}

swe_check_exec_urls() {  # SWE_POOL_EXEC_URLS: comma-separated http(s)://host:port
  local url urls n=0
  IFS=, read -r -a urls <<<"$SWE_POOL_EXEC_URLS"
  for url in "${urls[@]}"; do
    url="${url// /}"
    [[ -z "$url" ]] && continue
    n=$((n + 1))
    [[ "$url" =~ ^https?://[^/:]+:[0-9]+/?$ ]] || swe_problem head SWE_POOL_EXEC_URLS \
      "$(swe_shown SWE_POOL_EXEC_URLS): '$url' is not an exec server URL (http://HOST:5000, comma-separated)"
  done
  (( n > 0 )) || swe_problem head SWE_POOL_EXEC_URLS "$(swe_shown SWE_POOL_EXEC_URLS) names no exec server"
}

# Every input of every role, checked at once (problems recorded, nothing exits).
swe_validate() {
  local train="head worker"
  if swe_require_dir SLIME_DIR "checkout of THUDM/slime at the pinned commit (third_party/slime.md: git clone, then git checkout the pin)" "$train"; then
    if [[ -f "$SLIME_DIR/$TRAIN_SCRIPT" ]]; then
      [[ "$DRY_RUN" == "1" || "$ROLE" == "head" ]] && swe_check_slime_pin
    else
      swe_problem "$train" SLIME_DIR "$(swe_shown SLIME_DIR) has no $TRAIN_SCRIPT: is it a slime checkout? (clone THUDM/slime at the commit in third_party/slime.md)"
    fi
  fi
  swe_require_dir MEGATRON_DIR "checkout of Megatron-LM at slime's pinned commit (third_party/training_stack.md)" "$train" || true
  swe_require_file PROMPT_DATA "training prompts, slime JSONL made by swe-preprocess (docs/datasets.md)" || true
  if [[ "$CKPT_MODE" == "resume" ]]; then
    swe_require_dir REF_LOAD "Megatron torch_dist checkpoint of the start model (docs/training.md: conversion)" || true
  fi
  if swe_require_dir HF_CKPT "Hugging Face checkpoint directory (weights, config.json, tokenizer)" "$train"; then
    [[ -f "$HF_CKPT/config.json" ]] || swe_problem "$train" HF_CKPT \
      "$(swe_shown HF_CKPT) has no config.json: it must be a Hugging Face model directory (config.json, weights, tokenizer)"
  fi
  if swe_require SWE_POOL_EXEC_URLS "comma-separated exec server URLs of the Docker fleet"; then swe_check_exec_urls; fi
  if [[ -n "${SWE_EXEC_TOKEN:-}" ]]; then
    :
  elif [[ -z "${SWE_EXEC_TOKEN_FILE:-}" ]]; then
    swe_problem head SWE_EXEC_TOKEN_FILE "set SWE_EXEC_TOKEN or SWE_EXEC_TOKEN_FILE (the fleet's bearer token, the one the exec servers were started with) in .env.swe or the environment"
  elif [[ ! -r "$SWE_EXEC_TOKEN_FILE" || ! -s "$SWE_EXEC_TOKEN_FILE" ]]; then
    swe_problem head SWE_EXEC_TOKEN_FILE "$(swe_shown SWE_EXEC_TOKEN_FILE) is not a readable, non-empty file: write the exec servers' token into it (chmod 600) or set SWE_EXEC_TOKEN"
  fi
  swe_require_file PLUGIN_CONFIG "plugin settings YAML given to slime with --custom-config-path" || true
  local v ints=1
  for v in ACTOR_NODES ACTOR_GPUS_PER_NODE ROLLOUT_GPUS ROLLOUT_GPUS_PER_ENGINE N_SAMPLES_PER_PROMPT \
           ROLLOUT_BATCH_SIZE MAX_CONTEXT_LEN MAX_RESPONSE_LEN TP PP CP EP NUM_NODES GPUS_PER_NODE TRAIN_NODES; do
    swe_require_int "$v" || ints=0
  done
  if (( ints )); then
    (( MAX_RESPONSE_LEN < MAX_CONTEXT_LEN )) \
      || swe_problem head MAX_RESPONSE_LEN "MAX_RESPONSE_LEN=$MAX_RESPONSE_LEN must be below MAX_CONTEXT_LEN=$MAX_CONTEXT_LEN"
    (( ROLLOUT_GPUS % ROLLOUT_GPUS_PER_ENGINE == 0 )) \
      || swe_problem head ROLLOUT_GPUS "ROLLOUT_GPUS=$ROLLOUT_GPUS is not a multiple of ROLLOUT_GPUS_PER_ENGINE=$ROLLOUT_GPUS_PER_ENGINE"
    local actor_gpus=$((ACTOR_NODES * ACTOR_GPUS_PER_NODE)) need
    (( actor_gpus % (TP * PP * CP) == 0 )) \
      || swe_problem head TP "actor GPUs ($actor_gpus) are not a multiple of TP*PP*CP ($TP*$PP*$CP)"
    need=$((actor_gpus + ROLLOUT_GPUS))
    [[ "$COLOCATE" == "1" ]] && need=$actor_gpus
    (( need <= TRAIN_NODES * GPUS_PER_NODE )) \
      || swe_problem head ROLLOUT_GPUS "actor ($actor_gpus) + rollout ($ROLLOUT_GPUS) GPUs exceed the ray cluster ($TRAIN_NODES nodes x $GPUS_PER_NODE): lower ACTOR_NODES or ROLLOUT_GPUS"
  fi
  if [[ "$WITH_PRM" == "1" ]]; then
    swe_require PRM_MODEL_PATH "Hugging Face checkpoint of the PRM judge model" prm || true
    swe_require SWE_PRM_URL "OpenAI-compatible base URL of the PRM judge, e.g. http://<prm-node>:${PRM_PORT}/v1" || true
  fi
  if declare -F swe_validate_extra >/dev/null; then swe_validate_extra; fi  # a configuration script's own checks
  swe_check_launch_inputs
  # slime's full argument list, as the Ray job would get it (a missing input empty, for these checks only)
  local HF_CKPT="${HF_CKPT:-}" PROMPT_DATA="${PROMPT_DATA:-}" REF_LOAD="${REF_LOAD:-}"
  swe_train_args
  swe_check_with_plugin
  return 0
}

# The problems that block ROLE (all of them in a dry run).
swe_blocking() {
  local p
  for p in "${SWE_PROBLEMS[@]}"; do
    if [[ "$DRY_RUN" == "1" || " ${p%%$'\t'*} " == *" $ROLE "* ]]; then printf '%s\n' "$p"; fi
  done
}

swe_report() {  # the one report of every problem, on stderr; returns 1 when something blocks
  local p lines=() w rest
  mapfile -t lines < <(swe_blocking)
  for w in "${SWE_WARNINGS[@]}"; do echo "warning: $w" >&2; done
  (( ${#lines[@]} )) || return 0
  echo "error: ${#lines[@]} problem(s) with the settings (the environment wins over .env.swe, which wins over the defaults):" >&2
  for p in "${lines[@]}"; do
    rest="${p#*$'\t'}"
    echo "  - ${rest#*$'\t'}" >&2
  done
  return 1
}

swe_placeholders() {  # a missing path in the plan reads MISSING_<NAME>, marked on every line showing it
  local name
  for name in "${!SWE_BAD[@]}"; do
    [[ -z "${!name:-}" ]] && printf -v "$name" '%s' "MISSING_$name"
  done
  return 0
}

# ---------------------------------------------------------------- configuration

# Defaults every configuration script may override before calling swe_main.
swe_defaults() {
  : "${RUN_NAME:?the configuration script sets RUN_NAME}"
  : "${MODEL_NAME:?the configuration script sets MODEL_NAME (scripts/models/<name>.sh)}"
  GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
  ACTOR_GPUS_PER_NODE="${ACTOR_GPUS_PER_NODE:-$GPUS_PER_NODE}"
  WITH_PRM="${WITH_PRM:-0}"
  TRAIN_NODES="${TRAIN_NODES:-$NUM_NODES}"      # nodes in the ray cluster (all but the PRM node)
  COLOCATE="${COLOCATE:-0}"
  if [[ "$COLOCATE" == "1" ]]; then TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"; else TRAIN_SCRIPT="${TRAIN_SCRIPT:-train_async.py}"; fi
  CKPT_MODE="${CKPT_MODE:-hf}"                  # hf: fresh start from HF_CKPT; resume: fixed dir + REF_LOAD
  EXPORT_ROOT="${EXPORT_ROOT:-$SWE_ROOT/output}"
  RUN_TS="${RUN_TS:-$(date +%Y%m%d_%H%M%S)}"
  PLUGIN_CONFIG="${PLUGIN_CONFIG:-$SWE_ROOT/configs/plugin_launch.yaml}"
  GENERATE_PATH="${GENERATE_PATH:-swe_rl.slime.e2e.generate}"
  RM_PATH="${RM_PATH-swe_rl.slime.reward.reward_func}"
  ROLLOUT_LOG_PATH="${ROLLOUT_LOG_PATH:-swe_rl.slime.metrics.log_rollout_data}"
  EVAL_ROLLOUT_LOG_PATH="${EVAL_ROLLOUT_LOG_PATH:-swe_rl.slime.metrics.log_eval_rollout_data}"
  REWARD_KEY="${REWARD_KEY-score}"
  # advantages per trajectory, normalised within each prompt group (docs/advantages.md)
  REWARD_POST_PROCESS_PATH="${REWARD_POST_PROCESS_PATH:-swe_rl.slime.post_process.post_process_rewards}"
  N_SAMPLES_PER_PROMPT="${N_SAMPLES_PER_PROMPT:-8}"
  MAX_CONTEXT_LEN="${MAX_CONTEXT_LEN:-16384}"
  MAX_RESPONSE_LEN="${MAX_RESPONSE_LEN:-4096}"
  NUM_ROLLOUT="${NUM_ROLLOUT:-1000}"
  NUM_STEPS_PER_ROLLOUT="${NUM_STEPS_PER_ROLLOUT:-1}"
  ROLLOUT_TEMPERATURE="${ROLLOUT_TEMPERATURE:-1.0}"
  LR="${LR:-1e-6}"
  EPS_CLIP="${EPS_CLIP:-0.2}"
  EPS_CLIP_HIGH="${EPS_CLIP_HIGH:-0.28}"
  KL_COEF="${KL_COEF:-0}"
  SAVE_INTERVAL="${SAVE_INTERVAL:-10}"
  PP="${PP:-1}"; CP="${CP:-1}"; EP="${EP:-1}"; ETP="${ETP:-1}"
  MAX_TOKENS_PER_GPU="${MAX_TOKENS_PER_GPU:-$MAX_CONTEXT_LEN}"
  SGLANG_MEM_FRACTION="${SGLANG_MEM_FRACTION:-0.8}"
  FREEZE_MOE_ROUTER="${FREEZE_MOE_ROUTER:-0}"
  OPTIMIZER_CPU_OFFLOAD="${OPTIMIZER_CPU_OFFLOAD:-0}"
  RAY_PORT="${RAY_PORT:-6379}"
  RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8265}"
  POOL_PORT="${POOL_PORT:-18090}"
  PRM_PORT="${PRM_PORT:-30010}"
  PRM_TP="${PRM_TP:-1}"
  MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
  PYTHON="${PYTHON:-python3}"
  if [[ "$CKPT_MODE" == "resume" ]]; then
    CKPT_DIR="${SAVE_CKPT:-$EXPORT_ROOT/ckpt/${RUN_NAME}_${CKPT_TAG:-fixed}}"
  else
    CKPT_DIR="${SAVE_CKPT:-$EXPORT_ROOT/ckpt/${RUN_NAME}_${RUN_TS}}"
  fi
  TRAJ_DIR="${SWE_SAVE_TRAJ_DIR:-$EXPORT_ROOT/swe_rollouts/${RUN_NAME}_${RUN_TS}}"
  LOG_DIR="${LOG_DIR:-$EXPORT_ROOT/logs/${RUN_NAME}_${RUN_TS}}"
}

swe_node_role() {
  if [[ -n "${SWE_NODE_ROLE:-}" ]]; then
    case "$SWE_NODE_ROLE" in head|worker|prm) echo "$SWE_NODE_ROLE"; return ;; esac
    swe_die "SWE_NODE_ROLE must be head, worker or prm (got '$SWE_NODE_ROLE')"
  fi
  local rank="${NODE_RANK:-0}"
  [[ "$rank" =~ ^[0-9]+$ ]] || swe_die "NODE_RANK must be a number (got '$rank')"
  if [[ "$WITH_PRM" == "1" && "$rank" == "$((NUM_NODES - 1))" ]]; then echo prm
  elif [[ "$rank" == "0" ]]; then echo head
  else echo worker
  fi
}

# Model arguments: scripts/models/<MODEL_NAME>.sh, rope theta from the HF config when readable.
swe_model_args() {
  local file="$SWE_ROOT/scripts/models/$MODEL_NAME.sh" theta=""
  [[ -f "$file" ]] || swe_die "no model arguments for MODEL_NAME=$MODEL_NAME ($file)"
  if [[ -z "${MODEL_ROTARY_BASE:-}" && -f "${HF_CKPT:-}/config.json" ]]; then
    theta="$("$PYTHON" -c 'import json,sys; c=json.load(open(sys.argv[1])); c=c.get("text_config",c); t=c.get("rope_theta") or (c.get("rope_parameters") or {}).get("rope_theta"); print(int(t) if t and float(t).is_integer() else (t or ""))' "$HF_CKPT/config.json" 2>/dev/null || true)"
    [[ -n "$theta" ]] && MODEL_ROTARY_BASE="$theta"
  fi
  # shellcheck source=/dev/null
  source "$file"
}

# The command-line arguments of slime's train script, in TRAIN_ARGS.
swe_train_args() {
  swe_model_args
  TRAIN_ARGS=(
    # cluster
    --actor-num-nodes "$ACTOR_NODES" --actor-num-gpus-per-node "$ACTOR_GPUS_PER_NODE"
  )
  if [[ "$COLOCATE" == "1" ]]; then
    TRAIN_ARGS+=(--colocate)
  else
    TRAIN_ARGS+=(--rollout-num-gpus "$ROLLOUT_GPUS")
  fi
  TRAIN_ARGS+=("${MODEL_ARGS[@]}")
  # checkpoints: fresh runs load the HF weights (slime's HF loader), resume runs a fixed dir
  TRAIN_ARGS+=(--hf-checkpoint "$HF_CKPT" --save "$CKPT_DIR" --save-interval "$SAVE_INTERVAL")
  if [[ "$CKPT_MODE" == "resume" ]]; then
    TRAIN_ARGS+=(--ref-load "$REF_LOAD" --load "$CKPT_DIR")
  else
    TRAIN_ARGS+=(--ref-load "$HF_CKPT")
  fi
  # data and rollout
  TRAIN_ARGS+=(
    --prompt-data "$PROMPT_DATA" --input-key "${INPUT_KEY:-text}" --metadata-key "${METADATA_KEY:-metadata}"
    ${LABEL_KEY:+--label-key "$LABEL_KEY"}
    --rollout-shuffle
    --num-rollout "$NUM_ROLLOUT" --rollout-batch-size "$ROLLOUT_BATCH_SIZE"
    --n-samples-per-prompt "$N_SAMPLES_PER_PROMPT" --num-steps-per-rollout "$NUM_STEPS_PER_ROLLOUT"
    --rollout-max-context-len "$MAX_CONTEXT_LEN" --rollout-max-response-len "$MAX_RESPONSE_LEN"
    --rollout-temperature "$ROLLOUT_TEMPERATURE" --rollout-top-p 1.0
    --balance-data
  )
  # the SWE plugin (RM_PATH / REWARD_KEY empty: the generate function sets the reward itself)
  TRAIN_ARGS+=(
    --custom-generate-function-path "$GENERATE_PATH"
    ${RM_PATH:+--custom-rm-path "$RM_PATH"}
    ${REWARD_KEY:+--reward-key "$REWARD_KEY"}
    --custom-config-path "$PLUGIN_CONFIG"
    --custom-reward-post-process-path "$REWARD_POST_PROCESS_PATH"
    # the SWE dashboard (docs/metrics.md): per-trajectory figures every rollout, next to slime's own
    --custom-rollout-log-function-path "$ROLLOUT_LOG_PATH"
    --custom-eval-rollout-log-function-path "$EVAL_ROLLOUT_LOG_PATH"
  )
  if [[ -n "${DYNAMIC_SAMPLING_FILTER_PATH:-}" ]]; then  # e.g. swe_rl.slime.filters.check_trajectory_reward_nonzero_std
    TRAIN_ARGS+=(--dynamic-sampling-filter-path "$DYNAMIC_SAMPLING_FILTER_PATH")
  fi
  if [[ -n "${EVAL_PROMPT_DATA:-}" ]]; then
    TRAIN_ARGS+=(--eval-interval "${EVAL_INTERVAL:-20}" --eval-prompt-data swe "$EVAL_PROMPT_DATA"
                 --n-samples-per-eval-prompt 1 --eval-max-response-len "$MAX_RESPONSE_LEN")
  fi
  # GRPO. The loss is slime's per-rollout token mean (no --calculate-per-token-loss): the segment
  # samples of one trajectory (PLUGIN_CONFIG: swe_samples: segment) share a rollout id, so each
  # trajectory counts once, as its advantage did in the group statistics (docs/advantages.md).
  TRAIN_ARGS+=(--advantage-estimator grpo --eps-clip "$EPS_CLIP" --eps-clip-high "$EPS_CLIP_HIGH" --entropy-coef 0)
  if [[ "$KL_COEF" != "0" ]]; then
    TRAIN_ARGS+=(--use-kl-loss --kl-loss-coef "$KL_COEF" --kl-loss-type low_var_kl)
  fi
  # optimizer
  TRAIN_ARGS+=(--optimizer adam --lr "$LR" --lr-decay-style constant --weight-decay 0.1
               --adam-beta1 0.9 --adam-beta2 0.98)
  if [[ "$OPTIMIZER_CPU_OFFLOAD" == "1" ]]; then
    TRAIN_ARGS+=(--optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer)
  fi
  if [[ "$FREEZE_MOE_ROUTER" == "1" ]]; then
    TRAIN_ARGS+=(--freeze-params-name-list 'mlp\.router\.')
  fi
  # parallelism
  TRAIN_ARGS+=(
    --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP"
    --context-parallel-size "$CP" --expert-model-parallel-size "$EP" --expert-tensor-parallel-size "$ETP"
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
    --use-dynamic-batch-size --max-tokens-per-gpu "$MAX_TOKENS_PER_GPU"
  )
  (( TP > 1 )) && TRAIN_ARGS+=(--sequence-parallel)
  # SGLang engines
  TRAIN_ARGS+=(--rollout-num-gpus-per-engine "$ROLLOUT_GPUS_PER_ENGINE"
               --sglang-mem-fraction-static "$SGLANG_MEM_FRACTION")
  # numerics
  TRAIN_ARGS+=(--attention-dropout 0.0 --hidden-dropout 0.0 --accumulate-allreduce-grads-in-fp32
               --attention-softmax-in-fp32 --attention-backend flash)
  # logging
  TRAIN_ARGS+=(--use-tensorboard --tb-project-name "$LOG_DIR/tensorboard")
  if [[ -n "${WANDB_PROJECT:-}" ]]; then
    TRAIN_ARGS+=(--use-wandb --wandb-project "$WANDB_PROJECT" --wandb-group "${RUN_NAME}_${RUN_TS}")
  fi
  if [[ -n "${EXTRA_TRAIN_ARGS:-}" ]]; then
    local extra
    read -r -a extra <<<"$EXTRA_TRAIN_ARGS"
    TRAIN_ARGS+=("${extra[@]}")
  fi
}

# Environment of the ray job (reaches the rollout manager, wherever ray places it).
swe_runtime_env_json() {
  local extra_names=() file_names=() swe_names=() pythonpath="$SWE_ROOT:$SLIME_DIR:$MEGATRON_DIR" names=(
    SWE_POOL_URL SWE_POOL_TOKEN SWE_POOL_TOKEN_FILE SWE_SAVE_TRAJ_DIR SWE_MAX_CONCURRENT
    SWE_PRM_ENABLE SWE_PRM_URL SWE_PRM_MODEL SWE_PRM_M SWE_PRM_STEP_COEF
    WANDB_API_KEY HF_HOME TOKENIZERS_PARALLELISM)
  read -r -a extra_names <<<"${EXTRA_RUNTIME_ENV:-}"  # more variable names a configuration script forwards
  # the user's settings: every name .env.swe set, every SWE_* of the environment (the plugin's config)
  read -r -a file_names <<<"$SWE_FILE_NAMES"
  mapfile -t swe_names < <(compgen -e | grep '^SWE_' || true)
  names+=("${extra_names[@]}" "${file_names[@]}" "${swe_names[@]}")
  # never the nodes' or the operator's token: rollout workers hold the pool's client token only
  local kept=() name
  for name in "${names[@]}"; do
    case "$name" in SWE_EXEC_TOKEN | SWE_EXEC_TOKEN_FILE | SWE_POOL_OPERATOR_TOKEN | SWE_POOL_OPERATOR_TOKEN_FILE) ;; *) kept+=("$name") ;; esac
  done
  names=("${kept[@]}")
  "$PYTHON" - "$pythonpath" "${names[@]}" <<'PY'
import json, os, sys
env = {"PYTHONPATH": sys.argv[1], "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONUNBUFFERED": "1",
       "NCCL_NVLS_ENABLE": os.environ.get("HAS_NVLINK", "0")}
# the launch's own PYTHONPATH first; a PYTHONPATH of the user's after it
env.update({k: os.environ[k] for k in sys.argv[2:] if os.environ.get(k) and k != "PYTHONPATH"})
print(json.dumps({"env_vars": env}))
PY
}

swe_print_env() {  # this role's settings, each with where its value came from
  local name line
  echo "# role: $ROLE (node rank ${NODE_RANK:-0} of $NUM_NODES, head $MASTER_ADDR)"
  for name in RUN_NAME MODEL_NAME HF_CKPT REF_LOAD PROMPT_DATA SLIME_DIR MEGATRON_DIR PLUGIN_CONFIG \
              SWE_POOL_EXEC_URLS SWE_EXEC_TOKEN SWE_EXEC_TOKEN_FILE SWE_POOL_URL SWE_POOL_TOKEN \
              SWE_MAX_CONCURRENT SWE_POOL_MAX_PER_NODE SWE_SAVE_TRAJ_DIR CKPT_DIR LOG_DIR \
              SWE_PRM_URL PRM_MODEL_PATH; do
    [[ -n "${!name:-}" ]] || continue
    if [[ "${!name}" == "MISSING_$name" ]]; then line="# env: $name is not set"
    else line="$(swe_mask "# env: $name=${!name}   [$(swe_origin "$name")]")"; fi
    [[ -n "${SWE_BAD[$name]:-}" ]] && line+="   # <- problem: $name"
    echo "$line"
  done
  return 0
}

# ---------------------------------------------------------------- roles

swe_ray_head() {
  local extra=()
  read -r -a extra <<<"${RAY_HEAD_ARGS:-}"  # more `ray start --head` options (ports, --temp-dir, ...)
  swe_run ray start --head --node-ip-address "$MASTER_ADDR" --port "$RAY_PORT" --num-gpus "$GPUS_PER_NODE" \
    --disable-usage-stats --dashboard-host 0.0.0.0 --dashboard-port "$RAY_DASHBOARD_PORT" "${extra[@]}"
  [[ "$DRY_RUN" == "1" ]] || SWE_RAY_STARTED=1
  local want=$((TRAIN_NODES * GPUS_PER_NODE)) i have=0
  if [[ "$DRY_RUN" == "1" ]]; then echo "+ wait until ray has $want GPUs ($TRAIN_NODES nodes)"; return 0; fi
  for ((i = 0; i < ${RAY_JOIN_TIMEOUT:-1800}; i += 5)); do
    have="$("$PYTHON" -c 'import ray, sys; ray.init(address=sys.argv[1], logging_level="ERROR"); print(int(ray.cluster_resources().get("GPU", 0)))' "$MASTER_ADDR:$RAY_PORT" 2>/dev/null || echo 0)"
    (( have >= want )) && { swe_log "ray cluster has $have GPUs"; return 0; }
    sleep 5
  done
  swe_die "ray cluster has $have of $want GPUs after ${RAY_JOIN_TIMEOUT:-1800}s: did every worker start (NODE_RANK, MASTER_ADDR)?"
}

swe_ray_worker() {
  local i
  if [[ "$DRY_RUN" == "1" ]]; then
    swe_run ray start --address "$MASTER_ADDR:$RAY_PORT" --num-gpus "$GPUS_PER_NODE" --disable-usage-stats --block
    return 0
  fi
  for ((i = 0; i < ${RAY_JOIN_TIMEOUT:-1800}; i += 10)); do  # the head may not be up yet
    if ray start --address "$MASTER_ADDR:$RAY_PORT" --num-gpus "$GPUS_PER_NODE" --disable-usage-stats; then
      SWE_RAY_STARTED=1
      swe_log "joined the ray cluster at $MASTER_ADDR:$RAY_PORT; waiting until it stops"
      while ray status --address "$MASTER_ADDR:$RAY_PORT" >/dev/null 2>&1; do sleep 30; done
      return 0
    fi
    sleep 10
  done
  swe_die "could not join the ray head at $MASTER_ADDR:$RAY_PORT"
}

swe_check_exec_servers() {  # every exec server's /healthz; fail when none (or, strict, any) is down
  local url ok=0 bad=0 urls ca=()
  [[ -z "${SWE_POOL_EXEC_CA_FILE:-}" ]] || ca=(--cacert "$SWE_POOL_EXEC_CA_FILE")
  IFS=, read -r -a urls <<<"$SWE_POOL_EXEC_URLS"
  for url in "${urls[@]}"; do
    url="${url// /}"; url="${url%/}"
    [[ -z "$url" ]] && continue
    if [[ "$DRY_RUN" == "1" ]]; then echo "+ curl -fsS $(swe_cacert SWE_POOL_EXEC_CA_FILE)$url/healthz"; ok=$((ok + 1)); continue; fi
    # an https:// node is checked against the CA the pool trusts (SWE_POOL_EXEC_CA_FILE), as the pool will
    if curl -fsS --max-time 10 "${ca[@]}" "$url/healthz" >/dev/null; then
      ok=$((ok + 1))
    else bad=$((bad + 1)); swe_log "exec server down: $url"; fi
  done
  (( ok > 0 )) || swe_die "no exec server answered /healthz (SWE_POOL_EXEC_URLS=$SWE_POOL_EXEC_URLS)"
  if (( bad > 0 )) && [[ "${SWE_REQUIRE_ALL_EXEC:-0}" == "1" ]]; then swe_die "$bad exec server(s) down"; fi
  [[ "$DRY_RUN" == "1" ]] || swe_log "exec servers healthy: $ok, down: $bad"
}

swe_start_pool() {  # the pool server on the head, reachable from every ray node
  export SWE_POOL_HOST="${SWE_POOL_HOST:-$MASTER_ADDR}" SWE_POOL_PORT="$POOL_PORT"
  export SWE_POOL_DB="${SWE_POOL_DB:-$LOG_DIR/leases.db}" SWE_POOL_ID="${SWE_POOL_ID:-${RUN_NAME}_${RUN_TS}}"
  export SWE_POOL_MAX_PER_NODE="${SWE_POOL_MAX_PER_NODE:-15}"
  # The pool's clients (the rollout workers) get a token of their own, never the exec servers' one: a run
  # without SWE_POOL_TOKEN(_FILE) mints a fresh one (the pool refuses to start with the two equal).
  if [[ -z "${SWE_POOL_TOKEN:-}${SWE_POOL_TOKEN_FILE:-}" ]]; then
    SWE_POOL_TOKEN="$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(32))')"
    export SWE_POOL_TOKEN
  fi
  # The tokens reach the pool through the environment (exported above, or by the user), never as an
  # argument: `env` below gets only names of no secret (tests/scripts/test_no_token_in_argv.py).
  swe_run_bg "$LOG_DIR/pool_server.log" env SWE_POOL_HOST="$SWE_POOL_HOST" SWE_POOL_PORT="$SWE_POOL_PORT" \
    SWE_POOL_DB="$SWE_POOL_DB" SWE_POOL_ID="$SWE_POOL_ID" SWE_POOL_MAX_PER_NODE="$SWE_POOL_MAX_PER_NODE" \
    "$PYTHON" "$SWE_ROOT/server/pool_server.py"
  # With SWE_POOL_TLS_CERT the pool serves HTTPS: its clients (this wait, the rollout workers) check it
  # against SWE_CLIENT_CA_FILE (forwarded to the job with every SWE_* variable), else the system's CAs.
  local scheme=http
  [[ -z "${SWE_POOL_TLS_CERT:-}" ]] || scheme=https
  export SWE_POOL_URL="$scheme://$SWE_POOL_HOST:$POOL_PORT"
  SWE_WAIT_CA="${SWE_CLIENT_CA_FILE:-}" swe_wait_service "$SWE_POOL_URL/healthz" "${POOL_START_TIMEOUT:-120}" "pool server" "$(swe_last_pid)" "$LOG_DIR/pool_server.log"
}

swe_prm_server() {  # the PRM judge's own SGLang, on the prm node
  local dp=$((GPUS_PER_NODE / PRM_TP))
  swe_run_bg "$LOG_DIR/prm_sglang.log" "$PYTHON" -m sglang.launch_server --model-path "$PRM_MODEL_PATH" \
    --served-model-name "${SWE_PRM_MODEL:-prm}" --host 0.0.0.0 --port "$PRM_PORT" \
    --tp-size "$PRM_TP" --dp-size "$dp" --mem-fraction-static 0.85
  swe_wait_service "http://127.0.0.1:$PRM_PORT/health" "${SGLANG_START_TIMEOUT:-1800}" "PRM SGLang" "$(swe_last_pid)" "$LOG_DIR/prm_sglang.log"
  if [[ "$DRY_RUN" == "1" ]]; then echo "+ wait for the PRM server to exit"; return 0; fi
  swe_log "PRM judge serving on :$PRM_PORT; Ctrl-C or the end of training stops it"
  wait "${SWE_PIDS[-1]}"
}

swe_submit() {
  local env_json
  env_json="$(swe_runtime_env_json)"
  # in a file only the user reads: the environment holds secrets (tokens, WANDB_API_KEY), never on a command line
  local env_file="$LOG_DIR/ray_runtime_env.json"
  if [[ "$DRY_RUN" == "1" ]]; then
    local shown; shown="$(swe_mask "$env_json")"
    echo "+ write $env_file (mode 600): $shown$(swe_mark "$shown")"
  else
    (umask 077 && printf '%s\n' "$env_json" >"$env_file")
  fi
  swe_run ray job submit --address "http://127.0.0.1:$RAY_DASHBOARD_PORT" --runtime-env "$env_file" \
    -- python3 "$SLIME_DIR/$TRAIN_SCRIPT" "${TRAIN_ARGS[@]}"
}

swe_head() {
  if [[ "$DRY_RUN" != "1" ]]; then
    mkdir -p "$CKPT_DIR" "$SWE_SAVE_TRAJ_DIR" "$LOG_DIR"
    if command -v nvidia-smi >/dev/null && [[ "$(nvidia-smi topo -m 2>/dev/null | grep -c 'NV[0-9]')" -gt 0 ]]; then
      export HAS_NVLINK=1
    fi
  else
    echo "+ mkdir -p $CKPT_DIR $SWE_SAVE_TRAJ_DIR $LOG_DIR"
  fi
  swe_check_exec_servers
  swe_start_pool
  if [[ "$WITH_PRM" == "1" ]]; then
    swe_wait_http "${SWE_PRM_URL%/}/models" "${SGLANG_START_TIMEOUT:-1800}" "PRM judge"
  fi
  swe_ray_head
  swe_submit
}

# One role's plan (dry run) or launch.
swe_role() {
  case "$ROLE" in
    head)
      swe_train_args
      swe_print_env
      swe_head ;;
    worker)
      swe_print_env
      swe_ray_worker ;;
    prm)
      [[ "$DRY_RUN" == "1" ]] || mkdir -p "$LOG_DIR"
      swe_print_env
      swe_prm_server ;;
  esac
}

# The dry run's plan: every role of the cluster, this node's marked.
swe_plan() {
  local this="$ROLE" role ranks
  echo "# plan of $RUN_NAME: $NUM_NODES node(s); the same command on every node, NODE_RANK=0..$((NUM_NODES - 1)) and MASTER_ADDR=$MASTER_ADDR [$(swe_origin MASTER_ADDR)]"
  [[ -n "$SWE_ENV_FILE_USED" ]] && echo "# settings file: $SWE_ENV_FILE_USED (the environment wins over it)"
  for role in head worker prm; do
    case "$role" in
      head) ranks=0 ;;
      worker) (( TRAIN_NODES > 1 )) || continue; ranks="1..$((TRAIN_NODES - 1))" ;;
      prm) [[ "$WITH_PRM" == "1" ]] || continue; ranks="$((NUM_NODES - 1))" ;;
    esac
    echo
    echo "## role $role: NODE_RANK=$ranks$([[ "$role" == "$this" ]] && echo "   <- this node")"
    ROLE="$role"
    ( NODE_RANK="${ranks%%.*}"; swe_role ) || echo "# (the plan of role $role stops here: see the problems above)"
  done
  ROLE="$this"
}

# Entry point of every configuration script.
swe_main() {
  swe_parse_args "$@"
  swe_refuse_renamed
  swe_defaults
  ROLE="$(swe_node_role)"
  export SWE_SAVE_TRAJ_DIR="$TRAJ_DIR"
  export SWE_MAX_CONCURRENT="${SWE_MAX_CONCURRENT:-128}"
  export PYTHONPATH="$SWE_ROOT:${SLIME_DIR:-}:${MEGATRON_DIR:-}${PYTHONPATH:+:$PYTHONPATH}"
  swe_validate
  if [[ "$DRY_RUN" == "1" ]]; then
    local rc=0
    swe_report || rc=2
    swe_placeholders
    swe_plan
    if (( rc )); then
      echo "error: the plan above has ${#SWE_PROBLEMS[@]} problem(s), listed before it; nothing was run" >&2
    fi
    exit "$rc"
  fi
  swe_report || exit 2
  trap swe_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  swe_role
}
