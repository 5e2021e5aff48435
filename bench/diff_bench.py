"""Where a fleet `diff` spends its time, against the seed's diff and a plain `git diff`, in one run.

One lease on a fixture task image (a real repository at /testbed), the episode-start baseline recorded,
one file edited and one created (the same patch for the baseline diff and the seed's); then,
interleaved round after round so that load hits every variant alike (p50 in ms over `--rounds`):

- `fleet diff`: `lease.diff()`, client -> pool -> exec server -> the baseline diff script;
- `script via exec`: the same script (`patch_baseline.DIFF_SCRIPT`) run through `lease.exec`, which
  separates the script's own cost from the diff endpoint's;
- `seed diff via exec`: what a diff was before the baseline (`git add -A && git diff --cached HEAD`);
- `plain git diff via exec`: `git diff HEAD` (tracked files only: the floor, not an equivalent);
- `true via exec`: a trivial command, the cost of any call through the fleet;
- `fleet diff, no baseline` and `seed diff via exec, no baseline`: the same on a second lease where no
  baseline was recorded (what every caller of the plain fleet API gets): the node's one-exec fallback
  (`patch_baseline.DIFF_OR_SEED_SCRIPT`) against the seed's command.

Then the same commands timed inside the container (a shell loop of `--loop` runs each, repeated
`--repeats` times, median per run; wall and CPU), without the fleet's round trip, which on a busy
machine is most of a call and noisy: that is where the baseline machinery's own cost shows. The last
lines are the ratios asked about: fleet diff p50 / seed diff via exec p50 (same run), with a baseline,
then without one (the last line).

    python3 bench/diff_bench.py [--rounds 40] [--loop 30] [--repeats 5] [--image IMAGE]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
from collections.abc import Awaitable, Callable

from swe_rl.fleet import patch_baseline
from swe_rl.fleet.client import EnvClient, EnvClientConfig, Lease
from swe_rl.fleet.local import LocalFleet

IMAGE = "swe-rl/fixture.pytoolz_1776_toolz-9001:latest"
SEED = "git add -A >/dev/null && git -c core.quotepath=off diff --cached --binary HEAD"


def p50_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def measure(lease: Lease, bare: Lease, rounds: int) -> dict[str, list[float]]:
    async def run(command: str, on: Lease = lease) -> None:
        result = await on.exec(command, timeout=120)
        assert result.returncode == 0, result.output

    async def fleet_diff(on: Lease = lease) -> None:
        assert "bench_new.py" in await on.diff()

    variants: dict[str, Callable[[], Awaitable[None]]] = {
        "fleet diff": fleet_diff,
        "script via exec": lambda: run(patch_baseline.DIFF_SCRIPT),
        "seed diff via exec": lambda: run(SEED),
        "plain git diff via exec": lambda: run("git diff HEAD"),
        "true via exec": lambda: run("true"),
        "fleet diff, no baseline": lambda: fleet_diff(bare),
        "seed diff via exec, no baseline": lambda: run(SEED, bare),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, call in variants.items():
            t = time.perf_counter()
            await call()
            times[name].append(time.perf_counter() - t)
    return times


INSIDE = {
    "baseline diff script": patch_baseline.DIFF_SCRIPT,
    "seed diff": SEED,
    "plain git diff": "git diff HEAD",
    "true": "true",
}


_CPU = re.compile(r"(\d+)m([\d.]+)s")


def _cpu_seconds(times_line: str) -> float:
    """user + sys of the shell's `times` line (``0m0.120000s 0m0.050000s``)."""
    return sum(int(m) * 60 + float(s) for m, s in _CPU.findall(times_line))


async def measure_inside(
    lease: Lease, loop: int, repeats: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per-run wall and CPU seconds of each command, timed by a shell loop inside the container
    (interleaved repeats). CPU is the children's user + sys from the shell's `times` (the loop's own
    counter is a builtin): what the command costs, which a loaded machine stretches less than wall."""
    for i, command in enumerate(INSIDE.values()):
        await lease.write_file(f"/tmp/diff-bench/{i}.sh", command + "\n")
    timer = "; ".join(
        f"( s=$(date +%s%N); n=0; while [ $n -lt {loop} ]; do sh /tmp/diff-bench/{i}.sh >/dev/null 2>&1; "
        f"n=$((n + 1)); done; echo @ {i} $(( ($(date +%s%N) - s) / {loop} )); times )"
        for i in range(len(INSIDE))
    )
    names = list(INSIDE)
    wall: dict[str, list[float]] = {name: [] for name in INSIDE}
    cpu: dict[str, list[float]] = {name: [] for name in INSIDE}
    for _ in range(repeats):
        result = await lease.exec(timer, timeout=600)
        assert result.returncode == 0, result.output
        lines = result.output.splitlines()
        for at, line in enumerate(lines):
            if line.startswith("@ "):
                _, index, nanoseconds = line.split()
                wall[names[int(index)]].append(int(nanoseconds) / 1e9)
                cpu[names[int(index)]].append(_cpu_seconds(lines[at + 2]) / loop)  # children's line
    return wall, cpu


Times = dict[str, list[float]]


async def bench(
    pool_url: str, token: str, image: str, rounds: int, loop: int, repeats: int
) -> tuple[Times, tuple[Times, Times]]:
    async with EnvClient(EnvClientConfig(pool_url=pool_url, token=token)) as client:
        edit = "echo '# edited' >> README.rst && echo 'x = 1' > bench_new.py"
        async with (
            client.lease(image, instance_id="diff-bench") as lease,
            client.lease(image, instance_id="diff-bench-bare") as bare,
        ):
            await lease.record_baseline()
            for on in (lease, bare):
                setup = await on.exec(edit)
                assert setup.ok, setup.output
            await measure(lease, bare, 2)  # warm-up: page cache, connections
            return await measure(lease, bare, rounds), await measure_inside(lease, loop, repeats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--loop", type=int, default=30)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--image", default=IMAGE)
    a = p.parse_args()
    with LocalFleet() as fleet:
        times, inside = asyncio.run(bench(fleet.pool_url, fleet.token, a.image, a.rounds, a.loop, a.repeats))
    print(f"{'through the fleet':32} {'p50 ms':>8} {'mean ms':>8}  (n={a.rounds}, interleaved)")
    for name, values in times.items():
        print(f"{name:32} {p50_ms(values):8.1f} {statistics.fmean(values) * 1000:8.1f}")
    inside_wall, inside_cpu = inside
    print(
        f"{'inside the container':32} {'ms/run':>8} {'cpu ms':>8}  (median of {a.repeats} loops of {a.loop})"
    )
    for name in INSIDE:
        print(f"{name:32} {p50_ms(inside_wall[name]):8.2f} {p50_ms(inside_cpu[name]):8.2f}")
    ratio = {
        kind: p50_ms(values["baseline diff script"]) / p50_ms(values["seed diff"])
        for kind, values in (("wall", inside_wall), ("cpu", inside_cpu))
    }
    print(f"inside: baseline diff script / seed diff = {ratio['wall']:.2f} (wall), {ratio['cpu']:.2f} (cpu)")
    fleet_p50, plain_p50 = p50_ms(times["fleet diff"]), p50_ms(times["plain git diff via exec"])
    seed_p50 = p50_ms(times["seed diff via exec"])
    print(f"plain git diff via exec p50 {plain_p50:.0f} ms: fleet diff / plain = {fleet_p50 / plain_p50:.2f}")
    print(
        f"diff: fleet p50 {fleet_p50:.0f} ms, seed diff via exec p50 {seed_p50:.0f} ms, "
        f"ratio {fleet_p50 / seed_p50:.2f}"
    )
    bare_p50, bare_seed_p50 = (
        p50_ms(times["fleet diff, no baseline"]),
        p50_ms(times["seed diff via exec, no baseline"]),
    )
    print(
        f"diff (no baseline): fleet p50 {bare_p50:.0f} ms, seed diff via exec p50 {bare_seed_p50:.0f} ms, "
        f"ratio {bare_p50 / bare_seed_p50:.2f}"
    )


if __name__ == "__main__":
    main()
