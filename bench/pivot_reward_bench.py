"""Pivot reward throughput: pivots scored per second on one core (parse the turn + compare).

A synthetic but realistic mix of pivots, each scored against a policy turn with ~150 words of
thinking: bash commands (pipelines, quoting, flags, ``cd`` prefixes, heredocs writing a
reproduction script) matching and not, and editor tool calls whose old / new strings are
10-60 lines of code (equal, whitespace-only different, one token different). Single process,
single thread: the number is per core (slime scores in its rollout process; the profiler too).
Cold runs tokenize every string afresh; the group figure scores 8 turns per pivot (a GRPO group,
or the profiler's K), where the expert's tokens are cached.

    python bench/pivot_reward_bench.py [--pivots 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import Counter

from swe_rl.rewards import argument_match
from swe_rl.rewards.pivot import ExpertAction, PivotRewardConfig, score_turn

THINK = (
    "<think>\n"
    + " ".join(["the", "interleave", "function", "stops", "early", "so", "we", "look"] * 19)
    + "\n</think>\n\n"
)
CODE = [f"    value_{i} = compute(items[{i}], key=key, default=None)  # step {i}" for i in range(80)]
BASH = [
    ("grep -rn 'def interleave' toolz/", 'grep -nr "def interleave" /testbed/toolz/'),
    (
        "cd /testbed && python -m pytest -xq toolz/tests/test_itertoolz.py 2>&1 | tail -n 30",
        "python3 -m pytest -q -x toolz/tests/test_itertoolz.py | tail -30",
    ),
    ("sed -n '120,160p' toolz/itertoolz.py", "sed -n '120,161p' toolz/itertoolz.py"),
    ("find . -name '*.py' -path '*tests*' | xargs grep -l interleave | head", "ls -la toolz/tests"),
    ("git diff HEAD -- toolz/itertoolz.py", "git diff HEAD -- toolz/itertoolz.py"),
]
REPRO = "\n".join(
    ["import toolz", "", *[f"print(list(toolz.interleave([[{i}, 2], [3]])))" for i in range(15)]]
)


def editor_pair(rng: random.Random) -> tuple[dict, dict]:
    n = rng.randint(10, 60)
    start = rng.randint(0, len(CODE) - n)
    old = "\n".join(CODE[start : start + n])
    new = old.replace("default=None", "default=0", 1)
    variant = rng.choice(["same", "whitespace", "token"])
    act_new = {
        "same": new,
        "whitespace": new.replace("    ", "\t"),
        "token": new.replace("compute", "combine", 1),
    }[variant]
    expert = {
        "tool": "str_replace_editor",
        "arguments": {
            "command": "str_replace",
            "path": "/testbed/toolz/x.py",
            "old_str": old,
            "new_str": new,
        },
    }
    turn = (
        THINK
        + "<tool_call>\n"
        + json.dumps(
            {
                "name": "str_replace_editor",
                "arguments": {
                    "command": "str_replace",
                    "path": "toolz/x.py",
                    "old_str": old,
                    "new_str": act_new,
                },
            }
        )
        + "\n</tool_call>"
    )
    return expert, {"text": turn, "harness": "tool_call"}


def bash_pair(rng: random.Random) -> tuple[dict, dict]:
    if rng.random() < 0.2:
        expert_cmd = f"cat <<'EOF' > reproduce.py\n{REPRO}\nEOF\npython reproduce.py"
        policy_cmd = f"cat > /testbed/reproduce.py << 'EOF'\n{REPRO}\nEOF\npython3 reproduce.py"
    else:
        expert_cmd, policy_cmd = rng.choice(BASH)
    return (
        {"tool": "bash", "arguments": {"command": expert_cmd}},
        {"text": THINK + f"Next.\n\n```bash\n{policy_cmd}\n```", "harness": "bash_block"},
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pivots", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    rng = random.Random(0)
    pairs = [(editor_pair if rng.random() < 0.4 else bash_pair)(rng) for _ in range(args.pivots)]
    experts = [ExpertAction.from_any(e) for e, _ in pairs]
    cfg = PivotRewardConfig()
    rates: list[float] = []
    categories: Counter[str] = Counter()
    for r in range(args.repeat):
        argument_match._tokens.cache_clear()  # cold: every pivot's strings tokenized afresh
        started = time.perf_counter()
        for expert, (_, turn) in zip(experts, pairs):
            result = score_turn(turn["text"], expert, cfg, harness=turn["harness"])
            if r == 0:
                categories[result.category.value] += 1
        rates.append(args.pivots / (time.perf_counter() - started))
    # warm: 8 policy turns per pivot, as GRPO groups and the profiler score them (the expert's tokens cached)
    argument_match._tokens.cache_clear()
    subset = list(zip(experts, pairs))[:250]
    started = time.perf_counter()
    for expert, (_, turn) in subset:
        for _ in range(8):
            score_turn(turn["text"], expert, cfg, harness=turn["harness"])
    warm = 8 * len(subset) / (time.perf_counter() - started)
    by_kind: dict[str, float] = {}
    for kind in ("bash_block", "tool_call"):
        of_kind = [(x, t) for x, (_, t) in zip(experts, pairs) if t["harness"] == kind]
        argument_match._tokens.cache_clear()
        started = time.perf_counter()
        for expert, turn in of_kind:
            score_turn(turn["text"], expert, cfg, harness=turn["harness"])
        by_kind[kind] = len(of_kind) / (time.perf_counter() - started)
    print(
        json.dumps(
            {
                "pivots": args.pivots,
                "pivots_per_second": round(statistics.median(rates)),
                "runs": [round(x) for x in rates],
                "group_of_8_turns_per_second": round(warm),
                "by_kind_pivots_per_second": {k: round(v) for k, v in by_kind.items()},
                "categories": dict(categories),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
