#!/usr/bin/env bash
# One-time set-up of a Docker node for the mini-swe-agent evaluation path (docs/minisweagent.md):
#   1. checks that Docker answers (mini-swe-agent starts its containers with the docker CLI);
#   2. creates a venv with swe-rl and the pinned mini-swe-agent (pyproject.toml extra `minisweagent`,
#      notes in third_party/minisweagent.md) and checks the installed version against the pin;
#   3. writes mini-swe-agent's global settings for this venv ($VENV/mswea-config/.env): no price
#      needed (cost tracking ignores missing prices), our LiteLLM model registry, no network
#      fetch of LiteLLM's price list;
#   4. checks the config loads and, with --sglang-url, that the endpoint lists its models.
#
#   bash scripts/setup_minisweagent_node.sh --sglang-url http://ROUTER:30000
#   bash scripts/setup_minisweagent_node.sh --check-only --sglang-url http://ROUTER:30000   # steps 1, 4
#   bash scripts/setup_minisweagent_node.sh --dry-run                                       # print, run nothing
#
# Options: --venv DIR (default $MSWEA_VENV or ~/.venvs/swe-rl-minisweagent), --python PY (the
# interpreter the venv is made from, default python3), --check-only, --dry-run.
# Environment: PIP_ARGS (extra pip flags, e.g. an index mirror), MSWEA_PYTHON (use this
# interpreter instead of the venv's: checks only).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; exit 2; }

venv="${MSWEA_VENV:-$HOME/.venvs/swe-rl-minisweagent}"
base_python="python3"
sglang_url=""
dry_run=0
check_only=0
while (($#)); do
  case "$1" in
    --sglang-url) sglang_url="${2:?--sglang-url needs a value}"; shift 2 ;;
    --venv) venv="${2:?--venv needs a value}"; shift 2 ;;
    --python) base_python="${2:?--python needs a value}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --check-only) check_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

pin="$(sed -n 's/.*"mini-swe-agent==\([^"]*\)".*/\1/p' "$root/pyproject.toml" | head -n1)"
[[ -n "$pin" ]] || die "no mini-swe-agent pin in $root/pyproject.toml (extra 'minisweagent')"
python="${MSWEA_PYTHON:-$venv/bin/python}"
config_dir="$venv/mswea-config"

run() {  # print, and run unless --dry-run
  echo "+ $*"
  [[ "$dry_run" == "1" ]] || "$@"
}

api_base() {  # URL -> URL/v1 (SGLang's OpenAI-compatible routes)
  local url="${1%/}"
  [[ "$url" == */v1 ]] && echo "$url" || echo "$url/v1"
}

echo "[setup] mini-swe-agent $pin, venv $venv"
if [[ "$dry_run" == "1" ]]; then
  echo "+ docker info"
else
  docker info >/dev/null 2>&1 || die "docker does not answer (is the daemon running and may $(id -un) use it?)"
fi

if [[ "$check_only" != "1" ]]; then
  [[ -x "$venv/bin/python" ]] || run "$base_python" -m venv "$venv"
  # shellcheck disable=SC2086  # PIP_ARGS is a list of flags
  run "$venv/bin/python" -m pip install -q --disable-pip-version-check ${PIP_ARGS:-} -e "${root}[minisweagent]"
  if [[ "$dry_run" == "1" ]]; then
    echo "+ write $config_dir/.env"
  else
    mkdir -p "$config_dir"
    cat >"$config_dir/.env" <<EOF
# mini-swe-agent global settings for this venv (written by scripts/setup_minisweagent_node.sh).
# scripts/run_minisweagent_eval.sh points MSWEA_GLOBAL_CONFIG_DIR here.
MSWEA_COST_TRACKING=ignore_errors
LITELLM_MODEL_REGISTRY_PATH=$root/configs/litellm.json
LITELLM_LOCAL_MODEL_COST_MAP=True
MSWEA_SILENT_STARTUP=1
EOF
  fi
fi

# The installed version is the pinned one, and our config layers load with it.
check_py="import minisweagent
from swe_rl.eval import run_minisweagent as r
assert minisweagent.__version__ == '$pin', f'mini-swe-agent {minisweagent.__version__} installed, $pin pinned'
args = r.parse_args(['--data', 'x.jsonl', '-o', '/tmp/unused', '--model', 'openai/check'])
cfg = r.build_config(args, 'check')
print('[setup] mini-swe-agent', minisweagent.__version__, '| model class', cfg['model']['model_class'],
      '| step limit', cfg['agent']['step_limit'])"
if [[ "$dry_run" == "1" ]]; then
  echo "+ $python -c <check version $pin and config>"
else
  [[ -x "$python" ]] || command -v "$python" >/dev/null || die "$python missing: run without --check-only first"
  MSWEA_GLOBAL_CONFIG_DIR="$config_dir" MSWEA_SILENT_STARTUP=1 LITELLM_LOCAL_MODEL_COST_MAP=True \
    "$python" -c "$check_py"
fi

if [[ -n "$sglang_url" ]]; then
  models_url="$(api_base "$sglang_url")/models"
  if [[ "$dry_run" == "1" ]]; then
    echo "+ curl $models_url"
  else
    body="$(curl -fsS --max-time 15 "$models_url")" || die "$models_url does not answer: is the SGLang router up?"
    names="$(printf '%s' "$body" | "$python" -c 'import json,sys; print(" ".join(m["id"] for m in json.load(sys.stdin)["data"]))')"
    echo "[setup] $models_url serves: ${names:-<nothing>}"
  fi
fi
echo "[setup] ready: bash scripts/run_minisweagent_eval.sh --sglang-url URL --workers N"
