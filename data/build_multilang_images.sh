#!/usr/bin/env bash
# Build the non-Python fixture task images (data/fixtures/multilang/<instance_id>/).
#
# Two layers of images, both FROM the offline base image:
#   swe-rl/toolchain-<go|node|rust>:bookworm   Debian's toolchain installed by apt (the build's only
#                                             network is Debian's mirror; cached once built)
#   swe-rl/fixture.<instance>:latest           the instance's source at /testbed as a git repository
#                                             whose single commit is the base commit; built with
#                                             --network none (no Go modules, crates or npm packages)
# Idempotent: existing images are kept (FORCE=1 rebuilds the fixture images, FORCE_TOOLCHAINS=1 the
# toolchains too).
#
# Usage: data/build_multilang_images.sh [instance_id ...]    (default: all)
#        data/build_multilang_images.sh --toolchains go node rust   (only those toolchain images;
#        data/real_tasks/build.sh builds its task images FROM them)
# Environment: SWE_BASE_IMAGE (default swe-rl/base:bookworm; built if missing), PYTHON
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE="$ROOT/data/fixtures/multilang"
TOOLCHAINS="$ROOT/data/fixtures/toolchains"
BASE_IMAGE="${SWE_BASE_IMAGE:-swe-rl/base:bookworm}"
PYTHON="${PYTHON:-python3}"

# Toolchain name -> Debian packages.
declare -A TOOLCHAIN_PACKAGES=(
  [go]="golang-go"
  [node]="nodejs"
  [rust]="rustc cargo"
)

die() { echo "error: $*" >&2; exit 1; }
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

command -v docker >/dev/null || die "docker is not installed"
if ! image_exists "$BASE_IMAGE"; then
  SWE_BASE_IMAGE="$BASE_IMAGE" bash "$ROOT/scripts/build_base_image.sh"
fi

TOOLCHAINS_ONLY=0
if [[ "${1:-}" == "--toolchains" ]]; then
  TOOLCHAINS_ONLY=1
  shift
fi
build_list=""
((TOOLCHAINS_ONLY)) ||
  build_list=$(cd "$ROOT" && "$PYTHON" -m data.fixtures.multilang.make_multilang --list)  # a module: it imports its sibling
if ((!TOOLCHAINS_ONLY && $# > 0)); then
  for wanted in "$@"; do
    cut -f1 <<<"$build_list" | grep -qxF "$wanted" || die "unknown instance $wanted"
  done
fi

work=$(mktemp -d /tmp/swe-rl-multilang.XXXXXX)
trap 'rm -rf "$work"' EXIT

toolchain_image() {  # name -> image, built when missing
  local name=$1 image="swe-rl/toolchain-$1:bookworm" packages start
  packages="${TOOLCHAIN_PACKAGES[$name]:-}"
  [[ -n "$packages" ]] || die "unknown toolchain $name"
  if [[ "${FORCE_TOOLCHAINS:-0}" == "1" ]] || ! image_exists "$image"; then
    start=$SECONDS
    echo "building $image ($packages)" >&2
    if ! docker build --tag "$image" --label "swe-rl.fixture=1" \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "PACKAGES=$packages" \
        --build-arg "LANGUAGE=$name" "$TOOLCHAINS" >"$work/toolchain-$name.log" 2>&1; then
      tail -n 30 "$work/toolchain-$name.log" >&2
      die "docker build failed for $image"
    fi
    echo "built $image in $((SECONDS - start))s" >&2
  fi
  echo "$image"
}

if ((TOOLCHAINS_ONLY)); then
  for name in "$@"; do toolchain_image "$name" >/dev/null; done
  exit 0
fi

built=0
skipped=0
while IFS=$'\t' read -r instance_id image toolchain base_commit; do
  [[ -n "$instance_id" ]] || continue
  if (($# > 0)) && ! printf '%s\n' "$@" | grep -qxF "$instance_id"; then
    continue
  fi
  if [[ "${FORCE:-0}" != "1" ]] && image_exists "$image"; then
    skipped=$((skipped + 1))
    continue
  fi
  [[ "$base_commit" == "-" ]] && base_commit=""
  base=$(toolchain_image "$toolchain")
  ctx="$work/$instance_id"
  mkdir -p "$ctx"
  cp -r "$HERE/$instance_id/source" "$ctx/source"
  cp "$HERE/Dockerfile" "$ctx/"
  cp "$TOOLCHAINS/warm-$toolchain.sh" "$ctx/warm.sh"
  echo "building $image"
  start=$SECONDS
  if ! docker build --network none --tag "$image" --label "swe-rl.fixture=1" \
      --build-arg "TOOLCHAIN_IMAGE=$base" \
      --build-arg "INSTANCE_ID=$instance_id" \
      --build-arg "BASE_COMMIT=$base_commit" \
      "$ctx" >"$work/$instance_id.log" 2>&1; then
    tail -n 30 "$work/$instance_id.log" >&2
    die "docker build failed for $instance_id"
  fi
  echo "built $image in $((SECONDS - start))s"
  if [[ -z "$base_commit" ]]; then
    head=$(docker run --rm --network none "$image" git rev-parse HEAD </dev/null)
    echo "note: $instance_id has no base_commit yet; set it to $head in $HERE/$instance_id/meta.json" >&2
  fi
  built=$((built + 1))
done <<<"$build_list"

echo "multilang fixture images: $built built, $skipped already present"
