#!/usr/bin/env bash
# Install or update the swe-rl exec server on a Docker node (run as root on the node; Debian/Ubuntu).
#
# Usage: setup_docker_node.sh [--token-stdin | --token-file PATH] [--tls-cert PATH --tls-key PATH [--tls-ca PATH]] [--help]
#
# The exec server is the `swe-exec-server` console script of the swe-rl package (its fleet part; the
# `server` extra brings Flask, waitress and the Docker SDK). From the machine that holds the token
# (a file, mode 600), copy a wheel, the unit and this script, then run it; the token goes in on
# standard input, so it is on no command line and in no process listing, here or on the node:
#   pip wheel --no-deps -w dist .
#   scp dist/swe_rl-*.whl server/swe-exec-server.service server/setup_docker_node.sh root@NODE:~/
#   ssh root@NODE 'SWE_FLEET_PACKAGE=~/swe_rl-0.1.0-py3-none-any.whl SWE_EXEC_HOST=0.0.0.0 bash ~/setup_docker_node.sh --token-stdin' < exec-token
# or from a checkout of the repository on the node (the default package is that checkout).
#
# The token: --token-stdin reads one line; --token-file PATH copies a file (e.g. one sent with scp:
# remove it afterwards); SWE_EXEC_TOKEN from the environment still works (but written inline it shows in
# the node's process list: `ssh NODE 'SWE_EXEC_TOKEN=... bash ...'` shows in process lists). None given: the node's token is kept, or on a first
# install one is generated (read it with `ssh root@NODE cat /etc/swe-rl/exec-token > exec-token`).
# The token is written, mode 600, to /etc/swe-rl/exec-token, which the unit reads (SWE_EXEC_TOKEN_FILE);
# it is never an argument of a process this script starts, never printed, never in the settings file.
#
# HTTPS: --tls-cert and --tls-key (PEM files, e.g. sent with scp) are copied to /etc/swe-rl/tls/ and the
# server serves HTTPS with them (SWE_EXEC_TLS_CERT / SWE_EXEC_TLS_KEY); the pool then reaches the node
# by an https:// URL and checks it against its CA (SWE_POOL_EXEC_CA_FILE). --tls-ca names that CA for
# this script's own check of the server (on this node; without it the check trusts the system's CAs).
# Given once, they are kept by the next runs.
#
# Least privilege: the server runs as the system user swe-exec (made here), a member of the `docker`
# group, in the unit's sandbox (server/swe-exec-server.service); its token and key are readable by root
# and that user only.
#
# Settings: every SWE_EXEC_* variable given (SWE_EXEC_HOST, SWE_EXEC_PORT, SWE_EXEC_SERVER_ID,
# SWE_EXEC_MAX_CONTAINERS, ... see docs/fleet.md) goes to /etc/swe-rl/exec-server.env; a setting not
# given keeps its value from the last run (lines added there by hand too), else its default.
# SWE_FLEET_PACKAGE is anything pip installs (a wheel, a directory, a requirement); default: the
# repository root next to server/. DRY_RUN=1 prints the steps and writes nothing.
#
# What it does, each step only when needed: installs what is missing (Docker as Debian's docker.io,
# python3, python3-venv, ca-certificates: each checked on its own, without recommended extras), a venv in /opt/swe-rl/venv with the package (the
# package itself reinstalled every run, so a new wheel of the same version replaces the old), the token
# and settings, the systemd unit; then restarts the service and waits until /healthz answers and the
# token is accepted (SWE_SETUP_HEALTH_TIMEOUT seconds, 120). Running it again updates the node and
# keeps its token and settings.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="${SWE_PREFIX:-/opt/swe-rl}"
etc="${SWE_ETC:-/etc/swe-rl}"
dry_run="${DRY_RUN:-0}"
package="${SWE_FLEET_PACKAGE:-$(dirname "$here")}"
token_file="$etc/exec-token"
service_user=swe-exec  # the unit's User= and Group=
state_dir=/var/lib/swe-exec-server
tls_on=0
env_file="$etc/exec-server.env"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
run() { if [[ "$dry_run" == "1" ]]; then echo "+ $*"; else "$@"; fi; }
say() { echo "[setup_docker_node] $*"; }
die() { echo "error: $*" >&2; exit 2; }

token_from=""
token_path=""
tls_cert=""
tls_key=""
tls_ca=""
while (($#)); do
  case "$1" in
    --tls-cert | --tls-key | --tls-ca)
      [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a path"
      [[ -f "$2" && -r "$2" ]] || die "$1: cannot read $2"
      case "$1" in --tls-cert) tls_cert="$2" ;; --tls-key) tls_key="$2" ;; *) tls_ca="$2" ;; esac
      shift ;;
    --token-stdin) [[ -z "$token_from" ]] || die "give the token one way"; token_from="stdin" ;;
    --token-file)
      [[ -z "$token_from" ]] || die "give the token one way"
      [[ $# -ge 2 ]] || die "--token-file needs a path"
      token_from="file"; token_path="$2"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

# The token, read with shell builtins only (never an argument of another process), then out of the environment.
token=""
if [[ -n "${SWE_EXEC_TOKEN:-}" ]]; then
  [[ -z "$token_from" ]] || die "SWE_EXEC_TOKEN is set and $token_from gives a token too: give it one way"
  token="$SWE_EXEC_TOKEN"; token_from="env"
  echo "note: SWE_EXEC_TOKEN written inline (ssh NODE 'SWE_EXEC_TOKEN=... bash ...') shows in process lists: prefer --token-stdin" >&2
elif [[ "$token_from" == stdin ]]; then
  IFS= read -r token || [[ -n "$token" ]] || die "--token-stdin: nothing on standard input"
elif [[ "$token_from" == file ]]; then
  [[ -f "$token_path" && -r "$token_path" ]] || die "--token-file: cannot read $token_path"
  IFS= read -r token < "$token_path" || [[ -n "$token" ]] || die "--token-file: $token_path is empty"
fi
unset SWE_EXEC_TOKEN
if [[ -n "$token_from" ]]; then
  token="${token%$'\r'}"
  [[ -n "$token" ]] || die "the token given ($token_from) is empty"
  [[ "$token" != *[[:space:]]* ]] || die "the token given ($token_from) holds whitespace"
fi

[[ -z "$tls_cert$tls_key" || ( -n "$tls_cert" && -n "$tls_key" ) ]] || die "give --tls-cert and --tls-key together"
[[ "$dry_run" == "1" || "$(id -u)" == "0" ]] || die "run as root"
[[ -f "$here/swe-exec-server.service" ]] || die "swe-exec-server.service must sit next to this script"
if [[ -z "${SWE_FLEET_PACKAGE:-}" && ! -f "$package/pyproject.toml" ]]; then
  die "no repository at $package: set SWE_FLEET_PACKAGE to a swe-rl wheel or checkout"
fi
[[ "$dry_run" == "1" ]] || command -v systemctl >/dev/null 2>&1 || die "no systemd on this node (the exec server runs as a systemd service)"

# Settings (checked before anything is installed): defaults < the last run's file < SWE_EXEC_* given now.
# The token is only ever in its own file.
declare -A setting=(
  [SWE_EXEC_HOST]=127.0.0.1 [SWE_EXEC_PORT]=5000 [SWE_EXEC_SERVER_ID]="$HOSTNAME"
  [SWE_EXEC_MAX_CONTAINERS]=32 [SWE_EXEC_MEMORY]=4g [SWE_EXEC_CPUS]=2 [SWE_EXEC_PIDS_LIMIT]=1024
)
if [[ -f "$env_file" ]]; then
  while IFS= read -r line || [[ -n "$line" ]]; do
    [[ "$line" =~ ^[[:space:]]*([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]] || continue
    key="${BASH_REMATCH[1]}"
    if [[ "$key" == SWE_EXEC_TOKEN ]]; then
      say "dropping SWE_EXEC_TOKEN from $env_file (it would override the token file)"
      continue
    fi
    setting[$key]="${BASH_REMATCH[2]}"
  done < "$env_file"
fi
for key in $(compgen -e); do
  [[ "$key" == SWE_EXEC_* && "$key" != SWE_EXEC_TOKEN* ]] || continue
  [[ "${!key}" != *$'\n'* ]] || die "$key holds a newline"
  setting[$key]="${!key}"
done
setting[SWE_EXEC_TOKEN_FILE]="$token_file"
if [[ -n "$tls_cert" ]]; then
  setting[SWE_EXEC_TLS_CERT]="$etc/tls/exec.crt"
  setting[SWE_EXEC_TLS_KEY]="$etc/tls/exec.key"
fi
[[ -z "${setting[SWE_EXEC_TLS_CERT]:-}" ]] || tls_on=1
host="${setting[SWE_EXEC_HOST]}"
port="${setting[SWE_EXEC_PORT]}"

# What is missing, each checked on its own (a node that runs Docker may still lack python3-venv).
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
[[ -s /etc/ssl/certs/ca-certificates.crt ]] || need+=(ca-certificates)  # Docker's pulls over TLS
if ((${#need[@]})); then
  command -v apt-get >/dev/null 2>&1 || die "missing ${need[*]} and no apt-get to install them: install them, then run this again"
  say "installing ${need[*]}"
  run apt-get update -qq
  run env DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1 apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
run systemctl enable --now docker
# The service user: a system account in the docker group (the socket's group), with no login and no home
# of its own beyond its state directory.
if [[ "$dry_run" == "1" ]] || getent group docker >/dev/null; then :; else
  die "no 'docker' group on this node: the exec server reaches the Docker socket through it (is dockerd installed from a package?)"
fi
if ! id -u "$service_user" >/dev/null 2>&1; then
  say "adding the system user $service_user"
  run useradd --system --user-group --home-dir "$state_dir" --no-create-home --shell /usr/sbin/nologin "$service_user"
fi
# Its state kept by an earlier install that ran as root (claimed warm containers, snapshots), moved once.
for old in exec-state snapshots; do
  if [[ -d "/root/.cache/swe-rl/$old" && ! -e "$state_dir/$old" ]]; then
    say "moving /root/.cache/swe-rl/$old to $state_dir/$old"
    run mkdir -p "$state_dir"
    run mv "/root/.cache/swe-rl/$old" "$state_dir/$old"
    run chown -R "$service_user:$service_user" "$state_dir"
  fi
done

say "python venv in $prefix/venv"
run mkdir -p "$prefix"
if ! "$prefix/venv/bin/python" -c '' >/dev/null 2>&1; then
  run python3 -m venv --clear "$prefix/venv"  # new, or broken (e.g. the system python was upgraded)
fi
say "installing ${package}[server]"
run "$prefix/venv/bin/pip" install -q --upgrade "${package}[server]"
# A wheel of the same version counts as installed for pip: the package itself is always replaced.
run "$prefix/venv/bin/pip" install -q --no-deps --force-reinstall "$package"

if [[ "$dry_run" != "1" ]]; then
  mkdir -p "$etc"
  chmod 0755 "$etc"
fi
if [[ -n "$token_from" ]]; then
  if [[ -s "$token_file" && "$(<"$token_file")" == "$token" ]]; then
    say "token unchanged ($token_file)"
  else
    say "token from $token_from written to $token_file"
    # printf is a builtin: the token reaches the file without being an argument of any process.
    [[ "$dry_run" == "1" ]] || { (umask 077 && printf '%s\n' "$token" > "$token_file.new") && mv -f "$token_file.new" "$token_file"; }
  fi
elif [[ -s "$token_file" ]]; then
  say "keeping the token in $token_file"
else
  say "no token given: generating one in $token_file (read it with: cat $token_file)"
  [[ "$dry_run" == "1" ]] || { (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' > "$token_file.new") && mv -f "$token_file.new" "$token_file"; }
fi
token=""
# Root writes it, the service's group reads it.
[[ "$dry_run" == "1" ]] || { chown "root:$service_user" "$token_file" && chmod 0640 "$token_file"; }

if [[ -n "$tls_cert" ]]; then
  say "TLS certificate and key to $etc/tls"
  run install -d -m 0755 "$etc/tls"
  run install -m 0644 "$tls_cert" "$etc/tls/exec.crt"
  run install -m 0640 -o root -g "$service_user" "$tls_key" "$etc/tls/exec.key"
fi

say "writing $env_file"
if [[ "$dry_run" == "1" ]]; then
  for key in $(printf '%s\n' "${!setting[@]}" | sort); do echo "+   $key=${setting[$key]}"; done
else
  {
    echo "# swe-rl exec server settings, written by setup_docker_node.sh (kept by its next run)."
    for key in $(printf '%s\n' "${!setting[@]}" | sort); do printf '%s=%s\n' "$key" "${setting[$key]}"; done
  } | (umask 077 && cat > "$env_file.new")
  mv -f "$env_file.new" "$env_file"
fi

run install -m 0644 "$here/swe-exec-server.service" /etc/systemd/system/swe-exec-server.service
run systemctl daemon-reload
run systemctl enable swe-exec-server
run systemctl restart swe-exec-server
[[ "$dry_run" != "1" ]] || exit 0

check_host="$host"
[[ "$check_host" != "0.0.0.0" ]] || check_host=127.0.0.1
[[ "$check_host" != "::" ]] || check_host=::1
[[ "$check_host" != *:* ]] || check_host="[$check_host]"
scheme=http
[[ "$tls_on" != 1 ]] || scheme=https
url="$scheme://$check_host:$port"
say "waiting for $url/healthz"
deadline=$((SECONDS + ${SWE_SETUP_HEALTH_TIMEOUT:-120}))
while ((SECONDS < deadline)); do
  # /healthz, then a call that needs the token (read from its file here, never passed as an argument).
  # Over TLS the chain is checked against --tls-ca (else the system's CAs); not the name: this check
  # reaches the server on this node by loopback, which the certificate names for others need not name.
  if out=$(python3 - "$url" "$token_file" "$tls_ca" <<'PY' 2>&1
import json, ssl, sys, urllib.error, urllib.request
url, token_file, ca = sys.argv[1], sys.argv[2], sys.argv[3]
tls = ssl.create_default_context(cafile=ca or None)
tls.check_hostname = False
try:
    with urllib.request.urlopen(f"{url}/healthz", timeout=5, context=tls) as r:
        body = json.load(r)
    if not body.get("ok"):
        sys.exit(f"not healthy: {json.dumps(body)}")
    with open(token_file, encoding="utf-8") as fh:
        auth = {"Authorization": f"Bearer {fh.read().strip()}"}
    urllib.request.urlopen(urllib.request.Request(f"{url}/status", headers=auth), timeout=5, context=tls).close()
except urllib.error.HTTPError as exc:
    sys.exit("the token is refused (401)" if exc.code == 401 else f"HTTP {exc.code} from {exc.url}")
except (OSError, ValueError) as exc:
    sys.exit(f"{type(exc).__name__}: {exc}")
print(json.dumps({k: body.get(k) for k in ("server_id", "version", "capacity", "running_containers")}))
PY
  ); then
    say "healthy, token accepted: $out"
    exit 0
  fi
  sleep 1
done
echo "error: exec server not healthy at $url: ${out:-no answer}" >&2
journalctl -u swe-exec-server -n 30 --no-pager >&2 || true
echo "see: journalctl -u swe-exec-server" >&2
exit 1
