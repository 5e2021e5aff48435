#!/usr/bin/env bash
# Build (and with --mine, mine and certify) the real-task set of data/real_tasks/instances.jsonl.
#
# For each library of sources.tsv: its releases are downloaded from their registry (PyPI sdists with
# pip, npm tarballs with npm pack, Debian's golang-*-dev / librust-*-dev packages with apt-get
# download: their Go module or crate folder), made into a git history (one commit per release, or
# one release and its injected bugs, make_history.py), then either
#   default   the task images of the rows already in instances.jsonl are built (swe-mine-tasks
#             --images-for): offline builds FROM the toolchain/base image, checked against the rows'
#             base commits. Idempotent: existing images are kept. This is what CI and tests run.
#   --mine    swe-mine-tasks mines the history, certifies on a local fleet (gold x2, the empty
#             patch) and instances.jsonl is rewritten from the certified rows of every library.
#
# Usage: data/real_tasks/build.sh [--mine] [library ...]   (default: every library of sources.tsv;
#        with names and --mine, the rows of the other libraries are kept as they are)
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
[[ "${1:-}" == "--mine" ]] && MINE=1 && shift
ONLY=("$@")

die() { echo "error: $*" >&2; exit 1; }
command -v docker >/dev/null || die "docker is not installed"
docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || SWE_BASE_IMAGE="$BASE_IMAGE" bash "$ROOT/scripts/build_base_image.sh"
mkdir -p "$CACHE/downloads"
# One build at a time per cache: test processes (pytest-xdist workers) call this at once, and two runs
# rebuilding one history raced (one removed the folder the other was filling). The second waits, then
# finds the images built.
exec 9>"$CACHE/.build.lock"
flock 9
# Go, JavaScript and Rust task images are built FROM the fixtures' toolchain images (Debian's packages).
SWE_BASE_IMAGE="$BASE_IMAGE" PYTHON="$PYTHON" bash "$ROOT/data/build_multilang_images.sh" --toolchains go node rust

cached() {  # package version -> the cached tarball, if any
  find "$CACHE/downloads" -maxdepth 1 \( -iname "${1//-/[-_]}-$2.tar.gz" -o -iname "${1//-/[-_]}-$2.tgz" \) |
    head -n 1
}

debian_source() {  # package version -> a tarball of the Go module or crate folder the .deb ships
  local package=$1 version=$2 tmp src
  tmp=$(mktemp -d /tmp/swe-rl-real-deb.XXXXXX)
  (cd "$tmp" && apt-get download -q "$package=$version" >/dev/null 2>&1) || { rm -rf "$tmp"; return 1; }
  dpkg-deb -x "$tmp"/*.deb "$tmp/root"
  # The shallowest folder with a go.mod or Cargo.toml: the module or crate itself.
  src=$(find "$tmp/root/usr/share" \( -name go.mod -o -name Cargo.toml \) -printf '%d %h\n' | sort -n | head -n 1 | cut -d' ' -f2-)
  [[ -n "$src" ]] || { rm -rf "$tmp"; return 1; }
  tar -C "$(dirname "$src")" -czf "$CACHE/downloads/$package-$version.tar.gz" "$(basename "$src")"
  rm -rf "$tmp"
}

fetch() {  # registry package version -> path of the release tarball (cached)
  local registry=$1 package=$2 version=$3 found
  found=$(cached "$package" "$version")
  if [[ -z "$found" ]]; then
    case "$registry" in
      pypi) "$PYTHON" -m pip download -q --no-deps --no-binary :all: --dest "$CACHE/downloads" \
              "$package==$version" >&2 || die "cannot download $package $version" ;;
      npm) (cd "$CACHE/downloads" && npm pack -q "$package@$version" >/dev/null) ||
              die "cannot download $package $version" ;;
      debian) debian_source "$package" "$version" || die "cannot download $package $version (apt-get update?)" ;;
      *) die "unknown registry $registry" ;;
    esac
    found=$(cached "$package" "$version")
  fi
  [[ -n "$found" ]] || die "no tarball for $package $version"
  echo "$found"
}

mined=()
kept=()  # repositories of the libraries not named on the command line
while IFS=$'\t' read -r -u 3 name registry package repo versions mutations; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if ((${#ONLY[@]})) && ! printf '%s\n' "${ONLY[@]}" | grep -qxF "$name"; then
    kept+=("$repo")
    continue
  fi
  tarballs=()
  for v in $versions; do tarballs+=("$(fetch "$registry" "$package" "$v")"); done
  patches=()
  for m in ${mutations:-}; do patches+=("$HERE/mutations/$m"); done
  history="$CACHE/histories/$name"
  rm -rf "$history"
  "$PYTHON" "$HERE/make_history.py" --repo "$history" ${patches[@]:+--mutations "${patches[@]}"} -- \
    "${tarballs[@]}" >/dev/null
  if ((MINE)); then
    out="$CACHE/mined/$name/tasks.jsonl"
    "$PYTHON" -m swe_rl.eval.mining.cli "$history" --repo-name "$repo" --output "$out" --local-fleet \
      --runs 2 --image-template 'swe-rl/real.{id}:latest' ${patches[@]:+--code-only-ok --statement commit}
    mined+=("$out")
  else
    [[ -f "$ROWS" ]] || die "$ROWS is missing: run with --mine first"
    "$PYTHON" -m swe_rl.eval.mining.cli "$history" --repo-name "$repo" --images-for "$ROWS" \
      --output "$CACHE/unused.jsonl"
  fi
done 3<"$HERE/sources.tsv"

if ((MINE)); then
  for out in "${mined[@]}"; do if [[ -f "$out" ]]; then cat "$out"; fi; done | KEPT="${kept[*]}" ROWS="$ROWS" "$PYTHON" -c 'import json, os, sys
from pathlib import Path
kept, old = set(os.environ["KEPT"].split()), Path(os.environ["ROWS"])
rows = [json.loads(line) for line in sys.stdin if line.strip()]
if old.exists():  # the rows of the libraries not mined this time stay
    rows += [r for r in map(json.loads, filter(str.strip, old.read_text().splitlines())) if r["repo"] in kept]
rows.sort(key=lambda r: r["instance_id"])
sys.stdout.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))' >"$ROWS.tmp"
  mv "$ROWS.tmp" "$ROWS"
  echo "wrote $(wc -l <"$ROWS") certified rows to $ROWS"
fi
