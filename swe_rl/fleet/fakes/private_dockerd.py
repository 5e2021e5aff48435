"""A Docker daemon of its own for one node of a chaos fleet: killed and restarted, or its disk filled, without
touching the machine's daemon (`swe_rl.fleet.fakes.faults`, docs/fleet.md "Faults")."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from swe_rl.fleet.local import die_with_parent

__all__ = ["PrivateDockerd"]


class PrivateDockerd:
    """A Docker daemon of its own (data root and pid file under `root`, exec root and socket under a short folder
    in /tmp; its own network namespace, no bridge, no iptables), for a node whose daemon is killed and restarted
    under running episodes without touching the machine's daemon. It starts its own containerd (a child under the exec root).

    `stop()` removes its containers, stops it, kills what it left (containerd shims), unmounts what it
    mounted under `root` and deletes `root`: call it in a ``finally`` (or use the context manager)."""

    def __init__(self, root: Path, data_size: str | None = None) -> None:
        self.root = Path(root)
        self.data_size = data_size
        """Put the data root on a tmpfs of this size (``600m``): a small disk `fill()` can fill."""
        # Sockets live under the exec root (containerd's `…/containerd/containerd.sock.ttrpc`), and a unix
        # socket's path has at most 107 bytes: a deep `root` (a pytest tmp_path) made the daemon fail to
        # start. The exec root and the socket go to a short folder of their own under /tmp.
        self.exec_root = Path("/tmp") / f"swe-dd-{os.getpid()}-{secrets.token_hex(4)}"
        self.sock = self.exec_root / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def __enter__(self) -> PrivateDockerd:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self, timeout: float = 120.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.exec_root.mkdir(mode=0o700, exist_ok=True)
        r = self.root
        data = r / "data"
        if self.data_size and not _mounts_under(str(data)):
            data.mkdir(exist_ok=True)
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.data_size}", "swe-rl-chaos", str(data)],
                check=True,
            )
        with open(r / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    # A network namespace of its own: a daemon with the bridge off deletes the host's
                    # `docker0` at start (moby removes the default bridge interface it does not use),
                    # which broke every default-network container of the machine's own daemon.
                    "unshare",
                    "--net",
                    "dockerd",
                    f"--data-root={r / 'data'}",
                    f"--exec-root={self.exec_root / 'exec'}",
                    f"--pidfile={r / 'dockerd.pid'}",
                    f"--host={self.host}",
                    "--bridge=none",
                    "--iptables=false",
                    "--ip6tables=false",
                    "--ip-masq=false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private dockerd in {r} did not start; see {r / 'dockerd.log'}")
            time.sleep(0.1)

    def answers(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(str(self.sock))
                s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
                return b" 200 " in s.recv(64)
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the daemon and its containerd (the node's daemon crashed); the containers' shims stay."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)
        for pid in _processes_naming(str(self.exec_root / "exec"), "containerd"):
            try:  # its containerd runs in a process group of its own; the shims are left alive
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # A restarted dockerd waits for the containerd its pid file names when that pid still answers
        # (an unreaped zombie does): the file goes with the process.
        (self.exec_root / "exec" / "containerd" / "containerd.pid").unlink(missing_ok=True)

    def fill(self) -> int:
        """Fill the data root's file system (a full disk); bytes written."""
        written, chunk = 0, b"\0" * (1 << 20)
        with open(self.root / "data" / ".chaos-fill", "ab") as fh:
            try:
                while True:
                    fh.write(chunk)
                    fh.flush()
                    written += len(chunk)
            except OSError:  # ENOSPC: full
                pass
        return written

    def unfill(self) -> None:
        (self.root / "data" / ".chaos-fill").unlink(missing_ok=True)

    def restart(self) -> None:
        self.kill()
        self.restarts += 1
        self.start()

    def load(self, image: str) -> None:
        """Copy `image` from the machine's daemon into this one (``docker save | docker load``)."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        try:
            subprocess.run(
                ["docker", "--host", self.host, "load", "--quiet"],
                stdin=save.stdout,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        finally:
            if save.stdout is not None:
                save.stdout.close()
            if save.wait(60) != 0:
                raise RuntimeError(f"docker save {image} failed")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None and self.answers():
            ids = subprocess.run(
                ["docker", "--host", self.host, "ps", "-aq"], capture_output=True, text=True
            ).stdout.split()
            if ids:
                subprocess.run(["docker", "--host", self.host, "rm", "-f", *ids], capture_output=True)
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self.kill()
        # the containerd shims of its containers (they outlive a killed daemon)
        shims = _processes_naming(str(self.exec_root / "exec"), "containerd-shim-runc-v2")
        for pid in _container_processes(self.root) + shims:
            try:  # what still runs in its containers: a killed daemon's containers outlive it
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for top in (self.root, self.exec_root):
            for mount in _mounts_under(str(top)):
                subprocess.run(["umount", "-l", mount], capture_output=True)
            subprocess.run(["rm", "-rf", str(top)], capture_output=True)


def _processes_naming(text: str, program: str) -> list[int]:
    """Pids of `program` (the base name of their argv[0]) whose command line contains `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]).decode(errors="replace") == program and any(
            text.encode() in a for a in argv
        ):
            found.append(int(entry))
    return found


def _container_processes(root: Path) -> list[int]:
    """Pids in the cgroup of a container of the daemon whose data root is ``root/data``."""
    try:
        ids = [d for d in os.listdir(root / "data" / "containers") if len(d) == 64]
    except OSError:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup", encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        if any(cid in text for cid in ids):
            found.append(int(entry))
    return found


def _mounts_under(root: str) -> list[str]:
    """Mount points at or under `root`, deepest first."""
    points = []
    with open("/proc/mounts", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            point = line.split()[1].replace("\\040", " ")
            if point == root or point.startswith(root.rstrip("/") + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)
