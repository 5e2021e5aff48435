"""Where a fleet `diff` spends its time, against a plain `git diff` in the same container, in one run.

One lease on a fixture task image (a real repository at /testbed, untracked install output included),
the episode-start baseline recorded, one file edited and one created; then, interleaved round after
round so that load hits every variant alike (p50 in ms over `--rounds`):

- `fleet diff`: `lease.diff()`, client -> pool -> exec server -> the baseline diff script;
- `script via exec`: the same script (`patch_baseline.DIFF_SCRIPT`) run through `lease.exec`, which
  separates the script's own cost from the diff endpoint's;
- `seed diff via exec`: what a diff was before the baseline (`git add -A && git diff --cached HEAD`);
- `plain git diff via exec`: `git diff HEAD` (tracked files only: the floor, not an equivalent);
- `true via exec`: a trivial command, the cost of any call through the fleet.

Then the same commands timed inside the container (a shell loop of `--loop` runs each, repeated
`--repeats` times, median per run), without the fleet's round trip, which on a busy machine is most of
a call and noisy: that is where the baseline machinery's own cost shows. The last line is the ratio
asked about: fleet diff p50 / plain git diff p50 (same run).

    python3 bench/diff_bench.py [--rounds 40] [--loop 30] [--repeats 5] [--image IMAGE]
"""

from __future__ import annotations

import argparse
import asyncio
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


async def measure(lease: Lease, rounds: int) -> dict[str, list[float]]:
    async def run(command: str) -> None:
        result = await lease.exec(command, timeout=120)
        assert result.returncode == 0, result.output

    async def fleet_diff() -> None:
        assert "bench_new.py" in await lease.diff()

    variants: dict[str, Callable[[], Awaitable[None]]] = {
        "fleet diff": fleet_diff,
        "script via exec": lambda: run(patch_baseline.DIFF_SCRIPT),
        "seed diff via exec": lambda: run(SEED),
        "plain git diff via exec": lambda: run("git diff HEAD"),
        "true via exec": lambda: run("true"),
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


async def measure_inside(lease: Lease, loop: int, repeats: int) -> dict[str, list[float]]:
    """Per-run ms of each command, timed by a shell loop inside the container (interleaved repeats)."""
    for i, command in enumerate(INSIDE.values()):
        await lease.write_file(f"/tmp/diff-bench/{i}.sh", command + "\n")
    timer = "; ".join(
        f"s=$(date +%s%N); for _ in $(seq {loop}); do sh /tmp/diff-bench/{i}.sh >/dev/null 2>&1; done; "
        f"echo {i} $(( ($(date +%s%N) - s) / {loop} ))"
        for i in range(len(INSIDE))
    )
    times: dict[str, list[float]] = {name: [] for name in INSIDE}
    names = list(INSIDE)
    for _ in range(repeats):
        result = await lease.exec(timer, timeout=600)
        for line in result.output.splitlines():
            index, nanoseconds = line.split()
            times[names[int(index)]].append(int(nanoseconds) / 1e9)
    return times


async def bench(
    pool_url: str, token: str, image: str, rounds: int, loop: int, repeats: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    async with EnvClient(EnvClientConfig(pool_url=pool_url, token=token)) as client:
        async with client.lease(image, instance_id="diff-bench") as lease:
            await lease.record_baseline()
            setup = await lease.exec("echo '# edited' >> README.rst && echo 'x = 1' > bench_new.py")
            assert setup.ok, setup.output
            await measure(lease, 2)  # warm-up: page cache, connections
            return await measure(lease, rounds), await measure_inside(lease, loop, repeats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--loop", type=int, default=30)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--image", default=IMAGE)
    a = p.parse_args()
    with LocalFleet() as fleet:
        times, inside = asyncio.run(bench(fleet.pool_url, fleet.token, a.image, a.rounds, a.loop, a.repeats))
    print(f"{'through the fleet':28} {'p50 ms':>8} {'mean ms':>8}  (n={a.rounds}, interleaved)")
    for name, values in times.items():
        print(f"{name:28} {p50_ms(values):8.1f} {statistics.fmean(values) * 1000:8.1f}")
    print(f"{'inside the container':28} {'ms/run':>8}  (median of {a.repeats} loops of {a.loop})")
    for name, values in inside.items():
        print(f"{name:28} {p50_ms(values):8.1f}")
    script, seed = p50_ms(inside["baseline diff script"]), p50_ms(inside["seed diff"])
    print(f"inside: baseline diff script / seed diff = {script / seed:.2f}")
    fleet_p50, plain_p50 = p50_ms(times["fleet diff"]), p50_ms(times["plain git diff via exec"])
    seed_p50 = p50_ms(times["seed diff via exec"])
    print(f"plain git diff via exec p50 {plain_p50:.0f} ms: fleet diff / plain = {fleet_p50 / plain_p50:.2f}")
    print(
        f"diff: fleet p50 {fleet_p50:.0f} ms, seed diff via exec p50 {seed_p50:.0f} ms, "
        f"ratio {fleet_p50 / seed_p50:.2f}"
    )


if __name__ == "__main__":
    main()
