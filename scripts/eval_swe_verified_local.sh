#!/usr/bin/env bash
# SWE-bench Verified with our own eval (eval/eval_swe.py through eval/run_eval_swe.sh) on the fleet,
# from the assets of data/export_swebench_verified_assets.py (no dataset hub needed at run time).
#
#   export VERIFIED_DIR=~/swe_verified               # holds verified_eval.jsonl
#   export SWE_POOL_EXEC_URLS=http://10.0.0.10:5000,http://10.0.0.11:5000 SWE_EXEC_TOKEN_FILE=~/.swe-rl-exec-token
#   EVAL_MODEL_PATH=/models/Qwen3-32B bash scripts/eval_swe_verified_local.sh       # starts SGLang here
#   SGLANG_URL=http://ROUTER:30000 bash scripts/eval_swe_verified_local.sh          # a running endpoint
#   DRY_RUN=1 ... bash scripts/eval_swe_verified_local.sh                           # print, run nothing
#
# Required: VERIFIED_DIR; EVAL_MODEL_PATH or SGLANG_URL; SWE_POOL_URL (a running pool) or
#   SWE_POOL_EXEC_URLS + SWE_EXEC_TOKEN_FILE (or SWE_EXEC_TOKEN; a pool is started for the run).
# Optional: OUTPUT_DIR (default output/eval_runs/verified_<model>_<UTC time>), SERVED_MODEL_NAME
#   (default: the model path's basename, or the first model the endpoint lists), INSTANCE_IDS
#   (comma-separated or @file), MAX_INSTANCES, and everything eval/run_eval_swe.sh reads
#   (MAX_CONCURRENT, STEP_LIMIT, MAX_TOKENS, TEMPERATURE, CHAT_TEMPLATE, SGLANG_TP, EXTRA_EVAL_ARGS, ...).
# The same flags work as options: --verified-dir DIR, --model-path PATH, --sglang-url URL,
#   --output DIR, --dry-run.
# Compare with a mini-swe-agent run of the same model: python eval/compare_runs.py OUTPUT_DIR MINI_RUN_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# .env.swe (or SWE_ENV_FILE): the environment wins over it
# shellcheck source-path=SCRIPTDIR source=lib/env_file.sh
source "$root/scripts/lib/env_file.sh"
swe_env_file_load "$root"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; exit 2; }

while (($#)); do
  case "$1" in
    --verified-dir) VERIFIED_DIR="${2:?--verified-dir needs a value}"; shift 2 ;;
    --model-path) EVAL_MODEL_PATH="${2:?--model-path needs a value}"; shift 2 ;;
    --sglang-url) SGLANG_URL="${2:?--sglang-url needs a value}"; shift 2 ;;
    --output) OUTPUT_DIR="${2:?--output needs a value}"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

dry_run="${DRY_RUN:-0}"
[[ -n "${VERIFIED_DIR:-}" ]] || die "set VERIFIED_DIR (python data/export_swebench_verified_assets.py --output-dir DIR)"
data="$VERIFIED_DIR/verified_eval.jsonl"
[[ -f "$data" || "$dry_run" == "1" ]] || die "$data missing: run data/export_swebench_verified_assets.py --output-dir $VERIFIED_DIR"
[[ -n "${EVAL_MODEL_PATH:-}" || -n "${SGLANG_URL:-}" ]] || die "set EVAL_MODEL_PATH (SGLang is started here) or SGLANG_URL"

if [[ -n "${SGLANG_URL:-}" ]]; then
  SGLANG_URL="${SGLANG_URL%/}"
  [[ "$SGLANG_URL" == */v1 ]] || SGLANG_URL="$SGLANG_URL/v1"
  if [[ -z "${SERVED_MODEL_NAME:-}" && -z "${EVAL_MODEL_PATH:-}" && "$dry_run" != "1" ]]; then
    body="$(curl -fsS --max-time 15 "$SGLANG_URL/models")" || die "$SGLANG_URL/models does not answer"
    SERVED_MODEL_NAME="$(printf '%s' "$body" | "${PYTHON:-python3}" -c \
      'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')" || die "no model listed at $SGLANG_URL/models"
  fi
  export SGLANG_URL
fi
[[ -n "${EVAL_MODEL_PATH:-}" ]] && export EVAL_MODEL_PATH
model="${SERVED_MODEL_NAME:-$(basename "${EVAL_MODEL_PATH:-model}")}"
export SERVED_MODEL_NAME="$model"
export PROMPT_DATA="$data"
export OUTPUT_DIR="${OUTPUT_DIR:-$root/output/eval_runs/verified_${model//[^A-Za-z0-9_.-]/_}_$(date -u +%Y%m%dT%H%M%SZ)}"
if [[ -n "${INSTANCE_IDS:-}" ]]; then
  export EXTRA_EVAL_ARGS="${EXTRA_EVAL_ARGS:-} --instance-ids $INSTANCE_IDS"
fi
export DRY_RUN="$dry_run"
echo "[verified] $data ($model) -> $OUTPUT_DIR"
exec bash "$root/eval/run_eval_swe.sh"
