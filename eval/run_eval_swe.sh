#!/usr/bin/env bash
# Standalone eval on a real fleet: starts SGLang for a model path, the pool server, then eval_swe.py.
# Everything it started is stopped on exit.
#
# Required:  PROMPT_DATA (instances: slime JSONL, SWE-bench JSONL, ...), OUTPUT_DIR, and either
#            EVAL_MODEL_PATH (SGLang is started here) or SGLANG_URL (an OpenAI-compatible /v1 base
#            already serving the model); either SWE_POOL_URL (a running pool) or SWE_POOL_EXEC_URLS
#            + SWE_EXEC_TOKEN (a pool is started here, with a fresh client token unless SWE_POOL_TOKEN is set).
# Optional:  SERVED_MODEL_NAME, CHAT_TEMPLATE (SGLang --chat-template), SGLANG_PORT (30000), SGLANG_TP (1), SGLANG_ARGS, POOL_PORT (18090),
#            MAX_CONCURRENT (8), STEP_LIMIT (50), MAX_TOKENS (8192), TEMPERATURE (0), MAX_INSTANCES,
#            EXTRA_EVAL_ARGS, DRY_RUN=1 (print the commands, run nothing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# .env.swe (or SWE_ENV_FILE): the environment wins over it
# shellcheck source-path=SCRIPTDIR source=../scripts/lib/env_file.sh
source "$root/scripts/lib/env_file.sh"
swe_env_file_load "$root"

dry_run="${DRY_RUN:-0}"
die() { echo "error: $*" >&2; exit 2; }
[[ -n "${PROMPT_DATA:-}" ]] || die "set PROMPT_DATA to the instances file"
[[ -n "${OUTPUT_DIR:-}" ]] || die "set OUTPUT_DIR"
[[ -n "${EVAL_MODEL_PATH:-}" || -n "${SGLANG_URL:-}" ]] || die "set EVAL_MODEL_PATH (start SGLang here) or SGLANG_URL"
[[ -z "${SWE_EXEC_SERVER_URLS:-}" ]] || die "SWE_EXEC_SERVER_URLS was renamed: set SWE_POOL_EXEC_URLS instead"
[[ -n "${SWE_POOL_URL:-}" || -n "${SWE_POOL_EXEC_URLS:-}" ]] || die "set SWE_POOL_URL or SWE_POOL_EXEC_URLS"

python="${PYTHON:-python3}"
sglang_port="${SGLANG_PORT:-30000}"
pool_port="${POOL_PORT:-18090}"
model_name="${SERVED_MODEL_NAME:-$(basename "${EVAL_MODEL_PATH:-model}")}"
if [[ -n "${SGLANG_URL:-}" && -z "${SERVED_MODEL_NAME:-}" && "$dry_run" != "1" ]]; then
  # a running server: the model it serves (swe-eval checks the endpoint names the model it is given)
  model_name="$(curl -fsS --max-time 10 "${SGLANG_URL%/}/models" |
    "$python" -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')" ||
    die "$SGLANG_URL/models names no model: set SERVED_MODEL_NAME to the model the server serves"
fi
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

run_bg() {  # run_bg LOG CMD...: start in the background, remember the pid
  local log="$1"; shift
  if [[ "$dry_run" == "1" ]]; then echo "+ $* > $log &"; return; fi
  "$@" >"$log" 2>&1 &
  pids+=("$!")
}

wait_http() {  # wait_http URL SECONDS
  [[ "$dry_run" == "1" ]] && { echo "+ wait for $1"; return; }
  for _ in $(seq 1 "$2"); do curl -fs -o /dev/null "$1" && return 0; sleep 1; done
  die "$1 did not answer within $2 s"
}

mkdir -p "$OUTPUT_DIR"
if [[ -z "${SGLANG_URL:-}" ]]; then
  # shellcheck disable=SC2086  # SGLANG_ARGS is a list of flags
  run_bg "$OUTPUT_DIR/sglang.log" "$python" -m sglang.launch_server --model-path "$EVAL_MODEL_PATH" \
    --served-model-name "$model_name" --host 127.0.0.1 --port "$sglang_port" --tp "${SGLANG_TP:-1}" \
    ${CHAT_TEMPLATE:+--chat-template "$CHAT_TEMPLATE"} ${SGLANG_ARGS:-}
  SGLANG_URL="http://127.0.0.1:$sglang_port/v1"
  wait_http "http://127.0.0.1:$sglang_port/health" 1800
fi

if [[ -z "${SWE_POOL_URL:-}" ]]; then
  [[ -n "${SWE_EXEC_TOKEN:-}${SWE_EXEC_TOKEN_FILE:-}" ]] || die "set SWE_EXEC_TOKEN (or SWE_EXEC_TOKEN_FILE) for the fleet"
  # the eval's client gets a token of its own for this pool, never the nodes' one
  if [[ -z "${SWE_POOL_TOKEN:-}${SWE_POOL_TOKEN_FILE:-}" ]]; then
    SWE_POOL_TOKEN="$("$python" -c 'import secrets; print(secrets.token_urlsafe(32))')"
    export SWE_POOL_TOKEN
  fi
  # on loopback (its default host): plain HTTP, whatever TLS the environment sets for a head's pool
  run_bg "$OUTPUT_DIR/pool.log" env -u SWE_POOL_TLS_CERT -u SWE_POOL_TLS_KEY SWE_POOL_PORT="$pool_port" \
    SWE_POOL_DB="$OUTPUT_DIR/leases.db" "$python" "$root/server/pool_server.py"
  export SWE_POOL_URL="http://127.0.0.1:$pool_port"
  wait_http "$SWE_POOL_URL/healthz" 60
fi
unset SWE_EXEC_TOKEN SWE_EXEC_TOKEN_FILE  # the eval below is a client: it never holds the nodes' token

cmd=("$python" "$root/eval/eval_swe.py" --data "$PROMPT_DATA" --output-dir "$OUTPUT_DIR"
     --model "openai/$model_name" --api-base "$SGLANG_URL" --max-concurrent "${MAX_CONCURRENT:-8}"
     --step-limit "${STEP_LIMIT:-50}" --max-tokens "${MAX_TOKENS:-8192}" --temperature "${TEMPERATURE:-0}")
[[ -n "${MAX_INSTANCES:-}" ]] && cmd+=(--max-instances "$MAX_INSTANCES")
# shellcheck disable=SC2206  # EXTRA_EVAL_ARGS is a list of flags
[[ -n "${EXTRA_EVAL_ARGS:-}" ]] && cmd+=(${EXTRA_EVAL_ARGS})
if [[ "$dry_run" == "1" ]]; then echo "+ ${cmd[*]}"; exit 0; fi
"${cmd[@]}"
