#!/usr/bin/env bash
# Main job on the embedded default: sets up this machine (scripts/setup_machine.sh; the first time
# about 10 minutes), starts a local fleet on loopback (an exec server and a pool server, and the
# internal Docker network a bundled task names), and evaluates the bundled fixture tasks with the
# gold policy. It fails (non-zero exit) unless gold resolves every instance (POLICY=noop: none);
# an instance that ends in env_error (an infrastructure failure) fails the run too.
#
#   bash scripts/run_local_eval.sh                 # gold
#   POLICY=noop bash scripts/run_local_eval.sh
#   OUTPUT_DIR=/tmp/run bash scripts/run_local_eval.sh --max-concurrent 4
#   SWE_SKIP_SETUP=1 bash scripts/run_local_eval.sh  # the machine is set up already
#   DRY_RUN=1 bash scripts/run_local_eval.sh       # prints the plan (every command), starts nothing
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case "${1:-}" in
  -h|--help)
    echo "usage: [POLICY=gold|noop] [OUTPUT_DIR=...] [DRY_RUN=1] bash scripts/run_local_eval.sh [eval_swe.py options]"
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  --dry-run) export DRY_RUN=1; shift ;;
esac

POLICY="${POLICY:-gold}"
DATA="${DATA:-data/fixtures/instances.jsonl}"
OUTPUT_DIR="${OUTPUT_DIR:-output/eval_runs/local_${POLICY}_$(date -u +%Y%m%dT%H%M%SZ)}"
PYTHON="${PYTHON:-python3}"

if [[ "${DRY_RUN:-0}" == "1" ]]; then
  echo "# plan of the main job (DRY_RUN=1: nothing is run)"
  [[ "${SWE_SKIP_SETUP:-0}" == "1" ]] || echo "+ bash scripts/setup_machine.sh"
  q=""; for a in "$PYTHON" eval/eval_swe.py --data "$DATA" --policy "$POLICY" --local-fleet \
    --output-dir "$OUTPUT_DIR" --max-concurrent "${MAX_CONCURRENT:-2}" "$@"; do q+="$(printf '%q' "$a") "; done
  echo "+ ${q% }"
  echo "+ check $OUTPUT_DIR/summary.json: policy $POLICY resolves $([[ "$POLICY" == noop ]] && echo none || echo every instance)"
  exit 0
fi
if [[ "${SWE_SKIP_SETUP:-0}" != "1" ]]; then
  bash scripts/setup_machine.sh
fi
"$PYTHON" eval/eval_swe.py --data "$DATA" --policy "$POLICY" --local-fleet \
  --output-dir "$OUTPUT_DIR" --max-concurrent "${MAX_CONCURRENT:-2}" "$@"

# The reference policies have a known answer: anything else means the set-up is broken.
"$PYTHON" - "$OUTPUT_DIR/summary.json" "$POLICY" <<'PY'
import json
import sys

path, policy = sys.argv[1], sys.argv[2]
summary = json.load(open(path))
expected = {"gold": summary["total"], "noop": 0}.get(policy)
if expected is not None and summary["resolved"] != expected:
    sys.exit(
        f"error: the {policy} policy resolved {summary['resolved']} of {summary['total']} instances, "
        f"expected {expected}: the set-up is broken (statuses {summary['status_counts']}; {path})"
    )
print(f"{policy}: resolved {summary['resolved']} of {summary['total']}" + (" as expected" if expected is not None else ""))
PY
