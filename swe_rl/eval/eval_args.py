"""The command line of `swe-eval` (eval/eval_swe.py): its arguments, instance selection and the policy they name.

Kept apart from the run loop in eval_swe.py so that each reads on its own.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    """Every option with its help text (tests/eval/test_eval_args.py walks them)."""
    p = argparse.ArgumentParser(description="Evaluate a policy on SWE task instances (no training loop)")
    p.add_argument(
        "--data",
        required=True,
        help="instances: .jsonl / .json / .parquet (SWE-bench, SWE-Gym, "
        "R2E-Gym, fixture or slime rows) or a dataset name when `datasets` and a hub are reachable",
    )
    p.add_argument("--split", default="test", help="split, for a dataset name")
    p.add_argument(
        "--output-dir",
        required=True,
        type=Path,
        help="run folder: results.jsonl, summary.json, report.html and per-instance artifacts "
        "(an existing run there resumes)",
    )
    p.add_argument(
        "--policy",
        choices=["chat", "gold", "noop"],
        default=None,
        help="chat: the model behind --api-base; gold: plays the gold patch; noop: submits nothing "
        "(default: chat, or gold/noop when --model is one of those)",
    )
    p.add_argument("--model", default="gold", help="litellm model name, e.g. openai/Qwen/Qwen3-32B")
    p.add_argument("--api-base", default=os.environ.get("SWE_API_BASE"), help="OpenAI-compatible base URL")
    p.add_argument(
        "--api-key", default=os.environ.get("SWE_API_KEY", "EMPTY"), help="API key (default: SWE_API_KEY)"
    )
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default: the endpoint's)")
    p.add_argument("--top-k", type=int, default=None, help="top-k sampling (default: the endpoint's)")
    p.add_argument("--max-tokens", type=int, default=8192, help="max new tokens per policy turn")
    p.add_argument("--max-concurrent", type=int, default=4, help="instances run at once")
    p.add_argument(
        "--limit",
        "--max-instances",
        dest="max_instances",
        type=int,
        default=None,
        metavar="N",
        help="run the first N instances only (of those --instance-ids selects)",
    )
    p.add_argument(
        "--prefetch-ahead", type=int, default=8, help="images of the next N instances pulled ahead"
    )
    p.add_argument("--instance-ids", default=None, help="comma-separated ids, or @file with one id per line")
    p.add_argument(
        "--harness",
        default="bash_block",
        help="agent harness: bash_block (default), codeact, codex or opencode (tool calling); "
        "aliases (bash-block, openhands) are recorded under the canonical name",
    )
    p.add_argument(
        "--tool-call-check",
        type=int,
        default=3,
        metavar="N",
        help="warn when the first N episodes of a tool harness never produced a tool call "
        "(an endpoint ignoring `tools`); 0 turns the check off",
    )
    p.add_argument("--harness-config", default=None, help="YAML of the harness's prompts and limits")
    p.add_argument("--step-limit", type=int, default=50, help="policy turns per episode")
    p.add_argument(
        "--command-timeout", type=float, default=180.0, help="seconds per command in the container"
    )
    p.add_argument("--deadline", type=float, default=3600.0, help="seconds per episode")
    p.add_argument("--eval-timeout", type=float, default=1800.0, help="seconds for the test run when grading")
    p.add_argument(
        "--no-integrity",
        action="store_true",
        help="grade the full patch only (no neutralising of test tampering, no integrity verdict)",
    )
    p.add_argument(
        "--no-official-verdict",
        action="store_true",
        help="skip the second (full-patch) grading run when something was neutralised",
    )
    p.add_argument(
        "--no-git-hygiene",
        action="store_true",
        help="leave the image's git history (remote refs, tags, future objects) in agent containers",
    )
    p.add_argument("--image-template", default=None, help="image name template or registry prefix override")
    p.add_argument(
        "--grading-network",
        default=None,
        help="network of grading containers: none, default, or a name in the nodes' SWE_EXEC_NETWORKS "
        "(default: the instance row's `network`, else none)",
    )
    p.add_argument(
        "--agent-network",
        default=None,
        help="network of the agent's containers (same values; default: the row's `network`, else none)",
    )
    p.add_argument(
        "--certified-only",
        default=None,
        metavar="LEDGER",
        help="run only instances certified in this ledger (eval/certify.py); flaky-only failures are marked",
    )
    p.add_argument("--no-resume", action="store_true", help="run every instance again")
    p.add_argument(
        "--no-endpoint-check",
        action="store_true",
        help="skip the check of --api-base before the first instance (it answers, serves --model, takes "
        "the key; docs/eval.md)",
    )
    p.add_argument(
        "--max-env-error-rate",
        type=float,
        default=0.0,
        metavar="RATE",
        help="exit 3 when more than this fraction of the instances ended in env_error (an outage of the "
        "fleet or the model endpoint; default 0: any)",
    )
    p.add_argument(
        "--local-fleet",
        action="store_true",
        help="start exec + pool servers on loopback for this run (else use SWE_POOL_URL)",
    )
    p.add_argument("--exec-servers", type=int, default=1, help="exec servers of the local fleet")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress output (else a bar on a terminal, one plain line per instance otherwise)",
    )
    p.add_argument(
        "--log-level",
        default=os.environ.get("SWE_LOG_LEVEL", "WARNING"),
        help="DEBUG, INFO, WARNING (default, or SWE_LOG_LEVEL), ERROR",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if args.policy is None:
        args.policy = args.model if args.model in ("gold", "noop") else "chat"
    if args.policy == "chat" and not args.api_base:
        p.error("--policy chat needs --api-base (or SWE_API_BASE)")
    if not 0.0 <= args.max_env_error_rate <= 1.0:
        p.error("--max-env-error-rate is a fraction between 0 and 1")
    from swe_rl.harnesses.registry import canonical_harness_name

    try:
        args.harness = canonical_harness_name(args.harness)
    except ValueError as exc:
        p.error(str(exc))
    return args


def instance_ids(spec: str | None) -> list[str] | None:
    if not spec:
        return None
    if spec.startswith("@"):
        return [line.strip() for line in Path(spec[1:]).read_text().splitlines() if line.strip()]
    return [s.strip() for s in spec.split(",") if s.strip()]


def make_policy(args: argparse.Namespace) -> Any:
    if args.policy == "gold":
        from swe_rl.policies.gold import GoldPolicy

        return GoldPolicy()
    if args.policy == "noop":
        from swe_rl.policies.noop import NoopPolicy

        return NoopPolicy()
    from swe_rl.policies.openai_chat import OpenAIChatConfig, OpenAIChatPolicy

    return OpenAIChatPolicy(
        OpenAIChatConfig(
            model=args.model,
            api_base=args.api_base,
            api_key=args.api_key,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            max_tokens=args.max_tokens,
        )
    )
