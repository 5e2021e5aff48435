#!/usr/bin/env bash
# Build (and with --mine, mine and certify) the real-task set of data/real_tasks/instances.jsonl.
#
# For each library of sources.tsv: its releases are downloaded from their registry (PyPI sdists with
# pip), made into a git history (one commit per release, make_history.py), then either
#   default   the task images of the rows already in instances.jsonl are built (swe-mine-tasks
#             --images-for): offline builds FROM the toolchain/base image, checked against the rows'
#             base commits. Idempotent: existing images are kept. This is what CI and tests run.
#   --mine    swe-mine-tasks mines the history, certifies on a local fleet (gold x2, the empty
#             patch) and instances.jsonl is rewritten from the certified rows of every library.
#
# Usage: data/real_tasks/build.sh [--mine]
# Environment: SWE_REAL_TASKS_CACHE (downloads and histories; default ~/.cache/swe-rl/real_tasks),
#              SWE_BASE_IMAGE (default swe-rl/base:bookworm; built if missing), PYTHON
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/data/real_tasks"
CACHE="${SWE_REAL_TASKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/swe-rl/real_tasks}"
PYTHON="${PYTHON:-python3}"
BASE_IMAGE="${SWE_BASE_IMAGE:-swe-rl/base:bookworm}"
ROWS="$HERE/instances.jsonl"
MINE=0
[[ "${1:-}" == "--mine" ]] && MINE=1

die() { echo "error: $*" >&2; exit 1; }
command -v docker >/dev/null || die "docker is not installed"
docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || SWE_BASE_IMAGE="$BASE_IMAGE" bash "$ROOT/scripts/build_base_image.sh"
mkdir -p "$CACHE/downloads"

fetch() {  # registry package version -> path of the release tarball (cached)
  local registry=$1 package=$2 version=$3 found
  found=$(find "$CACHE/downloads" -maxdepth 1 -iname "${package//-/[-_]}-$version.tar.gz" | head -n 1)
  if [[ -z "$found" ]]; then
    case "$registry" in
      pypi) "$PYTHON" -m pip download -q --no-deps --no-binary :all: --dest "$CACHE/downloads" \
              "$package==$version" >&2 || die "cannot download $package $version" ;;
      *) die "unknown registry $registry" ;;
    esac
    found=$(find "$CACHE/downloads" -maxdepth 1 -iname "${package//-/[-_]}-$version.tar.gz" | head -n 1)
  fi
  [[ -n "$found" ]] || die "no tarball for $package $version"
  echo "$found"
}

mined=()
while IFS=$'\t' read -r name registry package repo versions; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  tarballs=()
  for v in $versions; do tarballs+=("$(fetch "$registry" "$package" "$v")"); done
  history="$CACHE/histories/$name"
  rm -rf "$history"
  "$PYTHON" "$HERE/make_history.py" --repo "$history" "${tarballs[@]}" >/dev/null
  if ((MINE)); then
    out="$CACHE/mined/$name/tasks.jsonl"
    "$PYTHON" -m swe_rl.eval.mining.cli "$history" --repo-name "$repo" --output "$out" --local-fleet \
      --runs 2 --image-template 'swe-rl/real.{id}:latest'
    mined+=("$out")
  else
    [[ -f "$ROWS" ]] || die "$ROWS is missing: run with --mine first"
    "$PYTHON" -m swe_rl.eval.mining.cli "$history" --repo-name "$repo" --images-for "$ROWS" \
      --output "$CACHE/unused.jsonl"
  fi
done <"$HERE/sources.tsv"

if ((MINE)); then
  cat "${mined[@]}" | "$PYTHON" -c 'import json, sys
rows = sorted((json.loads(line) for line in sys.stdin if line.strip()), key=lambda r: r["instance_id"])
sys.stdout.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))' >"$ROWS"
  echo "wrote $(wc -l <"$ROWS") certified rows to $ROWS"
fi
