"""What a lease does with its container: run commands, take the patch, move files, evaluate a patch.

Each operation takes a checked request of `swe_rl.fleet.protocol` and answers its JSON object.
The container is marked busy for the reaper while the call runs; a container that died or was
removed answers 410 (409 when it stopped), never a stack trace.
"""

from __future__ import annotations

import base64
import io
import os
import tarfile
import time
from typing import Any

from swe_rl.fleet import patch_baseline
from swe_rl.fleet.exec.backend import BackendError, Conflict, NodeBackend, NotFound, Refused
from swe_rl.fleet.exec.command_flow import Command, Flow, run_flow
from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.containers import ContainerRecord, Containers, Registry
from swe_rl.fleet.exec.executor import CommandOutcome, decode_text
from swe_rl.fleet.protocol import (
    ApiError,
    DiffRequest,
    EvaluateRequest,
    ExecRequest,
    ReadFileRequest,
    WriteFileRequest,
)

KILLED_OR_LOST = (137, -1)
"""Exit statuses a container's death also gives its running commands (SIGKILL; no exit code at all)."""
_ENOSPC = b"No space left on device"
"""strerror(ENOSPC), as every tool prints it: the trigger of the disk check, never the verdict."""
DISK_FULL_KIB = 64 << 10
"""Free KiB under which a container's disk counts as full (its node's disk is shared by everything)."""
SCRATCH = "/tmp/.swe-rl"  # server-side files inside the container (never under the workdir)
MAX_SYMLINKS = 40  # as the kernel's own limit when resolving a path

# Tried in order, as the SWE-bench harness does; each is all-or-nothing, so a
# failed attempt leaves the checkout untouched for the next one. `git apply
# --reject` is deliberately absent: a partly applied patch must not be graded.
APPLY_STRATEGIES = [
    ("git apply", "git apply --verbose {p}"),
    ("git apply --ignore-whitespace", "git apply --verbose --ignore-space-change --ignore-whitespace {p}"),
    (
        "patch --fuzz=5",
        "patch --batch --fuzz=5 -p1 --dry-run -i {p} >/dev/null && patch --batch --fuzz=5 -p1 -i {p}",
    ),
]


class Operations:
    def __init__(self, config: ExecConfig, registry: Registry, containers: Containers) -> None:
        self.config, self.registry, self.containers = config, registry, containers
        self.backend: NodeBackend = containers.backend

    def exec(self, req: ExecRequest) -> dict[str, Any]:
        return run_flow(self.exec_flow(req), self.backend)

    def exec_flow(self, req: ExecRequest) -> Flow[dict[str, Any]]:
        with self.registry.use(req.container_id) as rec:
            workdir = req.workdir or rec.workdir
            user = req.user
            res = yield from self._command(
                rec,
                req.command,
                timeout=req.timeout,
                workdir=workdir,
                env=req.env,
                max_output=req.max_output_bytes,
                merge_stderr=not req.separate_stderr,
                user=user,
            )
            if (
                user
                and res.returncode == 126
                and (not res.output or b"unable to find user" in res.output)
                and not self._user_exists(rec, user)
            ):  # Docker's exec says 126, with or without a message
                raise ApiError(422, f"no user {user!r} in the container")
        result = {
            "returncode": res.returncode,
            "output": decode_text(res.output),
            "timed_out": res.timed_out,
            "truncated": res.truncated,
            "output_bytes": res.output_bytes,
            "duration": round(res.duration, 4),
        }
        if req.separate_stderr:  # "output" is then stdout alone
            result.update(stderr=decode_text(res.stderr), stderr_truncated=res.stderr_truncated)
        return result

    def _user_exists(self, rec: ContainerRecord, user: str) -> bool:
        name = user.split(":")[0]
        return (
            name.isdigit()
            or self._run(
                rec, f"id -u -- {_sh_quote(name)}", timeout=30.0, workdir="/", env=None, max_output=4096
            ).returncode
            == 0
        )

    def _run(self, rec: ContainerRecord, command: str, **kw: Any) -> CommandOutcome:
        return run_flow(self._command(rec, command, **kw), self.backend)

    def _command(self, rec: ContainerRecord, command: str, **kw: Any) -> Flow[CommandOutcome]:
        """One command of an operation, with the node's faults told apart from the command's."""
        try:
            outcome = yield Command(rec.id, command, **kw)
            if (
                outcome.returncode != 0
                and _ENOSPC in outcome.output + outcome.stderr
                and self._disk_full(rec)
            ):
                # The node's disk is full (images, containers and snapshots share it): the command failed
                # for the node, not for the agent or the patch. An empty patch or a failed test run
                # graded as the episode's would be a reward of 0 for the fleet's failure.
                raise ApiError(507, f"no space left on the disk of container {rec.id[:12]}'s node")
            if outcome.returncode in KILLED_OR_LOST and not outcome.timed_out and not self._alive(rec):
                # The container was killed under the command (`docker kill`, its node's daemon restarted,
                # its memory cgroup torn down): the exit status is the fleet's, not the command's. A 137
                # answered as a result would be graded as the patch's failure.
                raise ApiError(
                    410,
                    f"container {rec.id[:12]} died during the command (killed from outside, or its "
                    "node's Docker daemon restarted): the command's result is lost",
                )
            return outcome
        except NotFound:
            with self.registry.lock:
                self.registry.forget_locked(rec)
            if rec.from_warm:
                self.containers.state.save()
            raise ApiError(
                410, f"container {rec.id[:12]} no longer exists (it died or was removed)"
            ) from None
        except Conflict:
            raise ApiError(409, f"container {rec.id[:12]} is not running (it died)") from None

    def _alive(self, rec: ContainerRecord) -> bool:
        """Whether the container still runs commands (asked only after a command ended by SIGKILL)."""
        try:
            probe = self.backend.exec_run(rec.id, "true", timeout=30.0, workdir="/", env=None, max_output=64)
        except BackendError:
            return False
        return probe.returncode == 0

    def _disk_full(self, rec: ContainerRecord) -> bool:
        """Whether the container's root file system has (almost) no space left (asked only after a command
        that failed saying ENOSPC). A probe the node cannot even start counts as full; an answer that is
        not df's (no df in the image) does not: the command then keeps its own result."""
        try:
            probe = self.backend.exec_run(
                rec.id, "df -Pk / | tail -n 1", timeout=30.0, workdir="/", env=None, max_output=4096
            )
        except BackendError:
            return True
        fields = decode_text(probe.output).split()
        if probe.returncode != 0 or len(fields) < 4 or not fields[3].isdigit():
            return False
        return int(fields[3]) < DISK_FULL_KIB

    def diff(self, req: DiffRequest) -> dict[str, Any]:
        return run_flow(self.diff_flow(req), self.backend)

    def diff_flow(self, req: DiffRequest) -> Flow[dict[str, Any]]:
        """The patch of the workdir; `record_baseline` records the episode-start state instead (see
        swe_rl/fleet/patch_baseline.py), which every later diff (against HEAD) then leaves out."""
        base = req.base
        max_bytes = self.config.max_eval_output_bytes
        with self.registry.use(req.container_id) as rec:
            workdir = req.workdir or rec.workdir
            if req.record_baseline:
                return (yield from self._record_baseline(rec, workdir))
            if base == "HEAD":  # one exec: the baseline diff, or the seed's diff when none was recorded
                res = yield from self._command(
                    rec,
                    patch_baseline.DIFF_SCRIPT if rec.baseline else patch_baseline.DIFF_OR_SEED_SCRIPT,
                    timeout=300.0,
                    workdir=workdir,
                    env=None,
                    max_output=max_bytes,
                    merge_stderr=False,
                )
                if res.returncode == patch_baseline.NO_BASELINE_EXIT:  # recorded here, and gone since
                    raise ApiError(
                        422,
                        f"the baseline recorded in {workdir} is gone: {decode_text(res.stderr).strip()[:2000]}",
                    )
            else:  # against another revision: everything untracked counts
                cmd = f"git add -A >/dev/null && {patch_baseline.SAFE_DIFF} --cached {base}"
                res = yield from self._command(
                    rec,
                    patch_baseline.SAFE_GIT_ENV + cmd,
                    timeout=300.0,
                    workdir=workdir,
                    env=None,
                    max_output=max_bytes,
                    merge_stderr=False,
                )
        if res.returncode != 0:
            raise ApiError(422, f"git diff failed in {workdir}: {decode_text(res.stderr).strip()[:2000]}")
        if res.truncated:
            raise ApiError(413, f"patch larger than {max_bytes} bytes")
        return _encode_bytes("patch", res.output)

    def _record_baseline(self, rec: ContainerRecord, workdir: str) -> Flow[dict[str, Any]]:
        res = yield from self._command(
            rec,
            patch_baseline.BASELINE_SCRIPT,
            timeout=600.0,
            workdir=workdir,
            env=None,
            max_output=64 << 10,
            merge_stderr=False,
        )
        if res.returncode != 0:
            raise ApiError(
                422, f"cannot record a baseline in {workdir}: {decode_text(res.stderr).strip()[:2000]}"
            )
        rec.baseline = True
        return {"patch": "", "baseline": decode_text(res.output).strip()}

    def write_file(self, req: WriteFileRequest) -> dict[str, Any]:
        return run_flow(self._write_file_flow(req), self.backend)

    def _write_file_flow(self, req: WriteFileRequest) -> Flow[dict[str, Any]]:
        data = req.content
        with self.registry.use(req.container_id) as rec:
            path = _resolve(req.path, rec.workdir)
            parent, name = os.path.dirname(path), os.path.basename(path)
            if not name:
                raise ApiError(400, f"path {path!r} names a directory")
            stat = self.backend.stat_path(rec.id, path)
            if stat is not None and stat.is_dir:  # a tar upload would replace the directory by the file
                raise ApiError(400, f"{path} is a directory", path=path)
            tar_bytes = io.BytesIO()
            with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), req.mode, int(time.time())
                tar.addfile(info, io.BytesIO(data))
            try:
                self.backend.put_archive(rec.id, parent, tar_bytes.getvalue())
                ok = True
            except NotFound:
                ok = False
            if not ok:
                if not req.create_dirs:
                    raise ApiError(404, f"directory {parent!r} does not exist")
                res = yield from self._command(
                    rec,
                    f"mkdir -p -- {_sh_quote(parent)}",
                    timeout=60.0,
                    workdir="/",
                    env=None,
                    max_output=4096,
                )
                if res.returncode != 0:
                    raise ApiError(
                        422, f"cannot create directory {parent!r}: {decode_text(res.output).strip()}"
                    )
                try:
                    self.backend.put_archive(rec.id, parent, tar_bytes.getvalue())
                except BackendError as exc:
                    raise ApiError(
                        422, f"cannot write {path!r}: {self.containers.scrub(exc.message)}"
                    ) from None
        return {"ok": True, "path": path, "bytes": len(data)}

    def read_file(self, req: ReadFileRequest, _links: int = 0) -> dict[str, Any]:
        limit = req.max_bytes if req.max_bytes is not None else self.config.max_file_bytes
        with self.registry.use(req.container_id) as rec:
            path = _resolve(req.path, rec.workdir)
            try:
                stat, stream = self.backend.get_archive(rec.id, path)
            except NotFound:
                raise ApiError(404, f"no such file: {path}", path=path) from None
            except Refused as exc:  # a symlink loop, a path through a file: the path's fault
                raise ApiError(
                    422, f"cannot read {path}: {self.containers.scrub(exc.message)}", path=path
                ) from None
            if stat.is_dir:
                raise ApiError(400, f"{path} is a directory", path=path)
            if stat.size > limit:
                raise ApiError(413, f"{path} has {stat.size} bytes, more than the limit {limit}", path=path)
            raw = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r") as tar:
            member = next((m for m in tar.getmembers()), None)
            if member is None:
                raise ApiError(404, f"no such file: {path}")
            if member.issym() or member.islnk():
                if _links >= MAX_SYMLINKS:
                    raise ApiError(422, f"cannot read {path}: too many levels of symbolic links", path=path)
                # Follow one link level by asking for the target (relative to the link's directory).
                target = _resolve(member.linkname, os.path.dirname(path))
                return self.read_file(req.model_copy(update={"path": target}), _links + 1)
            fh = tar.extractfile(member)
            data = fh.read() if fh else b""
        result = _encode_bytes("content", data)
        result.update({"path": path, "size": len(data), "mode": stat.mode})
        return result

    def evaluate(self, req: EvaluateRequest) -> dict[str, Any]:
        return run_flow(self.evaluate_flow(req), self.backend)

    def evaluate_flow(self, req: EvaluateRequest) -> Flow[dict[str, Any]]:
        patch = req.patch
        start = time.monotonic()
        with self.registry.use(req.container_id) as rec:
            workdir = req.workdir or rec.workdir
            apply_status, strategy, apply_log = "empty", None, ""
            if patch.strip():
                yield from self._write_file_flow(
                    WriteFileRequest(
                        container_id=rec.id, path=f"{SCRATCH}/patch.diff", content=patch.encode()
                    )
                )
                apply_status = "failed"
                logs = []
                for strategy_name, cmd in APPLY_STRATEGIES:
                    res = yield from self._command(
                        rec,
                        cmd.format(p=f"{SCRATCH}/patch.diff"),
                        timeout=300.0,
                        workdir=workdir,
                        env=None,
                        max_output=64 << 10,
                    )
                    logs.append(f">>> {strategy_name}\n{decode_text(res.output)}")
                    if res.returncode == 0:
                        apply_status, strategy = "applied", strategy_name
                        break
                apply_log = "\n".join(logs)
            result: dict[str, Any] = {
                "apply_status": apply_status,
                "apply_strategy": strategy,
                "apply_output": apply_log,
            }
            if apply_status == "failed":
                result.update({"returncode": None, "test_log": "", "timed_out": False, "truncated": False})
            else:
                yield from self._write_file_flow(
                    WriteFileRequest(
                        container_id=rec.id,
                        path=f"{SCRATCH}/eval.sh",
                        content=req.eval_script.encode("utf-8"),
                        mode=0o755,
                    )
                )
                res = yield from self._command(
                    rec,
                    f"bash {SCRATCH}/eval.sh",
                    timeout=req.timeout,
                    workdir=workdir,
                    env=None,
                    max_output=req.max_output_bytes,
                )
                result.update(
                    {
                        "returncode": res.returncode,
                        "test_log": decode_text(res.output),
                        "timed_out": res.timed_out,
                        "truncated": res.truncated,
                    }
                )
        result["duration"] = round(time.monotonic() - start, 4)
        return result


def _encode_bytes(key: str, data: bytes) -> dict[str, Any]:
    """Text when it is valid UTF-8, base64 otherwise, so bytes round-trip exactly."""
    try:
        return {key: data.decode("utf-8"), "encoding": "utf-8"}
    except UnicodeDecodeError:
        return {key: base64.b64encode(data).decode("ascii"), "encoding": "base64"}


def _resolve(path: str, workdir: str) -> str:
    return os.path.normpath(path if path.startswith("/") else os.path.join(workdir, path))


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"
