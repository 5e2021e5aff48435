"""Plugin benchmark: token bookkeeping per agent step, against re-tokenizing the history each step.

Two measurements, same run, real Qwen tokenizer and the shipped chat template, turns of a
realistic size (a ~150-word think block + a command; ~2,500-character command outputs):

1. context cost per step at 25, 50, 100 and 200 turns: what `ChatCodec` + `TokenTrajectory`
   do per step (render and tokenize the new observation, append the sampled ids) against the
   naive way (render the whole conversation and tokenize it again); plus one head+tail
   compaction at that length (what a step costs when the context is full).
2. plugin overhead per step, excluding model and command time: `run_agent` with
   `SGLangTokenPolicy` against an in-process /generate (httpx MockTransport answering at once)
   and an environment whose commands return at once. It includes the harness, the agent loop,
   the token bookkeeping, and JSON-encoding ``input_ids`` for the HTTP call (which does grow
   with the context: /generate takes the whole context each call).

Target: per-step context cost grows with the new turn's length, not with the history's.

    python bench/plugin_bench.py [--turns 25 50 100 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import statistics
import time
from typing import Any

import httpx

from swe_rl.agent import AgentConfig, run_agent
from swe_rl.fleet.client import ExecResult
from swe_rl.harnesses import BashBlockHarness
from swe_rl.policies.sglang_tokens import SGLangTokenConfig, SGLangTokenPolicy
from swe_rl.tasks import TaskInstance
from swe_rl.testing.qwen_tokenizer import CHAT_TEMPLATE_PATH, load_qwen_tokenizer
from swe_rl.tokens import ChatCodec, ChatRenderer, TokenTrajectory

WORDS = [
    "the",
    "function",
    "returns",
    "early",
    "when",
    "the",
    "iterator",
    "is",
    "exhausted",
    "so",
    "the",
    "remaining",
    "inputs",
    "are",
    "never",
    "visited",
    "and",
    "the",
    "interleave",
    "stops",
    "after",
    "the",
    "shortest",
    "one",
    "which",
    "explains",
    "the",
    "bug",
]
CODE = "".join(
    f"    {i:4d}  def helper_{i}(items, key=None):  # returns sorted(items, key=key)[{i}]\n"
    for i in range(30)
)


def reasoning(i: int, words: int = 150) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))


def command(i: int) -> str:
    return f"sed -n '{i},{i + 40}p' toolz/itertoolz.py | grep -n 'def ' | head -30"


def turn_text(i: int) -> str:
    return f"<think>\n{reasoning(i)}\n</think>\n\nLook at the next part.\n\n```bash\n{command(i)}\n```"


def output(i: int) -> str:
    return f"# chunk {i}\n{CODE}"


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


# --------------------------------------------------------------------------- 1. context cost


def context_cost(
    codec: ChatCodec, harness: BashBlockHarness, instance: TaskInstance, turns: list[int], repeat: int
) -> list[dict[str, Any]]:
    rows = []
    for n in turns:
        messages = harness.initial_messages(instance, step_limit=n)
        traj = TokenTrajectory(codec.prompt_ids(messages), codec.header_ids)
        incremental: list[float] = []
        for i in range(n):
            ids = codec.encode(turn_text(i)) + [151645]  # the sampled ids (given by SGLang in a real run)
            messages.append(
                {
                    "role": "assistant",
                    "content": "Look at the next part.\n\n```bash\n" + command(i) + "\n```",
                    "reasoning_content": reasoning(i),
                }
            )
            new = [{"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{output(i)}</output>"}]
            started = time.perf_counter()
            traj.add_turn(ids, [-0.1] * len(ids), "stop")
            traj.add_observation(codec.observation_ids(messages[-1], new, ids))
            incremental.append(time.perf_counter() - started)
            messages.extend(new)
        assert traj.context == codec.encode(codec.render(messages, add_generation_prompt=True))  # same ids
        full: list[float] = []
        for _ in range(repeat):
            started = time.perf_counter()
            codec.encode(codec.render(messages, add_generation_prompt=True))
            full.append(time.perf_counter() - started)
        compact: list[float] = []
        budget = min(32768 - 4096, len(traj.context) // 2)
        for _ in range(repeat):
            copy = TokenTrajectory(traj.prompt_ids, traj.header_ids)
            copy.turns = traj.turns
            started = time.perf_counter()
            assert copy.compact(budget, lambda k: codec.marker_ids(f"[... {k} earlier turn(s) omitted ...]"))
            compact.append(time.perf_counter() - started)
        inc = statistics.median(incremental[-repeat:])
        rows.append(
            {
                "turns": n,
                "context_tokens": len(traj.context),
                "incremental_ms": ms(inc),
                "full_retokenize_ms": ms(statistics.median(full)),
                "ratio": round(statistics.median(full) / inc, 1),
                "compaction_ms": ms(statistics.median(compact)),
                "compacted_to": budget,
            }
        )
    return rows


# --------------------------------------------------------------------------- 2. plugin overhead


class InstantEnv:
    """Commands return at once with a fixed-size output."""

    def __init__(self) -> None:
        self.calls = 0

    async def exec(self, command: str, timeout: float | None = None) -> ExecResult:
        self.calls += 1
        return ExecResult(
            returncode=0,
            output=output(self.calls),
            timed_out=False,
            truncated=False,
            output_bytes=len(CODE),
            duration=0.0,
        )

    async def diff(self) -> str:
        return ""

    async def write_file(self, path: str, data: Any) -> None: ...

    async def read_file(self, path: str) -> bytes:
        return b""

    async def close(self) -> None: ...


def instant_generate(codec: ChatCodec) -> httpx.MockTransport:
    cache: dict[int, list[int]] = {}

    calls = [0]

    def handler(
        request: httpx.Request,
    ) -> httpx.Response:  # does not parse the request: server time is not ours
        calls[0] += 1
        i = calls[0] % 97
        ids = cache.setdefault(i, codec.encode(turn_text(i)) + [151645])
        meta = {
            "finish_reason": {"type": "stop", "matched": 151645},
            "prompt_tokens": 0,
            "completion_tokens": len(ids),
            "output_token_logprobs": [[-0.1, t, None] for t in ids],
        }
        return httpx.Response(200, json={"text": "", "meta_info": meta})

    return httpx.MockTransport(handler)


async def plugin_overhead(
    codec: ChatCodec, instance: TaskInstance, turns: list[int], repeat: int
) -> list[dict]:
    rows = []
    for n in turns:
        async with httpx.AsyncClient(transport=instant_generate(codec)) as http:
            policy = SGLangTokenPolicy(
                codec,
                SGLangTokenConfig(url="http://sglang/generate", sampling_params={"max_new_tokens": 4096}),
                http=http,
            )
            stamps: list[float] = []
            act = policy.act

            async def timed_act(messages: list, stamps: list = stamps, act: Any = act, **kw: Any) -> Any:
                stamps.append(time.perf_counter())
                return await act(messages, **kw)

            policy.act = timed_act  # type: ignore[method-assign,assignment]  # a timing shim around the bound method

            @contextlib.asynccontextmanager
            async def env_factory(_instance: TaskInstance) -> Any:
                yield InstantEnv()

            result = await run_agent(
                instance,
                policy,
                BashBlockHarness(),
                env_factory=env_factory,
                config=AgentConfig(step_limit=n, deadline=None),
            )
            assert len(result.steps) == n, result.error
        steps = [b - a for a, b in itertools.pairwise(stamps)]
        assert policy.trajectory is not None
        rows.append(
            {
                "turns": n,
                "context_tokens": len(policy.trajectory.context),
                "step_ms_first": ms(statistics.median(steps[:repeat])),
                "step_ms_last": ms(statistics.median(steps[-repeat:])),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--turns", type=int, nargs="+", default=[25, 50, 100, 200])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    tokenizer = load_qwen_tokenizer()
    codec = ChatCodec(tokenizer, ChatRenderer.from_file(CHAT_TEMPLATE_PATH))
    harness = BashBlockHarness()
    instance = TaskInstance(
        instance_id="bench__toolz-1",
        repo="pytoolz/toolz",
        image="none",
        problem_statement="interleave stops at the shortest input.\n" * 20,
    )
    print("1. context cost per step (median of the last steps) vs re-tokenizing the history, same run")
    print(
        f"{'turns':>6} {'context':>8} {'incremental ms':>15} {'full ms':>9} {'ratio':>7} {'compaction ms':>14}"
    )
    for r in context_cost(codec, harness, instance, args.turns, args.repeat):
        print(
            f"{r['turns']:>6} {r['context_tokens']:>8} {r['incremental_ms']:>15} {r['full_retokenize_ms']:>9} "
            f"{r['ratio']:>6}x {r['compaction_ms']:>14}"
        )
    print(
        "\n2. plugin overhead per step, no model and no command time (agent loop + harness + tokens + JSON)"
    )
    print(
        f"{'turns':>6} {'context':>8} {'first steps ms':>15} {'last steps ms':>14} {'of which JSON ms':>17}"
    )
    for r in asyncio.run(plugin_overhead(codec, instance, args.turns, args.repeat)):
        ids = list(range(r["context_tokens"]))
        started = time.perf_counter()
        json.dumps({"input_ids": ids}).encode()
        encode = ms(time.perf_counter() - started)
        print(
            f"{r['turns']:>6} {r['context_tokens']:>8} {r['step_ms_first']:>15} {r['step_ms_last']:>14} {encode:>17}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
