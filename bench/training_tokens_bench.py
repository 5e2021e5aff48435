"""Training tokens per trajectory: one sample per context segment (``swe_samples: segment``) vs one per turn.

    python bench/training_tokens_bench.py [--trajectories 20] [--low-water 0.3] [--seed 0]

Trajectories are shaped like SWE agent episodes and played through the plugin's own bookkeeping
(`TokenTrajectory`, head + tail compaction to the low-water mark when the next turn would not fit
``context - max_new_tokens``, the samples of `trajectory_samples`). No model runs: the ids are counters,
only lengths matter. Lengths (seeded, lognormal, rounded to whole tokens):

- prompt: 3,000 tokens (system prompt, tool instructions, issue);
- a policy turn (thinking + action): median 350, sigma 0.6, at most ``max_new_tokens``;
- an observation (command output, rendered): median 250, sigma 1.0, at most 6,000;
- max new tokens per turn: 4,096 (16k contexts: 2,048); omission marker: 24 tokens; assistant header: 3.

For every size (10 / 30 / 50 / 100 turns × 16k / 32k / 64k contexts) it prints, per trajectory on
average, the training tokens (the sum of the samples' lengths: what the actor runs forward and backward)
and samples of each mode, and their ratio to the trajectory's distinct tokens (prompt + every turn +
every observation, each once). The baseline is ``turn``, measured in the same run; the last line is

    training tokens: segment/distinct max R1; turn/segment at 50 turns 32k X2
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
from dataclasses import dataclass
from typing import Any

from swe_rl.slime.samples import CompatSample, trajectory_samples
from swe_rl.tokens import TokenTrajectory

PROMPT, MARKER, HEADER = 3000, 24, 3
TURNS = (10, 30, 50, 100)
CONTEXTS = (16384, 32768, 65536)


class _Codec:
    """What `trajectory_samples` asks of a codec: text of ids (not measured here)."""

    def decode(self, ids: Any) -> str:
        return ""


@dataclass
class Cost:
    distinct: int
    tokens: dict[str, int]
    samples: dict[str, int]


def _same(ids: list[int], omitted: int) -> list[int]:
    """The omission marker's ids (their text, with the count, is not measured here)."""
    return ids


def lengths(rng: random.Random, median: float, sigma: float, cap: int) -> int:
    return max(1, min(cap, round(rng.lognormvariate(0.0, sigma) * median)))


def play(rng: random.Random, turns: int, context: int, low_water: float) -> Cost:
    max_new = 2048 if context <= 16384 else 4096
    budget = context - max_new
    counter = iter(range(10**9))
    header = [next(counter) for _ in range(HEADER)]
    traj = TokenTrajectory([next(counter) for _ in range(PROMPT)], header)
    distinct = PROMPT
    for _ in range(turns):
        ids = [next(counter) for _ in range(lengths(rng, 350, 0.6, max_new))]
        traj.add_turn(ids, [0.0] * len(ids), "stop")
        obs = [next(counter) for _ in range(lengths(rng, 250, 1.0, 6000))] + header
        traj.add_observation(obs)
        distinct += len(ids) + len(obs)
        if len(traj.context) > budget:
            marker = [next(counter) for _ in range(MARKER)] + header
            if not traj.compact(budget, functools.partial(_same, marker), low_water=low_water):
                break  # the episode ends truncated: what was played is what trains
    parent = CompatSample(index=0, group_index=0)
    tokens, samples = {}, {}
    for mode in ("segment", "turn"):
        out = trajectory_samples(CompatSample, parent, traj, _Codec(), {}, mode=mode)
        tokens[mode], samples[mode] = sum(len(s.tokens) for s in out), len(out)
    return Cost(distinct, tokens, samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=20, help="trajectories per size")
    parser.add_argument("--low-water", type=float, default=0.3, help="swe_context_low_water")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    print(f"low-water {opts.low_water}, {opts.trajectories} trajectories per size; per trajectory, mean")
    print(
        f"{'turns':>5} {'context':>7} {'distinct':>9} {'segment tok':>11} {'samples':>7} "
        f"{'turn tok':>10} {'samples':>7} {'segment/distinct':>16} {'turn/distinct':>13} {'turn/segment':>12}"
    )
    worst, at_50_32k = 0.0, 0.0
    for turns in TURNS:
        for context in CONTEXTS:
            rng = random.Random(f"{opts.seed}-{turns}-{context}")
            costs = [play(rng, turns, context, opts.low_water) for _ in range(opts.trajectories)]
            distinct = statistics.fmean(c.distinct for c in costs)
            seg = statistics.fmean(c.tokens["segment"] for c in costs)
            turn = statistics.fmean(c.tokens["turn"] for c in costs)
            worst = max(worst, seg / distinct)
            if (turns, context) == (50, 32768):
                at_50_32k = turn / seg
            print(
                f"{turns:>5} {context // 1024:>6}k {distinct:>9.0f} {seg:>11.0f} "
                f"{statistics.fmean(c.samples['segment'] for c in costs):>7.1f} {turn:>10.0f} "
                f"{statistics.fmean(c.samples['turn'] for c in costs):>7.1f} {seg / distinct:>16.2f} "
                f"{turn / distinct:>13.2f} {turn / seg:>12.1f}"
            )
    print(f"training tokens: segment/distinct max {worst:.2f}; turn/segment at 50 turns 32k {at_50_32k:.1f}")


if __name__ == "__main__":
    main()
