#!/usr/bin/env bash
# deb-src lines beside the machine's own deb lines (the same archives), once, so that `apt-get source`
# can fetch a source package's orig tarball: the release-anchored rows of the mined set
# (data/mined_tasks/releases.tsv, registry `debian`) are built from those. Idempotent: nothing is done
# when some deb-src line is there already. deb822 files (*.sources) are copied with `Types: deb-src`,
# one-line files (sources.list, *.list) with `deb` turned into `deb-src`; then apt-get update.
# Environment: SWE_APT_DIR (default /etc/apt; a test's own folder).
set -euo pipefail
apt_dir="${SWE_APT_DIR:-/etc/apt}"
command -v apt-get >/dev/null 2>&1 || exit 0  # not a Debian-like machine: nothing to do
if grep -rqsE '^(Types:.*deb-src|deb-src )' "$apt_dir/sources.list" "$apt_dir/sources.list.d/"; then
  exit 0
fi
sudo_cmd=""; [[ "$(id -u)" == "0" ]] || sudo_cmd="sudo"
src822="" src_lines=""
for f in "$apt_dir"/sources.list.d/*.sources; do
  if [[ -f "$f" ]]; then src822+="$(sed 's/^Types: deb$/Types: deb-src/' "$f")"$'\n\n'; fi
done
for f in "$apt_dir/sources.list" "$apt_dir"/sources.list.d/*.list; do
  if [[ -f "$f" ]]; then src_lines+="$(sed -n 's/^deb /deb-src /p' "$f")"$'\n'; fi
done
if [[ -z "${src822//[[:space:]]/}${src_lines//[[:space:]]/}" ]]; then
  echo "[setup] no deb line to add deb-src lines beside (apt-get source will not work)" >&2
  exit 0
fi
echo "[setup] deb-src lines for apt-get source"
if [[ -n "${src822//[[:space:]]/}" ]]; then
  printf '%s' "$src822" | $sudo_cmd tee "$apt_dir/sources.list.d/swe-rl-deb-src.sources" >/dev/null
fi
if [[ -n "${src_lines//[[:space:]]/}" ]]; then
  printf '%s' "$src_lines" | $sudo_cmd tee "$apt_dir/sources.list.d/swe-rl-deb-src.list" >/dev/null
fi
$sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update -qq
