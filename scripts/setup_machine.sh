#!/usr/bin/env bash
# Everything a fresh Debian/Ubuntu machine needs to run swe-rl's tests and local main job:
# Debian packages (Docker, debootstrap, shellcheck), a running Docker daemon, the Python
# package with its extras, and the offline-built base and fixture images. Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v docker-registry >/dev/null 2>&1 || need_apt+=(docker-registry)  # the loopback registry of the image tests
if ((${#need_apt[@]})); then
  echo "[setup] apt-get install ${need_apt[*]}"
  sudo_cmd=""; [[ "$(id -u)" == "0" ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# The machine may ship only the Docker CLI without the daemon's package.
command -v dockerd >/dev/null 2>&1 || { echo "error: dockerd still missing after install" >&2; exit 1; }

bash scripts/ensure_docker.sh

bash scripts/install_package.sh  # this checkout, editable, with its extras (once per checkout)

bash scripts/build_base_image.sh
if [[ -f data/build_fixture_images.sh ]]; then
  bash data/build_fixture_images.sh
fi
echo "[setup] ready"
