"""One command in a container, backend-neutral: its outcome and the shell that runs and kills it.

Every command runs in its own process group inside the container; a command that outlives
its timeout has that whole group killed (from the host when the backend can, then inside the
container with `KILLER`, where every process carrying the command's marker variable dies too),
so the container stays usable and nothing keeps running. Output is capped (head + tail kept,
`swe_rl.fleet.output.HeadTailBuffer`), so a runaway `cat` cannot exhaust the server's memory;
invalid UTF-8 is replaced, never an error. How a backend starts the process and streams its
output is the backend's own (`docker_exec.py` for Docker).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

TIMEOUT_RETURNCODE = 124  # GNU timeout's convention


def decode_text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass
class CommandOutcome:
    returncode: int
    output: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    output_bytes: int
    duration: float
    stderr_truncated: bool = False


# The command runs under bash when the image has it (sh otherwise), exec'd in
# place so a trivial command costs no extra process. docker exec makes it a
# session and process-group leader. Every process it starts inherits the
# marker variable, which is how a timeout finds them all inside the container,
# even those that left the process group.
MARKER_VAR = "SWE_RL_EXEC_TAG"
WRAPPER = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$0"; else exec sh -c "$0"; fi'
MERGED_WRAPPER = "exec 2>&1; " + WRAPPER
"""WRAPPER with stderr joined to stdout inside the container. Why: Docker copies the two pipes to the
stream separately, so under load a line of one can land inside a line of the other (seen: cargo's
`Running tests/...` spliced into libtest's `test name ... ok`, which then did not parse and voided a
gold patch). One pipe keeps the order the processes wrote in."""
# Run inside the container on a timeout ($0 tag, $1 the command's start in clock ticks since boot or
# empty, $2 its age in ticks, $3 the tags of the other commands running in the container and of the
# killers, space-separated, $4 the server's boot id, $5 the first boot-clock tick the command could
# have started in: used instead of the age when the container's kernel has that boot id). It kills
# every process carrying the tag, and every process without the tag of another running command (no tag, or a stale or forged one) that started after the command
# did and descends from no other running command: so `env -i setsid`, double forks and the like die
# with their command, while a command running beside it and what earlier commands left survive. The
# container's own processes (its init's session, 1: a command comes in by exec in a session of its own
# and no process can join another session) are never listed: the main process is forked by the init a
# moment after `start` answers, so on a loaded machine it can start after a command exec'd at once.
KILLER = r"""
tag=$0 cutoff=$1 age=$2 keep=$3 boot=$4 since=$5
read -r up _ < /proc/uptime; up=${up%%.*}${up#*.}; fallback=$((up - age))
b=; read -r b 2>/dev/null < /proc/sys/kernel/random/boot_id
[ -n "$boot" ] && [ "$b" = "$boot" ] && [ -n "$since" ] && fallback=$since
procs() {
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] && continue
    read -r st < "$d/stat" 2>/dev/null || continue
    st=${st##*) }
    set -- $st
    [ "$1" = Z ] && continue
    [ "$4" = 1 ] && continue
    e=$(tr '\000' '\n' < "$d/environ" 2>/dev/null | grep '^SWE_RL_EXEC_TAG=')
    v=${e#SWE_RL_EXEC_TAG=}
    if [ -z "$e" ]; then c=2
    elif [ "$v" = "$tag" ]; then c=0
    else case " $keep " in *" $v "*) c=1 ;; *) c=2 ;; esac
    fi
    echo "$p $2 ${20} $c"
  done
}
doomed() {
if command -v awk >/dev/null 2>&1; then
  procs | awk -v cutoff="$cutoff" -v fallback="$fallback" '
    { pp[$1] = $2; st[$1] = $3; c[$1] = $4; if ($4 == 0 && (low == "" || $3 < low)) low = $3 }
    END {
      if (cutoff == "") cutoff = (low != "") ? low : fallback
      for (p in c) {
        if (c[p] == 0) { print p; continue }
        if (c[p] != 2 || st[p] + 0 < cutoff + 0) continue
        q = pp[p]; n = 0; safe = 0
        while ((q in c) && n++ < 4096) { if (c[q] == 1) { safe = 1; break }; if (c[q] == 0) break; q = pp[q] }
        if (!safe) print p
      }
    }'
else
  procs | while read -r p _ _ c; do [ "$c" = 0 ] && echo "$p"; done
fi
}
# The cutoff is fixed once, before anything dies, and printed for the next pass: recomputed after the
# command's tagged processes were killed it fell back to the age, which took a process started a moment
# before the command (a fresh container's `sleep infinity`) for an escapee and stopped the container.
if [ -z "$cutoff" ] && command -v awk >/dev/null 2>&1; then
  cutoff=$(procs | awk -v fb="$fallback" '$4 == 0 && (low == "" || $3 < low) { low = $3 } END { print (low != "") ? low : fb }')
fi
echo "cutoff $cutoff"
# Again while a pass finds something: a process may fork between being listed and being killed (a
# fork loop is bounded by the container's pids limit, so the passes end).
n=0
while [ $n -lt 50 ]; do
  [ -n "$(doomed | while read -r p; do kill -9 "$p" 2>/dev/null && echo "$p"; done)" ] || break
  n=$((n + 1))
done
exit 0
"""


TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


BOOT_ID = _boot_id()
"""This kernel's boot id ('' when unknown); a container on the same kernel reads the same one."""


@dataclass(frozen=True)
class CommandStart:
    """When the server started a command, on two clocks. Why: a kill that finds nothing of the command
    alive (only an escapee that cleared its environment) kills what started after the command, so it
    needs the command's start. `boot_tick` is exact for a daemon on this kernel (process starts in
    `/proc/<pid>/stat` count ticks on the same boot clock); `monotonic` gives an age for a remote one."""

    monotonic: float
    boot_tick: int
    """The first boot-clock tick the command's processes can have started in: the tick after the one
    `run` was called in, so a process started in that same tick (before the call) is never taken for one."""

    @classmethod
    def now(cls) -> CommandStart:
        boot = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
        return cls(time.monotonic(), int(time.clock_gettime(boot) * TICKS) + 1)


def start_ticks(pid: int) -> str:
    """Start of a host process in clock ticks since boot (the same clock inside its container), or ''."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def pid_in_container(pid: int, container_id: str) -> bool:
    """True when host `pid` is a process of that container (guards against PID reuse and other namespaces)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            return container_id in fh.read()
    except OSError:
        return False
