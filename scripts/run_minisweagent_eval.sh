#!/usr/bin/env bash
# Run mini-swe-agent (pinned, set up by scripts/setup_minisweagent_node.sh) on this Docker node
# against a model served by SGLang, writing mini-swe-agent's preds.json and trajectories
# (eval/run_minisweagent.py). Several nodes split one dataset with --slice or --shard, each into
# its own output directory; grade them together with eval/grade_predictions.py (docs/minisweagent.md).
#
#   bash scripts/run_minisweagent_eval.sh --sglang-url http://ROUTER:30000 --workers 16
#   bash scripts/run_minisweagent_eval.sh --sglang-url http://ROUTER:30000 --slice 0:5 --workers 2   # smoke test
#   bash scripts/run_minisweagent_eval.sh --sglang-url URL --workers 16 --shard 1/4                  # node 2 of 4
#
# Options:
#   --sglang-url URL   SGLang router (or any OpenAI-compatible server); /v1 is added when missing (required)
#   --workers N        instances at once on this node (default 4)
#   --slice a:b        python slice of the instance list (after --filter)
#   --shard I/N        the I-th (0-based) of N contiguous parts of the (sliced) list
#   --subset NAME      verified (default) | lite | full | a dataset name; verified uses
#                      $VERIFIED_DIR/verified_eval.jsonl when VERIFIED_DIR is set (no hub needed)
#   --data FILE        instances file instead of --subset (verified_eval.jsonl, fixtures, slime rows)
#   --output DIR       run directory (default output/minisweagent_runs/<model>_<subset>[_<slice/shard>])
#   --model NAME       served model name (default: the first one the server lists); "openai/" is added
#   --filter REGEX     only instance ids matching REGEX
#   --grade            grade afterwards with eval/grade_predictions.py (fleet at SWE_POOL_URL, else a
#                      local fleet on this node), with the same interpreter as the run (the venv's)
#   --dry-run          print the commands, run nothing
#   -- ARGS            passed on to eval/run_minisweagent.py (e.g. -- -c agent.step_limit=50)
# Environment: MSWEA_VENV (default ~/.venvs/swe-rl-minisweagent), MSWEA_PYTHON (an interpreter
# with mini-swe-agent instead of the venv's), VERIFIED_DIR, SWE_POOL_URL / SWE_POOL_TOKEN (--grade).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# .env.swe (or SWE_ENV_FILE): the environment wins over it
# shellcheck source-path=SCRIPTDIR source=lib/env_file.sh
source "$root/scripts/lib/env_file.sh"
swe_env_file_load "$root"

usage() {
  echo "usage: bash scripts/run_minisweagent_eval.sh --sglang-url URL [--workers N] [--slice A:B | --shard I/N] [options]"
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}
die() { echo "error: $*" >&2; exit 2; }

sglang_url="" workers=4 slice="" shard="" subset="verified" data="" output="" model="" filter=""
grade=0 dry_run=0
extra=()
while (($#)); do
  case "$1" in
    --sglang-url) sglang_url="${2:?--sglang-url needs a value}"; shift 2 ;;
    --workers) workers="${2:?--workers needs a value}"; shift 2 ;;
    --slice) slice="${2:?--slice needs a value}"; shift 2 ;;
    --shard) shard="${2:?--shard needs a value}"; shift 2 ;;
    --subset) subset="${2:?--subset needs a value}"; shift 2 ;;
    --data) data="${2:?--data needs a value}"; shift 2 ;;
    --output) output="${2:?--output needs a value}"; shift 2 ;;
    --model) model="${2:?--model needs a value}"; shift 2 ;;
    --filter) filter="${2:?--filter needs a value}"; shift 2 ;;
    --grade) grade=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ -n "$sglang_url" ]] || die "--sglang-url is required"
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, got '$workers'"
[[ -z "$slice" || "$slice" =~ ^-?[0-9]*:-?[0-9]*(:-?[0-9]+)?$ ]] || die "--slice must look like a:b, got '$slice'"
[[ -z "$shard" || "$shard" =~ ^[0-9]+/[1-9][0-9]*$ ]] || die "--shard must look like I/N, got '$shard'"

venv="${MSWEA_VENV:-$HOME/.venvs/swe-rl-minisweagent}"
python="${MSWEA_PYTHON:-$venv/bin/python}"
url="${sglang_url%/}"
[[ "$url" == */v1 ]] || url="$url/v1"

if [[ "$dry_run" != "1" ]]; then
  [[ -x "$python" ]] || command -v "$python" >/dev/null 2>&1 \
    || die "$python not found: run scripts/setup_minisweagent_node.sh first (or set MSWEA_PYTHON)"
  body="$(curl -fsS --max-time 15 "$url/models")" || die "$url/models does not answer: is the SGLang router up?"
  if [[ -z "$model" ]]; then
    model="$(printf '%s' "$body" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')" \
      || die "could not read a model name from $url/models; pass --model"
  fi
fi
model="${model:-MODEL}"
[[ "$model" == */* && "$model" != openai/* ]] && echo "note: '$model' is used as LiteLLM model name as is" >&2
[[ "$model" == */* ]] || model="openai/$model"

source_args=()
if [[ -n "$data" ]]; then
  source_args=(--data "$data")
elif [[ "$subset" == "verified" && -n "${VERIFIED_DIR:-}" ]]; then
  [[ "$dry_run" == "1" || -f "$VERIFIED_DIR/verified_eval.jsonl" ]] \
    || die "$VERIFIED_DIR/verified_eval.jsonl missing: run data/export_swebench_verified_assets.py"
  source_args=(--data "$VERIFIED_DIR/verified_eval.jsonl")
else
  source_args=(--subset "$subset")
fi

if [[ -z "$output" ]]; then
  tag="$(basename "${data:-$subset}")"; tag="${tag%.jsonl}"
  part="${slice:+_${slice/:/-}}${shard:+_shard${shard/\//of}}"
  output="$root/output/minisweagent_runs/${model#openai/}_${tag}${part}"
  output="${output//[^A-Za-z0-9_.\/-]/_}"
fi

cmd=("$python" "$root/eval/run_minisweagent.py" "${source_args[@]}" --output "$output" --model "$model"
     --api-base "$url" --workers "$workers")
[[ -n "$slice" ]] && cmd+=(--slice "$slice")
[[ -n "$shard" ]] && cmd+=(--shard "$shard")
[[ -n "$filter" ]] && cmd+=(--filter "$filter")
((${#extra[@]})) && cmd+=("${extra[@]}")

export LITELLM_LOCAL_MODEL_COST_MAP=True MSWEA_SILENT_STARTUP=1
[[ -d "$venv/mswea-config" ]] && export MSWEA_GLOBAL_CONFIG_DIR="$venv/mswea-config"

grade_cmd=("$python" "$root/eval/grade_predictions.py" --preds "$output/preds.json")  # one interpreter for all
[[ -z "${SWE_POOL_URL:-}" ]] && grade_cmd+=(--local-fleet)

if [[ "$dry_run" == "1" ]]; then
  echo "+ ${cmd[*]}"
  [[ "$grade" == "1" ]] && echo "+ ${grade_cmd[*]}"
  exit 0
fi
echo "[mini-swe-agent] $model at $url -> $output"
"${cmd[@]}"
if [[ "$grade" == "1" ]]; then
  "${grade_cmd[@]}"
fi
