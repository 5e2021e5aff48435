#!/usr/bin/env bash
# Everything a fresh Debian/Ubuntu machine needs to run swe-rl's tests and local main job:
# Debian packages (Docker, debootstrap, shellcheck), a running Docker daemon, the Python
# package with its extras, and the offline-built base and fixture images. Idempotent.
set -euo pipefail
self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/${BASH_SOURCE[0]##*/}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Written to a file or a pipe (a log), the output gets plain lines: a progress bar's carriage-return
# frames are reduced to the last one, and apt's needrestart chatter is dropped (scripts/lib/plain_lines.sh).
if [[ ! -t 1 && -z "${SWE_SETUP_PLAIN:-}" ]]; then
  # shellcheck source-path=SCRIPTDIR source=lib/plain_lines.sh
  source scripts/lib/plain_lines.sh
  set +e
  SWE_SETUP_PLAIN=1 bash "$self" "$@" 2> >(swe_plain_lines >&2) | swe_plain_lines
  rc="${PIPESTATUS[0]}"
  wait  # the stderr filter has written everything before this script ends
  exit "$rc"
fi

need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v docker-registry >/dev/null 2>&1 || need_apt+=(docker-registry)  # the loopback registry of the image tests
# the pool replicas' shared lease record (swe_rl/testing/local_postgres.py starts one per test from its binaries)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || need_apt+=(postgresql)
if ((${#need_apt[@]})); then
  echo "[setup] apt-get install ${need_apt[*]}"
  sudo_cmd=""; [[ "$(id -u)" == "0" ]] || sudo_cmd="sudo"
  # needrestart (Ubuntu) would ask, or list services to restart, after every install: not here
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1 apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1 \
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# Source packages (apt-get source): the orig tarballs of the mined set's release-anchored rows.
bash scripts/ensure_deb_src.sh
# The machine may ship only the Docker CLI without the daemon's package.
command -v dockerd >/dev/null 2>&1 || { echo "error: dockerd still missing after install" >&2; exit 1; }

bash scripts/ensure_docker.sh

bash scripts/install_package.sh  # this checkout, editable, with its extras (once per checkout)

bash scripts/build_base_image.sh
if [[ -f data/build_fixture_images.sh ]]; then
  bash data/build_fixture_images.sh
fi
echo "[setup] ready"
