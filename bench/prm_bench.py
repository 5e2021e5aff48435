"""PRM benchmark: wall time per agent step on the critical path, PRM step judge on vs off, same run.

The agent loop (`run_agent`) plays episodes with the plugin's `SGLangTokenPolicy` (real Qwen
tokenizer and chat template) against a scripted SGLang ``/generate`` that takes
``--policy-delay`` seconds per turn, and an in-process environment whose commands take
``--command-delay`` seconds and print ~2,500 characters. With PRM on, a `StepJudge` gets every
step and asks a scripted OpenAI-compatible judge for ``m`` votes, each taking ``--judge-delay``
seconds: slower than a policy turn, so judgments overlap the following steps. Both stub servers
run in a child process (as the real ones run on other machines), so their work does not share
this process's interpreter. Off and on rounds alternate; ``--episodes`` episodes run at once in
each round.

A step's wall time is the time between the starts of two consecutive policy turns (policy +
command + agent bookkeeping + the observer); the difference on - off also holds what the judge's
requests cost the shared event loop (prompt rendering, HTTP, JSON). Also reported: the time spent
inside `StepJudge.on_step` itself, how long the judge took per step, and how long
`StepJudge.finish` waited at the end of an episode (off the per-step path; in the plugin it
overlaps grading).

Target: PRM on adds under 5% per step with a judge slower than the policy turn.

    python bench/prm_bench.py [--steps 20] [--episodes 4] [--rounds 3] [--judge-delay 0.6] [--policy-delay 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

from swe_rl.agent import AgentConfig, run_agent
from swe_rl.fleet.client import ExecResult
from swe_rl.harnesses import BashBlockHarness
from swe_rl.policies.sglang_tokens import SGLangTokenConfig, SGLangTokenPolicy
from swe_rl.rewards.prm import JudgeClient, PRMConfig, StepJudge
from swe_rl.tasks import TaskInstance
from swe_rl.testing.qwen_tokenizer import CHAT_TEMPLATE_PATH, load_qwen_tokenizer
from swe_rl.tokens import ChatCodec, ChatRenderer

CODE = "".join(
    f"    {i:4d}  def helper_{i}(items, key=None):  # returns sorted(items, key=key)[{i}]\n"
    for i in range(30)
)
THINK = " ".join(["the", "iterator", "is", "exhausted", "so", "interleave", "stops", "early"] * 18)


def turn_text(i: int) -> str:
    return f"<think>\n{THINK} ({i})\n</think>\n\nLook at the next part.\n\n```bash\nsed -n '{i},{i + 40}p' toolz/x.py\n```"


# --------------------------------------------------------------------------- stub servers (child process)


def serve(policy_delay: float, judge_delay: float) -> None:
    """Run the scripted /generate and judge servers until stdin closes; print their ports first."""
    from swe_rl.testing.fake_openai import ChatReply as Judged
    from swe_rl.testing.fake_openai import FakeOpenAI
    from swe_rl.testing.fake_sglang import FakeSGLang, TokenReply

    counter = itertools.count()

    def policy(body: dict) -> TokenReply:
        return TokenReply(text=turn_text(next(counter) % 97), delay=policy_delay)

    def judge(body: dict) -> Judged:
        return Judged("The step reads the code it needs next. \\boxed{+1}", delay=judge_delay)

    with (
        FakeSGLang(load_qwen_tokenizer(), [policy] * 100_000) as sglang,
        FakeOpenAI([judge] * 100_000) as judge_server,
    ):
        print(json.dumps({"generate": f"{sglang.url}/generate", "judge": judge_server.base_url}), flush=True)
        sys.stdin.read()


@contextlib.contextmanager
def stub_servers(policy_delay: float, judge_delay: float) -> Any:
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--policy-delay",
            str(policy_delay),
            "--judge-delay",
            str(judge_delay),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            raise RuntimeError("the stub servers did not start")
        yield json.loads(line)
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


# --------------------------------------------------------------------------- episodes


class SleepEnv:
    """Commands take `delay` seconds and print ~2,500 characters."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0

    async def exec(self, command: str, timeout: float | None = None) -> ExecResult:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return ExecResult(
            returncode=0,
            output=f"# chunk {self.calls}\n{CODE}",
            timed_out=False,
            truncated=False,
            output_bytes=len(CODE),
            duration=self.delay,
        )

    async def diff(self) -> str:
        return ""

    async def write_file(self, path: str, data: Any) -> None: ...

    async def read_file(self, path: str) -> bytes:
        return b""

    async def close(self) -> None: ...


async def episode(
    codec: ChatCodec,
    http: httpx.AsyncClient,
    urls: dict[str, str],
    instance: TaskInstance,
    judge_client: JudgeClient | None,
    steps: int,
    command_delay: float,
) -> dict[str, Any]:
    policy = SGLangTokenPolicy(
        codec, SGLangTokenConfig(url=urls["generate"], sampling_params={"max_new_tokens": 4096}), http=http
    )
    stamps: list[float] = []
    act = policy.act

    async def timed_act(messages: list, **kw: Any) -> Any:
        stamps.append(time.perf_counter())
        return await act(messages, **kw)

    policy.act = timed_act  # type: ignore[method-assign,assignment]  # a timing shim around the bound method

    @contextlib.asynccontextmanager
    async def env_factory(_instance: TaskInstance) -> Any:
        yield SleepEnv(command_delay)

    judge = StepJudge(judge_client, issue=instance.problem_statement) if judge_client else None
    observer_seconds: list[float] = []
    if judge is not None:
        on_step = judge.on_step

        def timed_on_step(*a: Any, **kw: Any) -> None:
            started = time.perf_counter()
            on_step(*a, **kw)
            observer_seconds.append(time.perf_counter() - started)

        judge.on_step = timed_on_step  # type: ignore[method-assign]
    result = await run_agent(
        instance,
        policy,
        BashBlockHarness(),
        env_factory=env_factory,
        config=AgentConfig(step_limit=steps, deadline=None),
        on_step=judge,
    )
    assert len(result.steps) == steps, result.error
    ended = time.perf_counter()
    out: dict[str, Any] = {"steps": [b - a for a, b in itertools.pairwise([*stamps, ended])][:-1]}
    if judge is not None:
        prm = await judge.finish(timeout=600)
        assert prm.scored == steps, prm
        out.update(
            finish_wait=prm.wait_seconds,
            judge_seconds=[j.seconds for j in prm.steps],
            observer_seconds=observer_seconds,
        )
    return out


async def run(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    codec = ChatCodec(load_qwen_tokenizer(), ChatRenderer.from_file(CHAT_TEMPLATE_PATH))
    instance = TaskInstance(
        instance_id="bench__toolz-1",
        repo="pytoolz/toolz",
        image="none",
        problem_statement="interleave stops at the shortest input.\n" * 20,
    )
    judge_client = JudgeClient(PRMConfig(enable=True, url=urls["judge"], m=args.m))
    stats: dict[str, Any] = {
        "off": [],
        "on": [],
        "finish_wait": [],
        "judge_seconds": [],
        "observer_seconds": [],
    }
    async with httpx.AsyncClient(timeout=120) as http:
        await episode(codec, http, urls, instance, judge_client, 2, args.command_delay)  # warm-up
        for _ in range(args.rounds):
            for mode in ("off", "on"):
                results = await asyncio.gather(
                    *(
                        episode(
                            codec,
                            http,
                            urls,
                            instance,
                            judge_client if mode == "on" else None,
                            args.steps,
                            args.command_delay,
                        )
                        for _ in range(args.episodes)
                    )
                )
                for r in results:
                    stats[mode].extend(r["steps"])
                    stats["finish_wait"].extend([r["finish_wait"]] if "finish_wait" in r else [])
                    stats["judge_seconds"].extend(r.get("judge_seconds", []))
                    stats["observer_seconds"].extend(r.get("observer_seconds", []))
    await judge_client.aclose()
    return stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20, help="agent steps per episode")
    p.add_argument("--episodes", type=int, default=4, help="episodes at once in a round")
    p.add_argument("--rounds", type=int, default=3, help="off/on rounds, alternating")
    p.add_argument("--m", type=int, default=3, help="judge votes per step")
    p.add_argument("--policy-delay", type=float, default=0.2, help="seconds per policy turn")
    p.add_argument("--judge-delay", type=float, default=0.6, help="seconds per judge vote")
    p.add_argument("--command-delay", type=float, default=0.05, help="seconds per command")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.policy_delay, args.judge_delay)
        return 0
    with stub_servers(args.policy_delay, args.judge_delay) as urls:
        stats = asyncio.run(run(args, urls))
    off, on = statistics.median(stats["off"]) * 1000, statistics.median(stats["on"]) * 1000
    mean_off, mean_on = statistics.fmean(stats["off"]) * 1000, statistics.fmean(stats["on"]) * 1000
    print(
        f"policy turn {args.policy_delay * 1000:.0f} ms, command {args.command_delay * 1000:.0f} ms, "
        f"judge vote {args.judge_delay * 1000:.0f} ms x m={args.m}; {args.episodes} episodes at once x "
        f"{args.steps} steps x {args.rounds} rounds per mode"
    )
    print(f"{'':>22} {'PRM off':>9} {'PRM on':>9} {'on/off':>8} {'added':>9}")
    print(f"{'step wall ms, median':>22} {off:>9.1f} {on:>9.1f} {on / off:>8.3f} {on - off:>+9.1f}")
    print(
        f"{'step wall ms, mean':>22} {mean_off:>9.1f} {mean_on:>9.1f} {mean_on / mean_off:>8.3f} "
        f"{mean_on - mean_off:>+9.1f}"
    )
    print(
        f"StepJudge.on_step in the loop: median {statistics.median(stats['observer_seconds']) * 1e6:.0f} us, "
        f"max {max(stats['observer_seconds']) * 1e6:.0f} us per step"
    )
    print(
        f"judge time per step (all votes): median {statistics.median(stats['judge_seconds']) * 1000:.0f} ms; "
        f"end-of-episode wait for the last judgments: median {statistics.median(stats['finish_wait']) * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
