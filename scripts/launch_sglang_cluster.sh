#!/usr/bin/env bash
# SGLang cluster for evaluation: one SGLang server per node (data parallel over its GPUs) and an
# SGLang router on the head in front of them, serving an OpenAI-compatible API
# (http://<head>:ROUTER_PORT/v1) for eval/run_eval_swe.sh (SGLANG_URL) or eval/eval_swe.py.
# Run the same command on every node: NODE_RANK 0 (head: server + router) .. N-1 (server only).
#
# Required: MODEL_PATH (HF checkpoint), SGLANG_NODE_ADDRS (comma-separated addresses of all nodes,
#           head first; the router sends to http://<addr>:SERVER_PORT).
# Optional: SERVED_MODEL_NAME (basename of MODEL_PATH), TP (1; servers get GPUS_PER_NODE/TP data
#           parallel replicas), GPUS_PER_NODE (8), SERVER_PORT (30000), ROUTER_PORT (8000),
#           ROUTER_POLICY (cache_aware), CHAT_TEMPLATE (configs/chat_template_qwen3_thinking.jinja;
#           keeps <think> of earlier turns), REASONING_PARSER (unset: thinking stays in content),
#           CONTEXT_LENGTH, MEM_FRACTION (0.85), SGLANG_EXTRA_ARGS, LOG_DIR
#           (output/logs/sglang_cluster_<timestamp>), SWE_NODE_ROLE=head|worker (instead of NODE_RANK).
# DRY_RUN=1 or --dry-run prints the commands, runs nothing. .env.swe (or SWE_ENV_FILE) is read when
# present; the environment wins over it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DRY_RUN="${DRY_RUN:-0}"
die() { echo "error: $*" >&2; exit 2; }
for a in "$@"; do
  case "$a" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help)
      echo "usage: [NAME=value ...] bash scripts/launch_sglang_cluster.sh [--dry-run] [--help]   (settings: the environment, .env.swe)"
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $a (settings come from the environment)" ;;
  esac
done
# .env.swe (or SWE_ENV_FILE): the environment wins over it
# shellcheck source-path=SCRIPTDIR source=lib/env_file.sh
source "$root/scripts/lib/env_file.sh"
swe_env_file_load "$root"

# Every input checked at once: one report of every problem (where its value came from), then exit 2.
problems=()
problem() { problems+=("$1"); }
shown() { echo "$1=${!1:-} [from $(swe_origin "$1")]"; }
if [[ -z "${MODEL_PATH:-}" ]]; then problem "set MODEL_PATH in .env.swe or the environment (the Hugging Face checkpoint to serve)"
elif [[ ! -d "$MODEL_PATH" ]]; then problem "$(shown MODEL_PATH) is not a directory: it must be a Hugging Face checkpoint"
elif [[ ! -f "$MODEL_PATH/config.json" ]]; then problem "$(shown MODEL_PATH) has no config.json: it must be a Hugging Face checkpoint"
fi
[[ -n "${SGLANG_NODE_ADDRS:-}" ]] || problem "set SGLANG_NODE_ADDRS in .env.swe or the environment (comma-separated node addresses, head first)"
node_addrs="${SGLANG_NODE_ADDRS:-}"
IFS=, read -r -a addrs <<<"${node_addrs// /}"
if (( ${#addrs[@]} > 1 )) && [[ "${addrs[0]}" =~ ^(127\.|localhost$) ]]; then
  problem "$(shown SGLANG_NODE_ADDRS): the head's address is loopback but there are ${#addrs[@]} nodes: give addresses the head's router reaches"
fi
for name in TP GPUS_PER_NODE; do
  [[ "${!name:-1}" =~ ^[1-9][0-9]*$ ]] || problem "$(shown "$name") must be a positive integer"
done
if [[ "${TP:-1}" =~ ^[1-9][0-9]*$ && "${GPUS_PER_NODE:-8}" =~ ^[1-9][0-9]*$ ]] && (( ${GPUS_PER_NODE:-8} % ${TP:-1} != 0 )); then
  problem "GPUS_PER_NODE=${GPUS_PER_NODE:-8} [from $(swe_origin GPUS_PER_NODE)] is not a multiple of $(shown TP)"
fi
[[ -f "${CHAT_TEMPLATE:-$root/configs/chat_template_qwen3_thinking.jinja}" ]] || problem "$(shown CHAT_TEMPLATE) does not exist"
if [[ -n "${SWE_NODE_ROLE:-}" && "$SWE_NODE_ROLE" != head && "$SWE_NODE_ROLE" != worker ]]; then
  problem "$(shown SWE_NODE_ROLE) must be head or worker"
fi
if (( ${#problems[@]} )); then
  echo "error: ${#problems[@]} problem(s) with the settings (the environment wins over .env.swe, which wins over the defaults):" >&2
  printf '  - %s\n' "${problems[@]}" >&2
  exit 2
fi
python="${PYTHON:-python3}"
gpus="${GPUS_PER_NODE:-8}"
tp="${TP:-1}"
server_port="${SERVER_PORT:-30000}"
router_port="${ROUTER_PORT:-8000}"
template="${CHAT_TEMPLATE:-$root/configs/chat_template_qwen3_thinking.jinja}"
log_dir="${LOG_DIR:-$root/output/logs/sglang_cluster_$(date +%Y%m%d_%H%M%S)}"
rank="${NODE_RANK:-0}"
role="${SWE_NODE_ROLE:-}"
if [[ -z "$role" ]]; then if [[ "$rank" == "0" ]]; then role="head"; else role="worker"; fi; fi

pids=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() { local pid; for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

q() { local out="" a; for a in "$@"; do out+="$(printf '%q' "$a") "; done; echo "${out% }"; }
run_bg() {  # run_bg LOG CMD...
  local log="$1"; shift
  if [[ "$DRY_RUN" == "1" ]]; then echo "+ $(q "$@") > $log 2>&1 &"; return; fi
  echo "+ $(q "$@") > $log &" >&2
  "$@" >"$log" 2>&1 &
  pids+=("$!")
}
last_pid() { (( ${#pids[@]} )) && echo "${pids[-1]}"; return 0; }
wait_http() {  # wait_http URL SECONDS [PID LOG]: a PID that exits meanwhile is reported with LOG's end
  [[ "$DRY_RUN" == "1" ]] && { echo "+ wait for $1 (up to ${2}s)"; return; }
  local end=$((SECONDS + $2)) rc
  while (( SECONDS < end )); do
    if [[ -n "${3:-}" ]] && ! kill -0 "$3" 2>/dev/null; then
      rc=0; wait "$3" || rc=$?
      echo "error: the server for $1 exited (status $rc) before it answered; the end of $4:" >&2
      tail -n 20 "$4" | sed 's/^/  | /' >&2
      exit 2
    fi
    curl -fs -o /dev/null --max-time 5 "$1" && return 0
    sleep 1
  done
  die "$1 did not answer within $2 s${4:+ (see $4)}"
}

echo "# role: $role (node rank $rank), nodes: ${addrs[*]}"
[[ "$DRY_RUN" == "1" ]] || mkdir -p "$log_dir"
server=("$python" -m sglang.launch_server --model-path "$MODEL_PATH"
        --served-model-name "${SERVED_MODEL_NAME:-$(basename "$MODEL_PATH")}" --host 0.0.0.0 --port "$server_port"
        --tp-size "$tp" --dp-size "$((gpus / tp))" --mem-fraction-static "${MEM_FRACTION:-0.85}"
        --chat-template "$template")
[[ -n "${REASONING_PARSER:-}" ]] && server+=(--reasoning-parser "$REASONING_PARSER")
[[ -n "${CONTEXT_LENGTH:-}" ]] && server+=(--context-length "$CONTEXT_LENGTH")
if [[ -n "${SGLANG_EXTRA_ARGS:-}" ]]; then read -r -a extra <<<"$SGLANG_EXTRA_ARGS"; server+=("${extra[@]}"); fi
run_bg "$log_dir/sglang_server_$rank.log" "${server[@]}"
wait_http "http://127.0.0.1:$server_port/health" "${SGLANG_START_TIMEOUT:-1800}" "$(last_pid)" "$log_dir/sglang_server_$rank.log"

if [[ "$role" == head ]]; then
  workers=()
  for addr in "${addrs[@]}"; do
    [[ -n "$addr" ]] || continue
    wait_http "http://$addr:$server_port/health" "${SGLANG_START_TIMEOUT:-1800}"
    workers+=("http://$addr:$server_port")
  done
  run_bg "$log_dir/sglang_router.log" "$python" -m sglang_router.launch_router --host 0.0.0.0 --port "$router_port" \
    --policy "${ROUTER_POLICY:-cache_aware}" --worker-urls "${workers[@]}"
  wait_http "http://127.0.0.1:$router_port/health" 120 "$(last_pid)" "$log_dir/sglang_router.log"
  echo "# serving: http://${addrs[0]}:$router_port/v1 (${#workers[@]} servers)"
fi
[[ "$DRY_RUN" == "1" ]] && exit 0
wait -n "${pids[@]}"
die "a server stopped; see $log_dir"
