#!/usr/bin/env bash
# Build (and with --mine, mine and certify again) the mined set of data/mined_tasks/instances.jsonl.
#
# For each repository of sources.tsv: a clone of it (from $SWE_MINED_MIRRORS/<owner>+<name>/repo when
# that bare mirror exists, else from GitHub), then either
#   default   the task images of the rows already in instances.jsonl are built (swe-mine-tasks
#             --images-for): offline builds FROM the toolchain/base image of the parent commit's
#             tree, checked against the rows' base commits. Idempotent: existing images are kept.
#   --mine    swe-mine-tasks mines the range of sources.tsv with its arguments, certifies on a local
#             fleet (gold x2, the empty patch), and instances.jsonl and drops.jsonl are rewritten from
#             the certified rows and the drops of every repository mined.
#
# Usage: data/mined_tasks/build.sh [--mine | --rows FILE] [name ...]   (default: every repository of
#        sources.tsv; with names and --mine, the rows and drops of the other repositories are kept as
#        they are; --rows FILE: the images of those rows only, e.g. a test's sample)
# Environment: SWE_MINED_MIRRORS (bare mirrors; default /work/.mirror), SWE_MINED_CACHE (clones and
#              the miner's outputs; default ~/.cache/swe-rl/mined_tasks), PYTHON, SWE_MINE_JOBS (2)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/data/mined_tasks"
CACHE="${SWE_MINED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/swe-rl/mined_tasks}"
MIRRORS="${SWE_MINED_MIRRORS:-/work/.mirror}"
PYTHON="${PYTHON:-python3}"
JOBS="${SWE_MINE_JOBS:-2}"
die() { echo "error: $*" >&2; exit 1; }
ROWS="$HERE/instances.jsonl"
MINE=0
if [[ "${1:-}" == "--mine" ]]; then MINE=1; shift
elif [[ "${1:-}" == "--rows" ]]; then
  [[ -f "${2:-}" ]] || die "--rows needs a file of rows (${2:-none given} is not one)"
  ROWS=$(realpath "$2"); shift 2
fi
ONLY=("$@")
for name in "${ONLY[@]}"; do
  cut -f1 "$HERE/sources.tsv" | grep -qxF "$name" || die "$name is not a name of $HERE/sources.tsv"
done
command -v docker >/dev/null || die "docker is not installed"
# Go, JavaScript and Rust task images are built FROM the toolchain images (Debian's packages).
PYTHON="$PYTHON" bash "$ROOT/data/build_multilang_images.sh" --toolchains go node rust

clone() {  # name repo -> a clone with every commit of the range (fetched again when it is behind)
  local name=$1 repo=$2 dir="$CACHE/repos/$1"
  if [[ ! -d "$dir/.git" ]]; then
    mkdir -p "$CACHE/repos"
    if [[ -d "$MIRRORS/$name/repo" ]]; then
      git clone -q "$MIRRORS/$name/repo" "$dir"
    else
      git clone -q "https://github.com/$repo.git" "$dir"
    fi
  fi
  echo "$dir"
}

mined=()
while IFS=$'\t' read -r -u 3 name repo range extra; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if ((${#ONLY[@]})) && ! printf '%s\n' "${ONLY[@]}" | grep -qxF "$name"; then continue; fi
  dir=$(clone "$name" "$repo")
  git -C "$dir" cat-file -e "${range##*..}^{commit}" 2>/dev/null || die "$name: ${range##*..} is not in $dir"
  # shellcheck disable=SC2086 # the arguments column is words
  args=(${extra:-})
  for i in "${!args[@]}"; do [[ "${args[$i]}" == recipes/* ]] && args[$i]="$HERE/${args[$i]}"; done
  if ((MINE)); then
    out="$CACHE/mined/$name/tasks.jsonl"
    "$PYTHON" -m swe_rl.eval.mining.cli "$dir" --range "$range" --repo-name "$repo" --output "$out" \
      --local-fleet --runs 2 --jobs "$JOBS" --certify-concurrency 2 --no-progress \
      --name-prefix "swe-rl-mine-${name//+/-}" ${args[@]:+"${args[@]}"}
    mined+=("$name")
  else
    [[ -f "$ROWS" ]] || die "$ROWS is missing (the set's rows: run with --mine first)"
    "$PYTHON" -m swe_rl.eval.mining.cli "$dir" --repo-name "$repo" --images-for "$ROWS" \
      --output "$CACHE/unused.jsonl" ${args[@]:+"${args[@]}"}
  fi
done 3<"$HERE/sources.tsv"

if ((MINE)); then
  "$PYTHON" "$HERE/collect.py" --set "$HERE" --mined "$CACHE/mined" "${mined[@]}"
fi
