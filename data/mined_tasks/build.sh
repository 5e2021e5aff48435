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
# Each line of releases.tsv is the same for a release-anchored row: its repository is a two-commit
# history (release_tree.py) of the release's tarball (a PyPI sdist with pip download, a Debian orig
# tarball with apt-get source; checked against the pinned sha256, a mismatch is an error) and the
# upstream commit after it. Building needs only the release: the task
# commit is made again from the row's patches. Mining needs the upstream history too (the mirror).
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
  cut -f1 "$HERE/sources.tsv" "$HERE/releases.tsv" | grep -qxF "$name" ||
    die "$name is not a name of $HERE/sources.tsv or $HERE/releases.tsv"
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
  read -r -a args <<<"${extra:-}"  # the arguments column is words
  for i in "${!args[@]}"; do [[ "${args[i]}" == recipes/* ]] && args[i]="$HERE/${args[i]}"; done
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

tarball() {  # registry package==version sha256 -> the release's tarball (cached), its sha256 checked
  local registry=$1 release=$2 pin=$3 package=${2%%==*} version=${2##*==} glob found sum tmp
  mkdir -p "$CACHE/downloads"
  case "$registry" in
    pypi) glob="${package//-/[-_]}-$version.tar.gz" ;;
    debian) glob="${package}_${version%-*}.orig.tar.*" ;;  # the upstream version: no Debian revision
    *) die "$release: unknown registry $registry (pypi, debian)" ;;
  esac
  found=$(find "$CACHE/downloads" -maxdepth 1 -iname "$glob" | head -n 1)
  if [[ -z "$found" ]]; then
    case "$registry" in
      pypi) "$PYTHON" -m pip download -q --no-deps --no-binary :all: --dest "$CACHE/downloads" "$release" >&2 ||
              die "cannot download the sdist of $release (pip download)" ;;
      debian) tmp=$(mktemp -d /tmp/swe-rl-mined-src.XXXXXX)
              # Only the orig tarball is needed: a missing Debian part (a component, the debian/ tarball)
              # makes apt-get fail, and is no matter.
              (cd "$tmp" && apt-get source --download-only -q "$package=$version" >/dev/null 2>&1) || true
              find "$tmp" -maxdepth 1 -name "$glob" -exec mv {} "$CACHE/downloads/" \;
              rm -rf "$tmp"
              [[ -n "$(find "$CACHE/downloads" -maxdepth 1 -iname "$glob")" ]] ||
                die "cannot download the source package $package=$version (apt-get source: are deb-src lines set? scripts/ensure_deb_src.sh sets them)" ;;
    esac
    found=$(find "$CACHE/downloads" -maxdepth 1 -iname "$glob" | head -n 1)
  fi
  [[ -n "$found" ]] || die "the download of $release gave no tarball named $glob"
  sum=$(sha256sum "$found" | cut -d' ' -f1)
  [[ "$sum" == "$pin" ]] || die "the tarball of $release ($found) has sha256 $sum; releases.tsv pins $pin"
  echo "$found"
}

releases=()
# One build of the releases at a time (the test tier's workers may run this at once): the histories and
# downloads under $CACHE are shared.
mkdir -p "$CACHE"
exec 9>"$CACHE/.releases.lock"
flock 9
while IFS=$'\t' read -r -u 3 name repo registry release pin commit extra; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if ((${#ONLY[@]})) && ! printf '%s\n' "${ONLY[@]}" | grep -qxF "$name"; then continue; fi
  read -r -a args <<<"${extra:-}"  # the arguments column is words
  for i in "${!args[@]}"; do [[ "${args[i]}" == recipes/* ]] && args[i]="$HERE/${args[i]}"; done
  language=python
  for i in "${!args[@]}"; do [[ "${args[i]}" == --language ]] && language=${args[i+1]}; done
  dir="$CACHE/releases/$name"
  if ((MINE)); then
    [[ -d "$MIRRORS/${repo//\//+}/repo" ]] || die "$name: mining needs the upstream history at $MIRRORS/${repo//\//+}/repo"
    rm -rf "$dir"
    "$PYTHON" "$HERE/release_tree.py" --repo "$dir" --tarball "$(tarball "$registry" "$release" "$pin")" --release "$release" \
      --language "$language" --commit "$commit" --upstream "$MIRRORS/${repo//\//+}/repo"
    out="$CACHE/mined/$name/tasks.jsonl"
    rm -rf "$(dirname "$out")"
    "$PYTHON" -m swe_rl.eval.mining.cli "$dir" --range main~1..main --repo-name "$repo" --output "$out" \
      --local-fleet --runs 2 --jobs "$JOBS" --certify-concurrency 2 --no-progress \
      --name-prefix "swe-rl-mine-${name//[@+.=]/-}" ${args[@]:+"${args[@]}"}
    mined+=("$name")
    releases+=(--release "$name=$release")
  else
    [[ -f "$ROWS" ]] || die "$ROWS is missing (the set's rows: run with --mine first)"
    grep -qF "\"release\": \"$release\"" "$ROWS" || continue  # no row of this release to build
    rm -rf "$dir"
    "$PYTHON" "$HERE/release_tree.py" --repo "$dir" --tarball "$(tarball "$registry" "$release" "$pin")" --release "$release" \
      --language "$language" --commit "$commit" --rows "$ROWS"
    "$PYTHON" -m swe_rl.eval.mining.cli "$dir" --repo-name "$repo" --images-for "$ROWS" \
      --output "$CACHE/unused.jsonl" ${args[@]:+"${args[@]}"}
  fi
done 3<"$HERE/releases.tsv"

if ((MINE)) && ((${#mined[@]})); then
  "$PYTHON" "$HERE/collect.py" --set "$HERE" --mined "$CACHE/mined" ${releases[@]:+"${releases[@]}"} "${mined[@]}"
fi
