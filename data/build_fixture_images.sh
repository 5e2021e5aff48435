#!/usr/bin/env bash
# Build the bundled fixture task images (data/fixtures/<instance_id>/) offline.
#
# Each image is FROM the offline base image and holds the library's source
# distribution at /testbed as a git repository whose HEAD is the instance's
# base commit (the sdist plus the injected bug, committed deterministically).
# Source distributions are downloaded on this host with pip, checked against
# the sha256 pinned below and cached; `docker build` itself needs no network.
#
# Usage: data/build_fixture_images.sh [instance_id ...]    (default: all)
# Environment:
#   FORCE=1           rebuild images that already exist
#   NO_CACHE=1        do not reuse docker's layer cache (checks the base commits from scratch)
#   SWE_BASE_IMAGE    base image (default swe-rl/base:bookworm; built if missing)
#   SWE_SDIST_CACHE   sdist cache (default ~/.cache/swe-rl/sdists)
#   MULTILANG=0       skip the non-Python fixtures (data/build_multilang_images.sh, run when no
#                     instance is named: Go, JavaScript and Rust toolchains from Debian's mirror)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FIXTURES="$ROOT/data/fixtures"
BASE_IMAGE="${SWE_BASE_IMAGE:-swe-rl/base:bookworm}"
CACHE="${SWE_SDIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/swe-rl/sdists}"
PYTHON="${PYTHON:-python3}"

# Pinned source distributions: file name -> requirement, file name -> sha256.
declare -A SDIST_REQUIREMENT=(
  [toolz-0.12.1.tar.gz]="toolz==0.12.1"
  [more-itertools-10.2.0.tar.gz]="more-itertools==10.2.0"
  [inflection-0.5.1.tar.gz]="inflection==0.5.1"
)
declare -A SDIST_SHA256=(
  [toolz-0.12.1.tar.gz]="ecca342664893f177a13dac0e6b41cbd8ac25a358e5f215316d43e2100224f4d"
  [more-itertools-10.2.0.tar.gz]="8fccb480c43d3e99a00087634c06dd02b0d50fbf088b380de5a41a015ec239e1"
  [inflection-0.5.1.tar.gz]="1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417"
)

die() { echo "error: $*" >&2; exit 1; }

sha256_ok() {  # file expected_sha256
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | awk '{print $1}')" == "$2" ]]
}

# Print the path of a verified sdist in the cache, downloading it if needed.
fetch_sdist() {
  local name=$1 req sha dest tmp
  req="${SDIST_REQUIREMENT[$name]:-}"
  sha="${SDIST_SHA256[$name]:-}"
  [[ -n "$req" && -n "$sha" ]] || die "sdist $name is not pinned in $0"
  dest="$CACHE/$name"
  if sha256_ok "$dest" "$sha"; then
    echo "$dest"
    return
  fi
  mkdir -p "$CACHE"
  tmp=$(mktemp -d "$CACHE/.download.XXXXXX")
  echo "downloading $req" >&2
  if ! "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp" "$req" >&2; then
    rm -rf "$tmp"
    die "pip could not download $req"
  fi
  if ! sha256_ok "$tmp/$name" "$sha"; then
    rm -rf "$tmp"
    die "$name: missing or sha256 mismatch (expected $sha)"
  fi
  mv "$tmp/$name" "$dest"
  rm -rf "$tmp"
  echo "$dest"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

command -v docker >/dev/null || die "docker is not installed"
if ! image_exists "$BASE_IMAGE"; then
  SWE_BASE_IMAGE="$BASE_IMAGE" bash "$ROOT/scripts/build_base_image.sh"
fi

build_list=$("$PYTHON" "$FIXTURES/make_instances.py" --list)
[[ -n "$build_list" ]] || die "no fixture instances under $FIXTURES"
if (($# > 0)); then
  for wanted in "$@"; do
    cut -f1 <<<"$build_list" | grep -qxF "$wanted" || die "unknown instance $wanted"
  done
fi

work=$(mktemp -d /tmp/swe-rl-fixtures.XXXXXX)
trap 'rm -rf "$work"' EXIT

built=0
skipped=0
while IFS=$'\t' read -r instance_id image sdist pythonpath base_commit; do
  if (($# > 0)) && ! printf '%s\n' "$@" | grep -qxF "$instance_id"; then
    continue
  fi
  if [[ "${FORCE:-0}" != "1" ]] && image_exists "$image"; then
    skipped=$((skipped + 1))
    continue
  fi
  [[ "$base_commit" == "-" ]] && base_commit=""
  ctx="$work/$instance_id"
  mkdir -p "$ctx"
  cp "$(fetch_sdist "$sdist")" "$ctx/$sdist"
  cp "$FIXTURES/Dockerfile" "$FIXTURES/$instance_id/bug.patch" "$ctx/"
  if [[ -f "$FIXTURES/$instance_id/setup.sh" ]]; then
    cp "$FIXTURES/$instance_id/setup.sh" "$ctx/setup.sh"
  else
    printf '# no set-up step\n' >"$ctx/setup.sh"
  fi
  echo "building $image"
  log="$work/$instance_id.log"
  cache_flag=()
  [[ "${NO_CACHE:-0}" == "1" ]] && cache_flag=(--no-cache)
  if ! docker build "${cache_flag[@]}" --network none --tag "$image" \
      --label "swe-rl.fixture=1" \
      --build-arg "BASE_IMAGE=$BASE_IMAGE" \
      --build-arg "SDIST=$sdist" \
      --build-arg "INSTANCE_ID=$instance_id" \
      --build-arg "BASE_COMMIT=$base_commit" \
      --build-arg "COMMIT_MESSAGE=Import ${sdist%.tar.gz}" \
      --build-arg "PYTHONPATH_DIR=$pythonpath" \
      "$ctx" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "docker build failed for $instance_id"
  fi
  head=$(docker run --rm --network none "$image" git rev-parse HEAD </dev/null)
  if [[ -z "$base_commit" ]]; then
    echo "note: $instance_id has no base_commit yet; set it to $head in $FIXTURES/$instance_id/meta.json" >&2
  fi
  built=$((built + 1))
done <<<"$build_list"

# Shared per-repo images (SWE-smith's scheme): the clean sdist, no bug; their tasks bring it as a set-up
# patch (data/fixtures/shared_image.jsonl). Built when no instance was asked for by name.
if (($# == 0)); then
  while IFS=$'\t' read -r name image sdist pythonpath base_commit; do
    [[ -n "$name" ]] || continue
    if [[ "${FORCE:-0}" != "1" ]] && image_exists "$image"; then
      skipped=$((skipped + 1))
      continue
    fi
    ctx="$work/shared-$name"
    mkdir -p "$ctx"
    cp "$(fetch_sdist "$sdist")" "$ctx/$sdist"
    cp "$FIXTURES/Dockerfile" "$ctx/"
    : >"$ctx/bug.patch"
    printf '# no set-up step\n' >"$ctx/setup.sh"
    echo "building $image"
    log="$work/shared-$name.log"
    if ! docker build --network none --tag "$image" --label "swe-rl.fixture=1" \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "SDIST=$sdist" \
        --build-arg "INSTANCE_ID=repo.$name" --build-arg "BASE_COMMIT=$base_commit" \
        --build-arg "COMMIT_MESSAGE=Import ${sdist%.tar.gz}" --build-arg "PYTHONPATH_DIR=$pythonpath" \
        "$ctx" >"$log" 2>&1; then
      tail -n 30 "$log" >&2
      die "docker build failed for the shared image $image"
    fi
    built=$((built + 1))
  done < <("$PYTHON" "$FIXTURES/make_instances.py" --list-shared)
fi

echo "fixture images: $built built, $skipped already present"

if (($# == 0)) && [[ "${MULTILANG:-1}" != "0" ]]; then
  SWE_BASE_IMAGE="$BASE_IMAGE" bash "$ROOT/data/build_multilang_images.sh"
fi
