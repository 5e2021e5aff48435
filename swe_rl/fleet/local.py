"""A whole fleet on this machine: exec servers and a pool server on loopback.

Used by the main job (`eval/` on the bundled tasks), the benchmarks, and anyone
who wants to try the fleet without Docker nodes. Every process it starts and
every container they create is gone when the context exits, also on errors.

    with LocalFleet(exec_servers=1) as fleet:
        os.environ.update(fleet.client_env())   # SWE_POOL_URL, SWE_POOL_TOKEN
        ...

Run as `swe-local-fleet` (or `python -m swe_rl.fleet.local`) it starts the fleet, prints
the environment to use, and stays up until interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_rl.fleet.local_networks import allowed_networks, make_networks, new_user, remove_networks
from swe_rl.fleet.protocol import LABEL_MANAGED, LABEL_SERVER, MANAGED_VALUE

EXEC_SERVER_ARGS = ["-m", "swe_rl.fleet.exec.app"]
"""How `python` starts an exec server."""
POOL_SERVER_ARGS = ["-m", "swe_rl.fleet.pool.app"]
"""How `python` starts the pool server (from the repository until the pool joins the fleet package)."""
SERVER_MODULES = (
    "flask",
    "waitress",
    "docker",
    "starlette",
    "uvicorn",
    "uvloop",
    "httptools",
    "cryptography",
)
"""What the exec and pool servers import beyond the base install: the `server` extra (the `eval` extra
pulls it in). uvicorn runs the pool on uvloop and httptools when they import."""


def missing_server_modules() -> list[str]:
    return [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]


class MissingServerExtra(RuntimeError):
    """The exec and pool servers cannot start here: a module of the `server` extra is not installed."""


def check_server_modules() -> None:
    """A clear error naming the extra, before any server starts, when its modules are missing."""
    missing = missing_server_modules()
    if missing:
        raise MissingServerExtra(
            f"a local fleet runs the exec and pool servers, which need the `server` extra "
            f"(missing: {', '.join(missing)}): pip install 'swe-rl[server]' (the `eval` extra includes it)"
        )


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_PRCTL: Callable[..., int] | None
try:  # loaded in the parent: the child, just forked, only makes the call (no import, no lock)
    import ctypes

    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def die_with_parent() -> None:
    """Child-side: get SIGTERM when the process that started us dies, even by SIGKILL (Linux).

    The servers run in their own session (so a Ctrl-C reaches only the parent, which stops
    them in order); this keeps a killed parent from leaving them running.
    """
    if _PRCTL is not None:
        _PRCTL(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


def killed_with_parent() -> None:
    """Child-side: get SIGKILL when the process that started us dies (Linux).

    Linux sends it when the *thread* that forked the child ends: start such children from a thread that
    lives as long as they should (the main thread).

    For servers with nothing to clean up when their parent is gone (the simulated fleet: no containers):
    a pool told to stop gracefully would first try to release every lease on nodes that died with the
    same parent, which under load kept an orphaned pool busy for minutes.
    """
    if _PRCTL is not None:
        _PRCTL(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(
    url: str, proc: subprocess.Popen, timeout: float = 60.0, log: Path | None = None, poll: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_tail(log) if log is not None else ""
            raise RuntimeError(
                f"{url}: server exited with code {proc.returncode} before becoming healthy"
                + (f"; last lines of {log}:\n{tail}" if tail else "")
            )
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(poll)
    raise TimeoutError(f"{url} not healthy after {timeout}s")


@dataclass
class LocalFleet:
    """Starts `exec_servers` exec servers and one pool server as subprocesses on 127.0.0.1."""

    exec_servers: int = 1
    max_containers_per_node: int = 16
    lease_ttl: float = 600.0
    exec_env: dict[str, str] = field(default_factory=dict)
    pool_env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    python: str = sys.executable
    networks: Sequence[str] = ()
    """Named Docker networks containers may ask for (e.g. what instance rows name): allowed on the exec
    servers; one Docker lacks is created internal (no egress) and removed at stop (`local_networks.py`)."""

    token: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)
    """The pool's client token (what `client_env` hands out)."""
    exec_token: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)
    """The exec servers' token: the pool's alone, never a client's."""
    operator_token: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)
    """The pool's operator token (`/status` lists the leases to it only)."""
    pool_url: str = ""
    exec_urls: list[str] = field(default_factory=list)
    server_ids: list[str] = field(default_factory=list)
    _procs: list[subprocess.Popen] = field(default_factory=list, repr=False)
    _tmp: Any = field(default=None, repr=False)
    _owned_networks: list[str] = field(default_factory=list, repr=False)
    _network_user: str = field(default_factory=new_user, repr=False)
    """This fleet's name in the shared networks' users files (`local_networks`)."""

    def client_env(self) -> dict[str, str]:
        return {"SWE_POOL_URL": self.pool_url, "SWE_POOL_TOKEN": self.token}

    def __enter__(self) -> LocalFleet:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _spawn(self, args: list[str], env: dict[str, str], log_name: str) -> subprocess.Popen:
        assert self.log_dir is not None
        log = open(self.log_dir / log_name, "ab")
        proc = subprocess.Popen(
            [self.python, *args],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._procs.append(proc)
        return proc

    def start(self) -> None:
        if self.python == sys.executable:
            check_server_modules()
        if self.networks:
            self._owned_networks = self._docker(make_networks, self.networks, self._network_user)
        if self.log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="swe-rl-fleet-")
            self.log_dir = Path(self._tmp.name)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        run_id = secrets.token_hex(3)
        pending = []
        for i in range(self.exec_servers):
            port = free_port()
            server_id = f"local-{run_id}-{i}"
            env = {
                "SWE_EXEC_TOKEN": self.exec_token,
                "SWE_EXEC_SERVER_ID": server_id,
                "SWE_EXEC_HOST": "127.0.0.1",
                "SWE_EXEC_PORT": str(port),
                "SWE_EXEC_MAX_CONTAINERS": str(self.max_containers_per_node),
                # this fleet's node state (the pool keys it trusts, claimed warm containers) is its own:
                # in the machine's default directory every local fleet's new pool key piled up for good
                "SWE_EXEC_STATE_DIR": str(self.log_dir / f"exec-state-{i}"),
                **self.exec_env,
            }
            if self.networks:
                env["SWE_EXEC_NETWORKS"] = allowed_networks(
                    os.environ.get("SWE_EXEC_NETWORKS"), env.get("SWE_EXEC_NETWORKS"), self.networks
                )
            proc = self._spawn(EXEC_SERVER_ARGS, env, f"exec-{i}.log")
            url = f"http://127.0.0.1:{port}"
            self.exec_urls.append(url)
            self.server_ids.append(server_id)
            pending.append((url, proc))
        for i, (url, proc) in enumerate(pending):
            wait_healthy(url, proc, log=self.log_dir / f"exec-{i}.log")
        port = free_port()
        env = {
            "SWE_POOL_EXEC_URLS": ",".join(self.exec_urls),
            "SWE_EXEC_TOKEN": self.exec_token,
            "SWE_POOL_TOKEN": self.token,
            "SWE_POOL_OPERATOR_TOKEN": self.operator_token,
            "SWE_POOL_HOST": "127.0.0.1",
            "SWE_POOL_PORT": str(port),
            "SWE_POOL_ID": f"local-pool-{run_id}",
            "SWE_POOL_DB": str(self.log_dir / "leases.db"),
            "SWE_POOL_MAX_PER_NODE": str(self.max_containers_per_node),
            "SWE_POOL_LEASE_TTL": str(self.lease_ttl),
            **self.pool_env,
        }
        proc = self._spawn(POOL_SERVER_ARGS, env, "pool.log")
        self.pool_url = f"http://127.0.0.1:{port}"
        wait_healthy(self.pool_url, proc, log=self.log_dir / "pool.log")

    def stop(self) -> None:
        """Pool first (its graceful shutdown releases every lease), then the exec servers, then a sweep."""
        for proc in reversed(self._procs):  # the pool was started last
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self._procs.clear()
        self._sweep()
        if self._owned_networks:
            kept = self._docker(remove_networks, self._owned_networks, self._network_user)
            if kept:
                print(
                    f"local fleet: networks still in use by others, kept: {', '.join(kept)}", file=sys.stderr
                )
            self._owned_networks = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @staticmethod
    def _docker(call: Callable[..., Any], *args: Any) -> Any:
        import docker

        client = docker.from_env()
        try:
            return call(client, *args)
        finally:
            client.close()

    def _sweep(self) -> None:
        """Remove any container our exec servers labelled (belt and braces after a crash)."""
        if not self.server_ids:
            return
        try:
            import docker
        except ImportError:
            return
        client = docker.from_env()
        try:
            for c in client.containers.list(
                all=True, filters={"label": f"{LABEL_MANAGED}={MANAGED_VALUE}"}, ignore_removed=True
            ):
                if (c.labels or {}).get(LABEL_SERVER) in self.server_ids:
                    try:
                        c.remove(force=True)
                    except docker.errors.APIError:
                        pass
        finally:
            client.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Run a local swe-rl fleet (exec servers + pool) on loopback")
    p.add_argument("--exec-servers", type=int, default=1)
    p.add_argument("--max-containers-per-node", type=int, default=16)
    p.add_argument("--log-dir", type=Path, default=None)
    p.add_argument(
        "--network",
        action="append",
        default=[],
        metavar="NAME",
        help="a named Docker network containers may ask for (repeatable); created internal when missing, "
        "removed at exit",
    )
    a = p.parse_args(argv)
    with LocalFleet(
        exec_servers=a.exec_servers,
        max_containers_per_node=a.max_containers_per_node,
        log_dir=a.log_dir,
        networks=a.network,
    ) as fleet:
        for k, v in fleet.client_env().items():
            print(f"export {k}={v}")
        print(
            f"# exec servers: {' '.join(fleet.exec_urls)}; logs in {fleet.log_dir}; Ctrl-C stops everything",
            flush=True,
        )
        stop = False

        def _stop(*_: Any) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        while not stop:
            time.sleep(0.5)


if __name__ == "__main__":
    main()
