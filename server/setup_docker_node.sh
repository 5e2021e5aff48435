#!/usr/bin/env bash
# One-time set-up of a Docker node for the swe-rl fleet (run as root on the node).
#
# The exec server is the `swe-exec-server` console script of the swe-rl package (its fleet
# part; the `server` extra brings Flask, waitress and the Docker SDK). Either copy a wheel:
#   pip wheel --no-deps -w dist .
#   scp dist/swe_rl-*.whl server/swe-exec-server.service server/setup_docker_node.sh root@NODE:~/
#   ssh root@NODE 'SWE_FLEET_PACKAGE=~/swe_rl-0.1.0-py3-none-any.whl SWE_EXEC_HOST=0.0.0.0 SWE_EXEC_TOKEN=... bash ~/setup_docker_node.sh'
# or run it from a checkout of the repository on the node (the default installs that checkout):
#   SWE_EXEC_HOST=0.0.0.0 SWE_EXEC_TOKEN=... bash server/setup_docker_node.sh
#
# SWE_FLEET_PACKAGE is anything pip installs (a wheel, a directory, a requirement); default: the
# repository root next to server/. Installs Docker (Debian/Ubuntu docker.io) when missing, a
# Python venv with the package, the token file, the systemd service, and checks /healthz.
# Safe to run again: it updates the package and restarts.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="${SWE_PREFIX:-/opt/swe-rl}"
etc="${SWE_ETC:-/etc/swe-rl}"
host="${SWE_EXEC_HOST:-127.0.0.1}"
port="${SWE_EXEC_PORT:-5000}"
max_containers="${SWE_EXEC_MAX_CONTAINERS:-32}"
server_id="${SWE_EXEC_SERVER_ID:-$(hostname)}"
dry_run="${DRY_RUN:-0}"
package="${SWE_FLEET_PACKAGE:-$(dirname "$here")}"

run() { if [[ "$dry_run" == "1" ]]; then echo "+ $*"; else "$@"; fi; }
say() { echo "[setup_docker_node] $*"; }

[[ "$dry_run" == "1" || "$(id -u)" == "0" ]] || { echo "error: run as root" >&2; exit 2; }
[[ -f "$here/swe-exec-server.service" ]] || { echo "error: swe-exec-server.service must sit next to this script" >&2; exit 2; }
if [[ -z "${SWE_FLEET_PACKAGE:-}" && ! -f "$package/pyproject.toml" ]]; then
  echo "error: no repository at $package: set SWE_FLEET_PACKAGE to a swe-rl wheel or checkout" >&2
  exit 2
fi

if ! command -v dockerd >/dev/null 2>&1; then
  say "installing Docker"
  run apt-get update -qq
  run env DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1 apt-get install -y -qq docker.io python3-venv
fi
if command -v systemctl >/dev/null 2>&1; then
  run systemctl enable --now docker
fi

say "python venv in $prefix/venv"
run mkdir -p "$prefix" "$etc"
if [[ ! -x "$prefix/venv/bin/python" ]]; then
  run python3 -m venv "$prefix/venv"
fi
say "installing ${package}[server]"
run "$prefix/venv/bin/pip" install -q --upgrade "${package}[server]"

token_file="$etc/exec-token"
if [[ -n "${SWE_EXEC_TOKEN:-}" ]]; then
  [[ "$dry_run" == "1" ]] || { umask 077; printf '%s\n' "$SWE_EXEC_TOKEN" > "$token_file"; }
elif [[ ! -s "$token_file" ]]; then
  say "no SWE_EXEC_TOKEN given: generating one in $token_file (give the same token to the pool server)"
  [[ "$dry_run" == "1" ]] || { umask 077; python3 -c 'import secrets; print(secrets.token_hex(32))' > "$token_file"; }
fi

env_file="$etc/exec-server.env"
say "writing $env_file"
if [[ "$dry_run" != "1" ]]; then
  umask 077
  cat > "$env_file" <<ENV
SWE_EXEC_HOST=$host
SWE_EXEC_PORT=$port
SWE_EXEC_TOKEN_FILE=$token_file
SWE_EXEC_SERVER_ID=$server_id
SWE_EXEC_MAX_CONTAINERS=$max_containers
SWE_EXEC_MEMORY=${SWE_EXEC_MEMORY:-4g}
SWE_EXEC_CPUS=${SWE_EXEC_CPUS:-2}
SWE_EXEC_PIDS_LIMIT=${SWE_EXEC_PIDS_LIMIT:-1024}
SWE_EXEC_NETWORKS=${SWE_EXEC_NETWORKS:-}
ENV
fi

run install -m 0644 "$here/swe-exec-server.service" /etc/systemd/system/swe-exec-server.service
if command -v systemctl >/dev/null 2>&1; then
  run systemctl daemon-reload
  run systemctl enable swe-exec-server
  run systemctl restart swe-exec-server
fi

if [[ "$dry_run" != "1" ]]; then
  say "waiting for http://127.0.0.1:$port/healthz"
  check_host="$host"; [[ "$check_host" == "0.0.0.0" ]] && check_host=127.0.0.1
  for _ in $(seq 1 30); do
    if out=$(python3 - "$check_host" "$port" <<'PY' 2>/dev/null
import json, sys, urllib.request
with urllib.request.urlopen(f"http://{sys.argv[1]}:{sys.argv[2]}/healthz", timeout=3) as r:
    body = json.load(r)
print(json.dumps(body))
sys.exit(0 if body.get("ok") else 1)
PY
    ); then
      say "healthy: $out"
      exit 0
    fi
    sleep 1
  done
  echo "error: exec server not healthy; see: journalctl -u swe-exec-server -n 50" >&2
  exit 1
fi
