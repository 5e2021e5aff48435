#!/usr/bin/env bash
# One-time set-up of a Docker node for the swe-rl fleet (run as root on the node).
#
#   scp server/exec_server.py server/request_checks.py server/swe-exec-server.service server/setup_docker_node.sh root@NODE:~/
#   ssh root@NODE 'SWE_EXEC_HOST=0.0.0.0 SWE_EXEC_TOKEN=... bash ~/setup_docker_node.sh'
#
# Installs Docker (Debian/Ubuntu docker.io) when missing, a Python venv with the
# exec server's three dependencies, the token file, the systemd service, and
# checks /healthz. Safe to run again: it updates the files and restarts.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="${SWE_PREFIX:-/opt/swe-rl}"
etc="${SWE_ETC:-/etc/swe-rl}"
host="${SWE_EXEC_HOST:-127.0.0.1}"
port="${SWE_EXEC_PORT:-5000}"
max_containers="${SWE_EXEC_MAX_CONTAINERS:-32}"
server_id="${SWE_EXEC_SERVER_ID:-$(hostname)}"
dry_run="${DRY_RUN:-0}"

run() { if [[ "$dry_run" == "1" ]]; then echo "+ $*"; else "$@"; fi; }
say() { echo "[setup_docker_node] $*"; }

[[ "$dry_run" == "1" || "$(id -u)" == "0" ]] || { echo "error: run as root" >&2; exit 2; }
for f in exec_server.py request_checks.py; do
  [[ -f "$here/$f" ]] || { echo "error: $f must sit next to this script" >&2; exit 2; }
done

if ! command -v dockerd >/dev/null 2>&1; then
  say "installing Docker"
  run apt-get update -qq
  run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io python3-venv
fi
if command -v systemctl >/dev/null 2>&1; then
  run systemctl enable --now docker
fi

say "python venv in $prefix/venv"
run mkdir -p "$prefix" "$etc"
if [[ ! -x "$prefix/venv/bin/python" ]]; then
  run python3 -m venv "$prefix/venv"
fi
run "$prefix/venv/bin/pip" install -q --upgrade "flask>=3.0" "waitress>=3.0" "docker>=7.0"
run install -m 0755 "$here/exec_server.py" "$prefix/exec_server.py"
run install -m 0644 "$here/request_checks.py" "$prefix/request_checks.py"

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
