"""Synchronous vs fully-asynchronous rollouts of long-tailed SWE episodes: trajectories per hour, staleness.

    python3 bench/async_bench.py                      # 48 episodes per mode, 8 at a time, batches of 8
    python3 bench/async_bench.py --episodes 96 --turn-seconds 0.1 --train-seconds 2

Both modes play the same episodes through the plugin's real `swe_rl.slime.e2e.generate` (token policy,
bash harness, reward) against the project's SGLang-protocol server (`swe_rl.testing.fake_sglang`), whose
latency is scripted per turn (``--turn-seconds`` per turn), with episode lengths drawn from a long-tailed
distribution (most episodes take a few turns, a few take many: a Pareto draw, capped at ``--max-turns``).
The environment is the in-process one (`swe_rl.agent.local_environment`: a fresh git clone per episode),
the same "fleet" for both modes, at most ``--concurrency`` episodes at once (``swe_max_concurrent``).

- **synchronous** (slime's default rollout, ``train.py``): a rollout of ``--batch`` episodes, wait for the
  slowest, train (``--train-seconds``, nothing generates meanwhile), update the weights, next rollout;
- **fully async** (``slime.rollout.fully_async_rollout`` with ``train_async.py``): ``--concurrency``
  episodes always in flight; each time ``--batch`` trajectories are done the trainer takes them and trains
  while generation goes on; the weight version goes up after each step, and the server answers every turn
  with the version it holds then (``meta_info.weight_version``, recorded per turn by the plugin).

Staleness of a trajectory = the trainer's version when it trains on it minus the oldest version among its
turns. Not modelled: the weight update's own pause (SGLang aborts the in-flight turns; the plugin sends them
again: tests/slime/test_fully_async.py). The last line:

    async: sync T1/h, fully-async T2/h (ratio R), max staleness S
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from swe_rl.agent.local_environment import init_repo, local_env_factory
from swe_rl.grading import GradeResult, GradeStatus
from swe_rl.harnesses.bash_block import SUBMIT_SENTINEL
from swe_rl.slime import e2e, runtime
from swe_rl.slime.samples import CompatSample
from swe_rl.testing.fake_sglang import FakeSGLang, TokenReply
from swe_rl.testing.qwen_tokenizer import build_qwen_tokenizer, load_qwen_tokenizer

SUBMIT = f"echo {SUBMIT_SENTINEL} && git add -A && git diff --cached"
ROW: dict[str, Any] = {
    "instance_id": "bench__async-1",
    "repo": "bench/async",
    "base_commit": "HEAD",
    "problem_statement": "x must be 2",
    "image_name": "unused",
    "FAIL_TO_PASS": ["test_x"],
    "PASS_TO_PASS": [],
}


class Version:
    """The weight version the server holds (bumped by the trainer)."""

    value = 1


def turn_reply(i: int, last: bool, delay: float) -> Any:
    command = SUBMIT if last else ("sed -i 's/1/2/' a.py" if i == 0 else "ls")
    text = f"<think>\nturn {i}\n</think>\n\nNext.\n\n```bash\n{command}\n```"
    return lambda body: TokenReply(text=text, delay=delay, weight_version=str(Version.value))


def lengths(n: int, max_turns: int, seed: int) -> list[int]:
    """Turns per episode: 1 + a Pareto draw (shape 1.2), capped: most short, a long tail."""
    rng = random.Random(seed)
    return [min(max_turns, int(rng.paretovariate(1.2))) for _ in range(n)]


class LocalGrader:
    async def grade(self, instance: Any, patch: str) -> GradeResult:
        resolved = "+x = 2" in patch
        status = GradeStatus.RESOLVED if resolved else GradeStatus.UNRESOLVED
        return GradeResult(instance_id=instance.instance_id, status=status, resolved=resolved)


class NoPrefetch:
    def after(self, instance_id: str) -> None:
        return None


async def episode(args: Any, sglang: FakeSGLang, i: int, turns: int, delay: float) -> list[int]:
    """One episode through the plugin; the weight versions of its turns."""
    key = f"ep-{i}-{time.monotonic_ns()}"
    sglang.keyed[key] = [turn_reply(t, t == turns - 1, delay) for t in range(turns)]
    sample = CompatSample(
        group_index=i, index=i, prompt=ROW["problem_statement"], session_id=key, metadata={"instance": ROW}
    )
    out = await e2e.generate(args, sample, {"max_new_tokens": 256})
    record = out[0].metadata["swe"]
    if record["removed"] or record["steps"] != turns:
        raise RuntimeError(f"episode {i}: {record.get('removed_reason') or record['steps']} ({turns} turns)")
    return [int(v) for v in record["weight_versions"]]


async def synchronous(args: Any, sglang: Any, plan: list[int], opts: Any) -> tuple[float, int]:
    Version.value, stale, start = 1, 0, time.monotonic()
    for b in range(0, len(plan), opts.batch):
        batch = plan[b : b + opts.batch]
        done = await asyncio.gather(
            *(episode(args, sglang, b + k, n, opts.turn_seconds) for k, n in enumerate(batch))
        )
        stale = max([stale] + [Version.value - min(v) for v in done])
        await asyncio.sleep(opts.train_seconds)  # training: nothing generates
        Version.value += 1
    return time.monotonic() - start, stale


async def fully_async(args: Any, sglang: Any, plan: list[int], opts: Any) -> tuple[float, int]:
    Version.value, stale, start = 1, 0, time.monotonic()
    ready: asyncio.Queue[list[int]] = asyncio.Queue()
    todo = iter(enumerate(plan))

    async def worker() -> None:  # the fully-async worker's pool of in-flight episodes
        for i, n in todo:
            await ready.put(await episode(args, sglang, i, n, opts.turn_seconds))

    workers = [asyncio.create_task(worker()) for _ in range(opts.concurrency)]
    trained = 0
    while trained < len(plan):
        batch = [await ready.get() for _ in range(min(opts.batch, len(plan) - trained))]
        stale = max([stale] + [Version.value - min(v) for v in batch])
        await asyncio.sleep(opts.train_seconds)  # training while the workers go on
        Version.value += 1
        trained += len(batch)
    await asyncio.gather(*workers)
    return time.monotonic() - start, stale


async def main_async(opts: Any) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="swe-async-bench-"))
    repo = init_repo(tmp / "src", {"a.py": "x = 1\n"})
    session = SimpleNamespace(env_factory=local_env_factory(repo), client=None, grader=LocalGrader())
    state: Any = runtime.ProcessState  # the fleet: this in-process environment and grader, for both modes
    state.fleet = lambda self, config: session
    state.prefetch_hints = lambda self, args, config: NoPrefetch()
    os.environ["SWE_MAX_CONCURRENT"] = str(opts.concurrency)
    tokenizer_dir = build_qwen_tokenizer()  # cached under ~/.cache/swe-rl
    plan = lengths(opts.episodes, opts.max_turns, opts.seed)
    results = {}
    with FakeSGLang(load_qwen_tokenizer(tokenizer_dir), []) as sglang:
        args = SimpleNamespace(
            sglang_router_ip="127.0.0.1",
            sglang_router_port=sglang.port,
            router_policy="consistent_hashing",  # the routing key picks each episode's script
            hf_checkpoint=str(tokenizer_dir),
            reward_key="score",
            custom_reward_post_process_path=runtime.POST_PROCESS_PATH,
            swe_step_limit=opts.max_turns + 1,
            swe_save_traj_dir=None,
        )
        for name, run in (("sync", synchronous), ("fully-async", fully_async)):
            seconds, stale = await run(args, sglang, plan, opts)
            results[name] = (len(plan) / seconds * 3600, stale, seconds)
            print(json.dumps({"mode": name, "seconds": round(seconds, 2), "max_staleness": stale}))
    await e2e.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    (sync_rate, _, _), (async_rate, stale, _) = results["sync"], results["fully-async"]
    print(
        json.dumps(
            {"episodes": len(plan), "turns": sum(plan), "longest": max(plan), "mean": sum(plan) / len(plan)}
        )
    )
    return (
        f"async: sync {sync_rate:.0f}/h, fully-async {async_rate:.0f}/h "
        f"(ratio {async_rate / sync_rate:.2f}), max staleness {stale}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=8, help="episodes in flight at once (both modes)")
    p.add_argument("--batch", type=int, default=8, help="trajectories per training step")
    p.add_argument("--turn-seconds", type=float, default=0.2, help="the server's latency per turn")
    p.add_argument("--train-seconds", type=float, default=1.0, help="one training step + weight update")
    p.add_argument("--max-turns", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    opts = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    print(asyncio.run(main_async(opts)))


if __name__ == "__main__":
    main()
