"""Fresh machine-like Docker nodes for the real node set-up test (`test_node_setup.py`).

A node is a container booted like a machine: systemd as PID 1 and, where installed, its own Docker
daemon (Docker-in-Docker: the node's Docker is not the host's). Two images, built FROM the offline base
image (debootstrap minbase of Debian bookworm, with python3 but not python3-venv, as on a fresh node):

- `bare`: plus systemd (and strace, which only the test uses): a node without Docker;
- `docker`: `bare` plus Debian's docker.io (without its recommended extras, to keep the cache small),
  enabled as its package does, so dockerd runs from boot: a node that already runs Docker.

Images are tagged by a hash of their recipe and the base image's id (`swe-rl/node-test:<kind>-<hash>`), so a
second run reuses them; an older recipe's tags are removed when a new one is built. Containers and their
anonymous /var/lib/docker volume are removed with the node (and swept when a killed session left them).

What the machine needs for its own Docker, and nothing the set-up script could rely on: capabilities
(all the host's bounding set allows: `--privileged` fails where the host lacks one, as here, with
"unable to apply caps"), no seccomp/AppArmor confinement, a private cgroup namespace whose cgroup mounts
`node-init` makes writable before it execs systemd, and /var/lib/docker on a volume (overlay2 cannot sit
on the container's own overlay).
"""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import BASE_IMAGE, TEST_ID_PREFIX, _session_dead

REPO = "swe-rl/node-test"
LABEL = "swe-rl.node-test"

NODE_INIT = """\
#!/bin/sh
# The machine's part of a test node: cgroups writable for the node's own Docker, then systemd as PID 1.
mount -o remount,rw /sys/fs/cgroup 2>/dev/null
for d in $(awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts); do
  mount -o remount,bind,rw "$d" || echo "node-init: $d stays read-only" >&2
done
exec /sbin/init
"""

BARE_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd systemd-sysv strace >/dev/null \\
 && rm -rf /var/lib/apt/lists/*
COPY node-init /usr/local/sbin/node-init
STOPSIGNAL SIGRTMIN+3
CMD ["/usr/local/sbin/node-init"]
"""

DOCKER_DOCKERFILE = """\
FROM {bare}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null \\
 && rm -rf /var/lib/apt/lists/*
"""

# Linux capabilities by number (capability.h), for the host's bounding set.
CAPS = (
    "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
    "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT "
    "SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE "
    "AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ "
    "PERFMON BPF CHECKPOINT_RESTORE"
).split()


def sh(*cmd: str, timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def capability_flags() -> list[str]:
    """`--cap-add ALL`, less what this host's bounding set lacks (Docker would fail to apply it)."""
    bounding = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            bounding = int(line.split()[1], 16)
    missing = [name for i, name in enumerate(CAPS) if not bounding >> i & 1]
    return ["--cap-add", "ALL", *(flag for name in missing for flag in ("--cap-drop", name))]


def run_flags() -> list[str]:
    return [
        *capability_flags(),
        "--security-opt", "seccomp=unconfined",
        "--security-opt", "apparmor=unconfined",
        "--security-opt", "systempaths=unconfined",
        "--cgroupns", "private",
        "--tmpfs", "/run",
        "--tmpfs", "/run/lock",
        "-v", "/var/lib/docker",
    ]  # fmt: skip


def _build(tag: str, dockerfile: str, context: Path) -> None:
    context.mkdir(parents=True, exist_ok=True)
    (context / "Dockerfile").write_text(dockerfile)
    (context / "node-init").write_text(NODE_INIT)
    (context / "node-init").chmod(0o755)
    sh("docker", "build", "-q", "--label", f"{LABEL}=cache", "-t", tag, str(context), timeout=900)


def node_images(work: Path) -> dict[str, str]:
    """The `bare` and `docker` node image tags, built when their recipe's tag is missing."""
    base_id = sh("docker", "image", "inspect", "-f", "{{.Id}}", BASE_IMAGE).stdout.strip()
    recipe = "\0".join((base_id, BARE_DOCKERFILE, NODE_INIT, DOCKER_DOCKERFILE))
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    tags = {"bare": f"{REPO}:bare-{digest}", "docker": f"{REPO}:docker-{digest}"}
    if all(sh("docker", "image", "inspect", t, check=False).returncode == 0 for t in tags.values()):
        return tags
    listed = sh("docker", "images", "--format", "{{.Repository}}:{{.Tag}}", REPO).stdout.split()
    for old in sorted(listed, reverse=True):  # docker-* (a child) before bare-*
        if old not in tags.values():
            sh("docker", "rmi", old, check=False)  # an older recipe's cache
    _build(tags["bare"], BARE_DOCKERFILE, work / "bare")
    _build(tags["docker"], DOCKER_DOCKERFILE.format(bare=tags["bare"]), work / "docker")
    return tags


def sweep_dead_nodes() -> None:
    """Remove nodes (with their volume) of test sessions killed before their teardown."""
    names = sh("docker", "ps", "-a", "--filter", f"label={LABEL}=node", "--format", "{{.Names}}").stdout
    for name in names.split():
        if _session_dead(name):
            sh("docker", "rm", "-f", "-v", name, check=False)


@dataclass
class Node:
    """One booted node container; `exec` runs a command in it as root."""

    name: str

    @classmethod
    def boot(cls, image: str, mounts: dict[Path, str]) -> Node:
        host = f"node-{secrets.token_hex(3)}"
        node = cls(f"{TEST_ID_PREFIX}{host}")
        volumes = [flag for src, dst in mounts.items() for flag in ("-v", f"{src}:{dst}:ro")]
        try:
            sh(
                "docker", "run", "-d", "--name", node.name, "--hostname", host,
                "--label", f"{LABEL}=node", "--label", "swe-rl.test=1",
                *run_flags(), *volumes, "-p", "127.0.0.1::5000", image,
            )  # fmt: skip
            node.wait_for_systemd()
        except BaseException:
            node.remove()
            raise
        return node

    def exec(self, *cmd: str, env: dict[str, str] | None = None, timeout: float = 120, **kw):
        flags = [flag for k, v in (env or {}).items() for flag in ("-e", f"{k}={v}")]
        interactive = ["-i"] if "input" in kw else []
        return sh("docker", "exec", *interactive, *flags, self.name, *cmd, timeout=timeout, **kw)

    def wait_for_systemd(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            p = self.exec("systemctl", "is-system-running", check=False, timeout=60)
            state = (p.stdout + p.stderr).strip()
            if state in ("running", "degraded"):
                return
            time.sleep(1)
        logs = sh("docker", "logs", "--tail", "30", self.name, check=False)
        raise AssertionError(
            f"systemd did not come up in {self.name} ({state!r}):\n{logs.stdout}{logs.stderr}"
        )

    def port(self) -> int:
        return int(sh("docker", "port", self.name, "5000/tcp").stdout.splitlines()[0].rsplit(":", 1)[1])

    def journal(self, unit: str = "swe-exec-server") -> str:
        p = self.exec("journalctl", "-u", unit, "-n", "40", "--no-pager", check=False)
        return p.stdout + p.stderr

    def load_image(self, image: str) -> None:
        """`docker save` on the host into the node's own Docker (no registry is reachable)."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        try:
            load = subprocess.run(
                ["docker", "exec", "-i", self.name, "docker", "load", "-q"],
                stdin=save.stdout,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        finally:
            assert save.stdout is not None
            save.stdout.close()
            save.wait(timeout=600)
        assert load.returncode == 0 and save.returncode == 0, load.stderr

    def remove(self) -> None:
        sh("docker", "rm", "-f", "-v", self.name, check=False, timeout=300)
