"""A real PostgreSQL on loopback for tests and benches: Debian's `postgresql` server, in a temporary directory.

Like `local_registry.LocalRegistry`: `initdb` into a fresh directory, `postgres` on a free loopback port
(and a socket in the same directory), a database made for the caller, and `stop()` ends the server and
deletes everything. PostgreSQL refuses to run as root, so when this process is root the cluster
belongs to, and the server runs as, the `postgres` user the Debian package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["LocalPostgres", "postgres_bin_dir"]


def postgres_bin_dir() -> Path | None:
    """The directory of `initdb` and `postgres` (Debian keeps them under /usr/lib/postgresql/<version>/bin),
    or None when the server is not installed."""
    override = os.environ.get("SWE_POSTGRES_BIN")
    candidates = [override] if override else sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for path in candidates:
        if (
            path
            and os.access(os.path.join(path, "initdb"), os.X_OK)
            and os.access(os.path.join(path, "postgres"), os.X_OK)
        ):
            return Path(path)
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).resolve().parent
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalPostgres:
    """`postgres` on a free loopback port with one database; `url` is its libpq URL; `stop()` removes it all."""

    def __init__(self, database: str = "swe_pool", start_timeout: float = 60.0) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise FileNotFoundError("PostgreSQL server not installed (apt-get install postgresql)")
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="swe-rl-postgres-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.user = "swe"
        self.database = database
        self.proc: subprocess.Popen[bytes] | None = None
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:  # the server will not run as root: the Debian package's own user runs it
            account = pwd.getpwnam("postgres")
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self._as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        try:
            self._run(
                "initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8", "--no-sync"
            )
            self.log = open(self.dir / "postgres.log", "ab")
            self.proc = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    str(self.dir),
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                ],  # fmt: skip
                stdout=self.log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                **self._as,
            )
            self._wait(start_timeout)
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, database)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def new_database(self, name: str) -> str:
        """Make one more (empty) database on this server; its URL."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, name)
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{name}"

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run(
            [str(self.bin / tool), *args], capture_output=True, text=True, cwd=self.dir, **self._as
        )
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed ({result.returncode}): {result.stderr[-800:]}")

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.dir / 'postgres.log').read_text()[-800:]}")
            probe = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user],
                capture_output=True,
            )
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"postgres did not accept connections within {timeout:.0f} s")

    def stop(self) -> None:
        """Stop the server (a fast shutdown: SIGINT) and delete its directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "log", None) is not None:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
