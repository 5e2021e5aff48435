"""`LocalEnvironment`: the `Environment` protocol over a temporary git checkout on this host.

    repo = init_repo(tmp_path / "src", {"a.py": "x = 1\\n"})      # a tiny git repository
    async with local_environment(repo) as env:                    # a fresh clone, removed on exit
        await env.exec("python -c 'import a'", timeout=10)
    result = await run_agent(instance, policy, harness, env_factory=local_env_factory(repo))

A UNIT-TEST TOOL, NOT A SANDBOX and never the default: commands run as this user on this host,
with its tools and its network; only file writes are kept inside the environment's directory.
It exists so the agent loop, the harnesses, their tools and ``apply_patch`` can be tested in
milliseconds without Docker. It follows the fleet's semantics and raises the same errors as the
fleet's client (`swe_rl.fleet.client`): a timeout is a result (return code 124, the process group
killed), output keeps its head and tail when over the cap, a missing file is `FileNotFound`, a
directory `IsADirectory`, a refused command `CommandRefused`, a call after `close` `LeaseLost`.
What it cannot copy: processes that leave the process group escape the timeout kill, and
paths are the host's (the workdir is a temporary directory, not ``/testbed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from swe_rl.agent.protocols import EnvFactory, Environment
from swe_rl.fleet.client import ExecResult, LeaseLost
from swe_rl.fleet.errors import BadRequest, CommandRefused, FileNotFound, IsADirectory
from swe_rl.fleet.output import HeadTailBuffer
from swe_rl.fleet.patch_baseline import SAFE_DIFF, SAFE_GIT_ENV
from swe_rl.tasks.instance import TaskInstance

__all__ = ["LocalEnvironment", "init_repo", "local_env_factory", "local_environment"]

TIMEOUT_RETURNCODE = 124  # as the fleet (GNU timeout's convention)
_GIT_ID = ["-c", "user.name=swe-rl", "-c", "user.email=swe-rl@localhost", "-c", "commit.gpgsign=false"]


class LocalEnvironment:
    """A git checkout at ``workdir`` inside ``root``; files may be written only under ``root``."""

    def __init__(
        self,
        root: str | Path,
        workdir: str | Path,
        *,
        max_output_bytes: int = 1 << 20,
        max_file_bytes: int = 64 << 20,
        default_timeout: float = 180.0,
        max_timeout: float = 3600.0,
        owns_root: bool = False,
    ) -> None:
        self.root = os.path.realpath(root)
        self.workdir: str = os.path.realpath(workdir)
        self.scratch_dir: str = os.path.join(self.root, ".scratch")
        """Where tools stage their writes (outside the checkout, so never in the diff)."""
        self.max_output_bytes, self.max_file_bytes = max_output_bytes, max_file_bytes
        self.default_timeout, self.max_timeout = default_timeout, max_timeout
        self.owns_root = owns_root
        self.closed = False
        self._groups: set[int] = set()

    def __repr__(self) -> str:
        return f"LocalEnvironment({self.workdir!r})"

    def _check(self, op: str) -> None:
        if self.closed:
            raise LeaseLost(f"{op}: the in-process environment {self.workdir} is closed", status=410)

    def _resolve(self, path: str) -> str:
        return os.path.normpath(path if path.startswith("/") else os.path.join(self.workdir, path))

    # ------------------------------------------------------------------ commands

    async def exec(self, command: str, timeout: float | None = None) -> ExecResult:
        """Run ``bash -c command`` in the workdir, in a new process group killed at the deadline."""
        self._check("exec")
        if not isinstance(command, str) or not command:
            raise CommandRefused("exec: missing or empty string field 'command'", status=400)
        if "\x00" in command:
            raise CommandRefused("exec: field 'command' contains a NUL byte", status=400)
        timeout = self.default_timeout if timeout is None else float(timeout)
        if not 0.1 <= timeout <= self.max_timeout:
            raise CommandRefused(f"exec: timeout must be between 0.1 and {self.max_timeout}", status=400)
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._groups.add(proc.pid)
        out = HeadTailBuffer(self.max_output_bytes)
        timed_out = False
        try:
            timed_out = await self._pump(proc, out, start + timeout)
            returncode = TIMEOUT_RETURNCODE if timed_out else await proc.wait()
            if returncode < 0:  # killed by a signal: the shell's convention, as Docker reports it
                returncode = 128 - returncode
        finally:
            if (
                proc.returncode is None
            ):  # cancelled, or the stream was abandoned: nothing may outlive the call
                _kill_group(proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    await asyncio.shield(proc.wait())
            self._prune()
        return ExecResult(
            returncode=returncode,
            output=out.getvalue().decode("utf-8", errors="replace"),
            timed_out=timed_out,
            truncated=out.truncated,
            output_bytes=out.total,
            duration=round(time.monotonic() - start, 4),
        )

    def _prune(self) -> None:
        """Forget process groups with no process left (their ids may be reused: close must not kill those)."""
        for pgid in list(self._groups):
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                self._groups.discard(pgid)
            except PermissionError:  # the id now belongs to someone else's group
                self._groups.discard(pgid)

    async def _pump(self, proc: asyncio.subprocess.Process, out: HeadTailBuffer, deadline: float) -> bool:
        """Read until EOF; at the deadline kill the group and drain what is left for a moment."""
        assert proc.stdout is not None
        timed_out, stop = False, deadline
        while True:
            remaining = stop - time.monotonic()
            try:
                chunk = await asyncio.wait_for(proc.stdout.read(65536), max(remaining, 0.001))
            except (TimeoutError, asyncio.TimeoutError):
                if timed_out:
                    return True  # something outside the group holds the pipe open: abandon it
                timed_out = True
                _kill_group(proc.pid)
                stop = time.monotonic() + 2.0
                continue
            if not chunk:
                return timed_out
            out.write(chunk)

    async def diff(self) -> str:
        """``git diff`` of the workdir against HEAD, new files included (``git add -A`` first, as the fleet),
        under the fleet's git controls (no system/global configuration, no external diff, no textconv)."""
        self._check("diff")
        git_diff = f"{SAFE_DIFF} --cached"
        cmd = SAFE_GIT_ENV + (
            f"git add -A >/dev/null && if git rev-parse -q --verify HEAD >/dev/null; "
            f"then {git_diff} HEAD; else {git_diff}; fi"
        )
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            cmd,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        stdout, stderr = await proc.communicate()
        if proc.returncode != 0:
            raise BadRequest(
                f"diff: git diff failed in {self.workdir}: "
                f"{stderr.decode('utf-8', 'replace').strip()[:2000]}",
                status=422,
            )
        return stdout.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ files

    async def read_file(self, path: str) -> bytes:
        self._check("read_file")
        full = self._resolve(path)
        if os.path.isdir(full):
            raise IsADirectory(f"read_file: {full} is a directory", status=400, body={"path": full})
        try:
            size = os.path.getsize(full)
            if size > self.max_file_bytes:
                raise BadRequest(
                    f"read_file: {full} has {size} bytes, more than the limit {self.max_file_bytes}",
                    status=413,
                )
            with open(full, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            raise FileNotFound(f"read_file: no such file: {full}", status=404, body={"path": full}) from None
        except OSError as exc:
            raise BadRequest(f"read_file: cannot read {full}: {exc.strerror}", status=422) from None

    async def write_file(self, path: str, data: str | bytes) -> None:
        """Write a file, parents created, mode 0644 (as the fleet); only under the environment's root."""
        self._check("write_file")
        full = self._resolve(path)
        real = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
        if not real.startswith(self.root + "/"):  # links followed: no way out of the root
            raise BadRequest(
                f"write_file: {full} is outside the in-process environment {self.root}", status=403
            )
        if os.path.isdir(full) and not os.path.islink(full):
            raise IsADirectory(f"write_file: path {full!r} names a directory", status=400)
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        try:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            if os.path.islink(full):  # the fleet replaces a link with the file, as tar does
                os.unlink(full)
            with open(full, "wb") as fh:
                fh.write(payload)
            os.chmod(full, 0o644)
        except OSError as exc:
            raise BadRequest(f"write_file: cannot write {full!r}: {exc.strerror}", status=422) from None

    async def close(self) -> None:
        """Kill what the commands left running and remove the directory (when this environment made it)."""
        if self.closed:
            return
        self.closed = True
        for pgid in self._groups:
            _kill_group(pgid)
        self._groups.clear()
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _git(cwd: str | Path, *args: str) -> None:
    subprocess.run(["git", *_GIT_ID, *args], cwd=cwd, check=True, capture_output=True)


def init_repo(path: str | Path, files: Mapping[str, str | bytes], *, message: str = "base") -> Path:
    """A git repository at ``path`` whose one commit holds ``files`` (relative path -> content)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    for rel, content in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "--allow-empty", "-m", message)
    return path


@contextlib.asynccontextmanager
async def local_environment(
    source: str | Path, *, base_dir: str | Path | None = None, **limits: Any
) -> AsyncIterator[LocalEnvironment]:
    """A fresh clone of the git repository ``source`` in a new temporary directory; closed and
    removed on exit, whatever the exit (limits: max_output_bytes, max_file_bytes, default_timeout)."""
    root = tempfile.mkdtemp(prefix="swe-rl-local-", dir=base_dir)
    try:
        workdir = os.path.join(root, "repo")
        await asyncio.to_thread(_git, root, "clone", "-q", "--no-hardlinks", str(source), workdir)
        env = LocalEnvironment(root, workdir, owns_root=True, **limits)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield env
    finally:
        await env.close()


def local_env_factory(source: str | Path | Callable[[TaskInstance], str | Path], **opts: Any) -> EnvFactory:
    """An `EnvFactory` for the agent: each episode gets a fresh clone of ``source`` (or of the
    repository ``source(instance)`` names)."""

    def open_env(instance: TaskInstance) -> AbstractAsyncContextManager[Environment]:
        repo = source(instance) if callable(source) else source
        return local_environment(repo, **opts)

    return open_env
