"""No install or launch path puts a token on a command line or in a process listing.

A token in argv is readable by every user of the machine (`ps`, /proc/<pid>/cmdline) and lands in shell
history; an `ssh NODE 'VAR=token cmd'` puts it in the node's process list. So: every script and page an
operator copies from is read for the ways a token reaches argv (fast tier), and the launcher's pool
start runs for real, with TLS, while every process's command line is read (fleet tier).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from swe_rl.fleet.tls import client_context
from tests.conftest import ROOT, free_port
from tests.fleet.test_tls_fleet import start_exec
from tests.fleet.tls_certs import TestCA

SOURCES = [
    "README.md",
    ".env.swe.example",
    "docs/*.md",
    "scripts/*.sh",
    "scripts/lib/*.sh",
    "server/*.sh",
    "server/*.service",
    "eval/*.sh",
    "data/*.sh",
]

TOKEN_VAR = r"SWE_[A-Z_]*TOKEN"
TOKEN_IN_ARGV = {
    "a token flag given a value": re.compile(r"--(?:exec-|pool-)?token[ =](?!-)"),
    "curl given the bearer header as an argument": re.compile(r"curl\b[^\n]*Authorization: Bearer"),
    "`env NAME=token cmd` (env's arguments)": re.compile(rf"\benv\s(?:[^\n|;]*\s)?{TOKEN_VAR}=(?!\*\*\*)"),
    "a token inline in a remote command": re.compile(rf"\bssh\b[^\n]*\b{TOKEN_VAR}="),
    "a token typed on a command line": re.compile(
        rf"(?:^|[\s`(])(?:export\s+)?{TOKEN_VAR}=(?![\"']?\$|\*\*\*|[\"']?$)"
    ),
}
"""Each way a token reaches argv or a shell's history; assignments from another variable (`"$X"`), masked
output (`***`) and the environment files themselves (.env.swe is a file, not a command) are fine."""

WARNINGS = re.compile(r"process list|shows in process lists|history")
"""Lines that show the pattern to warn against it."""


def _sources() -> list[Path]:
    return sorted({p for pattern in SOURCES for p in ROOT.glob(pattern) if p.is_file()})


def offences(text: str, name: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if WARNINGS.search(line):
            continue
        for what, pattern in TOKEN_IN_ARGV.items():
            if name.endswith(".env.swe.example") and what == "a token typed on a command line":
                continue  # a settings file: its assignments are the environment, not a command
            if pattern.search(line):
                found.append(f"{name}:{number}: {what}: {line.strip()}")
    return found


def test_no_script_or_doc_puts_a_token_on_a_command_line():
    sources = _sources()
    assert len(sources) > 20 and any(p.name == "fleet.md" for p in sources)
    found = [
        o for path in sources for o in offences(path.read_text(errors="replace"), str(path.relative_to(ROOT)))
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "ssh root@NODE 'SWE_EXEC_TOKEN=abc bash ~/setup_docker_node.sh'",
        "SWE_POOL_EXEC_URLS=http://10.0.0.10:5000 SWE_EXEC_TOKEN=... bash eval/run_eval_swe.sh",
        "export SWE_POOL_URL=http://HEAD:18090 SWE_POOL_TOKEN=...",
        'curl -H "Authorization: Bearer $SWE_POOL_TOKEN" http://head:18090/status',
        "swe-pool-server --token abc",
        "env SWE_POOL_TOKEN=abc python3 server/pool_server.py",
        'swe_run_bg "$LOG" env SWE_POOL_HOST="$H" SWE_POOL_TOKEN="$SWE_POOL_TOKEN" "$PYTHON" pool_server.py',
    ],
)
def test_the_check_finds_each_way_a_token_reaches_argv(line):
    assert offences(line, "x.md")


@pytest.mark.parametrize(
    "line",
    [
        'if [[ -n "${SWE_EXEC_TOKEN:-}" ]]; then export SWE_POOL_TOKEN="$SWE_EXEC_TOKEN"; fi',
        "# env: SWE_EXEC_TOKEN=***   [environment]",
        "bash ~/setup_docker_node.sh --token-stdin' < ~/.swe-rl-exec-token",
        "export SWE_POOL_TOKEN_FILE=~/.swe-rl-pool-token",
    ],
)
def test_the_check_lets_what_keeps_the_token_off_argv_pass(line):
    assert not offences(line, "x.md")


def _cmdlines() -> dict[int, bytes]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                pass  # ended meanwhile
    return out


@pytest.mark.docker  # starts a fleet (an in-memory node and the pool): the fleet tier
def test_the_launchers_pool_start_puts_no_token_in_any_process_listing(tmp_path):
    """`swe_start_pool` as the head runs it, the nodes' token given as SWE_EXEC_TOKEN and the clients' as
    SWE_POOL_TOKEN, over TLS: while the pool serves, no process's command line holds either."""
    ca = TestCA(tmp_path)
    token = "launch-" + secrets.token_hex(16)
    client_token = "client-" + secrets.token_hex(16)
    exec_port, exec_proc, _ = start_exec(tmp_path, ca, token)
    pool_cert = ca.issue("pool-launch")
    stop, out = tmp_path / "stop", tmp_path / "launch.out"
    (tmp_path / "empty.env").write_text("")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SWE_")},
        "SWE_ENV_FILE": str(tmp_path / "empty.env"),
        "SWE_EXEC_TOKEN": token,
        "SWE_POOL_TOKEN": client_token,
        "SWE_POOL_EXEC_URLS": f"https://127.0.0.1:{exec_port}",
        "SWE_POOL_EXEC_CA_FILE": str(ca.path),
        "SWE_POOL_TLS_CERT": str(pool_cert.cert),
        "SWE_POOL_TLS_KEY": str(pool_cert.key),
        "SWE_CLIENT_CA_FILE": str(ca.path),
        "SWE_POOL_HEALTH_INTERVAL": "0.5",
        "LOG_DIR": str(tmp_path / "logs"),
        "POOL_PORT": str(free_port()),
        "MASTER_ADDR": "127.0.0.1",
        "RUN_NAME": "pytest-token-argv",
        "RUN_TS": secrets.token_hex(3),
        "PYTHON": sys.executable,
        "STOP": str(stop),
    }
    script = f"""
source "{ROOT}/scripts/lib/swe_rl_common.sh"
mkdir -p "$LOG_DIR"
trap swe_cleanup EXIT
swe_check_exec_servers
swe_start_pool
echo "POOL_URL=$SWE_POOL_URL POOL_PID=$(swe_last_pid)" > "{out}"
while [[ ! -e "$STOP" ]]; do sleep 0.2; done
"""
    # Every exec of the launch and its children, arguments only (the environment may hold the token):
    # a scan of /proc sees only what runs at that moment (`env NAME=token cmd` is gone once cmd runs).
    trace = tmp_path / "execs"
    strace = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=execve", "-s", "4096", "-o", str(trace)]
    under = strace if shutil.which("strace") else []
    launch = subprocess.Popen(
        [*under, "bash", "-c", script], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 180
        while not out.exists() or "POOL_PID" not in out.read_text():
            assert launch.poll() is None, (
                launch.stderr.read().decode(errors="replace") if launch.stderr else ""
            )
            assert time.monotonic() < deadline, "the launcher's pool did not start"
            time.sleep(0.2)
        fields = dict(item.split("=", 1) for item in out.read_text().split())
        assert fields["POOL_URL"].startswith("https://127.0.0.1:")  # TLS set: the launcher says https
        status = httpx.get(
            fields["POOL_URL"] + "/status",
            headers={"Authorization": f"Bearer {client_token}"},
            verify=client_context(str(ca.path)),
            timeout=60,
        )
        assert status.status_code == 200  # the tokens reached the pool (by its environment)
        listings = _cmdlines()
        assert b"pool_server.py" in listings[int(fields["POOL_PID"])]  # the scan sees the pool's own
        holders = {
            pid: cmd for pid, cmd in listings.items() if token.encode() in cmd or client_token.encode() in cmd
        }
        assert not holders, holders
        if under:
            execs = trace.read_text(errors="replace")
            assert "pool_server.py" in execs and "curl" in execs  # the trace saw the launch's processes
            leaked = [line for line in execs.splitlines() if token in line or client_token in line]
            assert not leaked, leaked
    finally:
        stop.touch()
        try:
            launch.wait(60)
        except subprocess.TimeoutExpired:
            launch.kill()
            launch.wait(10)
        exec_proc.terminate()
        exec_proc.wait(30)
