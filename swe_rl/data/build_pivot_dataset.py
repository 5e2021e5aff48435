#!/usr/bin/env python3
"""Cut expert trajectories into pivots (stage 1): one slime row per expert decision point.

Inputs (files or directories, mixed freely):

- this project's ``traj.json`` (``eval/eval_swe.py`` runs, or the plugin's saved rollouts);
  a directory is searched for them recursively;
- OpenAI-messages JSONL: rows with ``messages`` (assistant turns with ``tool_calls``, or with a
  bash block in their content), optional ``tools``, ``instance_id``, ``resolved``;
- Responses-style JSONL: rows with ``responses_create_params.input`` (message, reasoning,
  ``function_call``, ``function_call_output`` items), optional ``responses_create_params.tools``,
  and ``expected_action`` (``{"type": "function_call", "name", "arguments"}``): already one pivot each.

Every assistant turn with exactly one action becomes a pivot: the messages before it (thinking
kept), the tools, and the action (a bash block → tool ``bash`` with ``{"command"}``; a tool call
→ its name and decoded arguments). Output rows (format in ``swe_rl/slime/pivot.py``)::

    {"text": "<last user message>",
     "metadata": {"pivot": {"messages", "tools", "expected_action", "harness", "workdir", "instance_id",
                            "step_index", "source", "pivot_id", "resolved"},
                  "data_source": "pivot"}}

    python data/build_pivot_dataset.py output/eval_runs/gold expert.jsonl --only-resolved \\
        --max-context-tokens 24000 --tokenizer /models/Qwen3-30B-A3B-Thinking-2507 --output-dir ~/data/pivots

``--instances FILE`` (a JSONL of task instances: SWE-bench rows, or slime rows with ``metadata.instance`` as
``swe-preprocess`` writes them) adds each pivot's instance as ``metadata.instance``: such rows can be
executed (``swe_pivot_reward: execute``, docs/fork.md); pivots of other instances keep matching.

Writes ``train.jsonl``, ``val.jsonl`` (the last ``--val-size`` pivots, 100 by default, after an
optional ``--shuffle``) and ``stats.json`` (what was kept and why the rest was not).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from swe_rl.data.expert_trajectories import ExpertTrajectory, Message, message_text, read_trajectories
from swe_rl.data.expert_trajectories import (
    trajectory_of_row as trajectory_of_row,  # re-exported: tests cut rows with it
)
from swe_rl.rewards.pivot import ExpertAction, parse_action

_KEEP = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


# --------------------------------------------------------------------------- trajectories → pivots


def _clean(message: Message) -> Message:
    out = {k: message[k] for k in _KEEP if message.get(k) is not None}
    if out.get("role") == "developer":
        out["role"] = "system"
    if not isinstance(out.get("content"), str):
        out["content"] = message_text(out.get("content"))
    return out


def expert_action(message: Message, harness: str) -> tuple[dict[str, Any] | None, str | None]:
    """(action, None) of an assistant message, or (None, why it has none)."""
    calls = message.get("tool_calls") or []
    if calls:
        if len(calls) != 1:
            return None, "multiple_tool_calls"
        try:
            action = ExpertAction.from_any(calls[0])
        except (ValueError, TypeError):
            return None, "bad_tool_call"
        return action.model_dump(), None
    if harness == "tool_call":  # Hermes <tool_call> text (token-mode trajectories), else no action
        parsed = parse_action(message_text(message.get("content")), harness="tool_call")
        if parsed.action is None or parsed.action.error:
            return None, "no_action"  # a final answer or a message to the user
        return {"tool": parsed.action.tool, "arguments": parsed.action.arguments}, None
    parsed = parse_action(message_text(message.get("content")), harness="bash_block")
    if parsed.action is None:
        return None, "no_action"
    return {"tool": parsed.action.tool, "arguments": parsed.action.arguments}, None


def harness_of(traj: ExpertTrajectory) -> str:
    if (
        traj.tools
        or any(m.get("tool_calls") for m in traj.messages)
        or any(m.get("role") == "tool" for m in traj.messages)
    ):
        return "tool_call"
    return "bash_block"


def pivot_id(messages: list[Message], tools: Any, action: dict[str, Any]) -> str:
    blob = json.dumps({"m": messages, "t": tools, "a": action}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def pivots(traj: ExpertTrajectory, *, workdir: str, skip: Counter) -> Iterator[dict[str, Any]]:
    """The pivots of one trajectory (``skip`` counts the assistant turns that are none)."""
    harness = harness_of(traj)
    messages = [_clean(m) for m in traj.messages if isinstance(m, dict) and m.get("role")]
    base = {
        "tools": traj.tools,
        "harness": harness,
        "workdir": workdir,
        "instance_id": traj.instance_id,
        "source": traj.source,
        "resolved": traj.resolved,
    }
    if traj.expected_action is not None:
        if not messages or messages[-1]["role"] == "assistant":
            skip["bad_context"] += 1
            return
        steps = sum(1 for m in messages if m["role"] == "assistant")
        yield {"messages": messages, "expected_action": traj.expected_action, "step_index": steps, **base}
        return
    step = 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        action, reason = expert_action(message, harness)
        if action is None:
            skip[reason or "no_action"] += 1
        elif i == 0:
            skip["no_context"] += 1
        else:
            yield {"messages": messages[:i], "expected_action": action, "step_index": step, **base}
        step += 1


# --------------------------------------------------------------------------- filters, rows


def last_user_text(messages: list[Message]) -> str:
    for m in reversed(messages):
        if m["role"] in ("user", "tool"):
            return m.get("content") or ""
    return ""


def context_chars(pivot: dict[str, Any]) -> int:
    return sum(
        len(m.get("content") or "")
        + len(m.get("reasoning_content") or "")
        + len(json.dumps(m.get("tool_calls") or ""))
        for m in pivot["messages"]
    )


class TokenCounter:
    """Prompt length in ids, rendered as the plugin renders it (chat template, tools)."""

    def __init__(self, tokenizer_path: str, chat_template: str | None) -> None:
        from transformers import AutoTokenizer

        from swe_rl.slime.config import DEFAULT_CHAT_TEMPLATE
        from swe_rl.tokens import ChatRenderer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, trust_remote_code=True)
        self.renderer = ChatRenderer.from_file(chat_template or DEFAULT_CHAT_TEMPLATE)

    def __call__(self, pivot: dict[str, Any]) -> int:
        kwargs = {"tools": pivot["tools"]} if pivot.get("tools") else {}
        text = self.renderer.render(pivot["messages"], add_generation_prompt=True, **kwargs)
        return len(self.tokenizer.encode(text, add_special_tokens=False))


def read_instances(path: Path | None) -> dict[str, dict[str, Any]]:
    """Instance rows by id: a JSONL of instances, or of slime rows holding ``metadata.instance``."""
    out: dict[str, dict[str, Any]] = {}
    if path is None:
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        instance = (
            (row.get("metadata") or {}).get("instance") if isinstance(row.get("metadata"), dict) else None
        )
        instance = instance or row
        if isinstance(instance, dict) and instance.get("instance_id"):
            out[str(instance["instance_id"])] = instance
    return out


def build(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    skip: Counter = Counter()
    instances = read_instances(getattr(args, "instances", None))
    stats: Counter = Counter()
    seen: set[str] = set()
    counter = TokenCounter(args.tokenizer, args.chat_template) if args.max_context_tokens else None
    rows: list[dict[str, Any]] = []
    for traj in read_trajectories(args.inputs, skip, args.source_name):
        stats["trajectories"] += 1
        if args.only_resolved and traj.resolved is not True:
            stats["trajectories_not_resolved"] += 1
            continue
        for pivot in pivots(traj, workdir=args.workdir, skip=skip):
            stats["pivots_found"] += 1
            pivot["pivot_id"] = pivot_id(pivot["messages"], pivot["tools"], pivot["expected_action"])
            if args.skip_submit and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in json.dumps(
                pivot["expected_action"]
            ):
                skip["submit"] += 1
                continue
            if args.dedupe and pivot["pivot_id"] in seen:
                skip["duplicate"] += 1
                continue
            if args.max_action_chars and len(json.dumps(pivot["expected_action"])) > args.max_action_chars:
                skip["action_too_long"] += 1
                continue
            if args.max_context_chars and context_chars(pivot) > args.max_context_chars:
                skip["context_too_long"] += 1
                continue
            if counter is not None:
                pivot["prompt_tokens"] = counter(pivot)
                if pivot["prompt_tokens"] > args.max_context_tokens:
                    skip["context_too_long"] += 1
                    continue
            seen.add(pivot["pivot_id"])
            metadata: dict[str, Any] = {"pivot": pivot, "data_source": args.data_source_name}
            if pivot["instance_id"] in instances:  # executable: the expert's state can be replayed
                metadata["instance"] = instances[pivot["instance_id"]]
                stats["executable"] += 1
            rows.append({"text": last_user_text(pivot["messages"]), "metadata": metadata})
    stats["pivots"] = len(rows)
    return rows, {**stats, "skipped": dict(skip)}


def split(rows: list[dict[str, Any]], val_size: int, shuffle: bool, seed: int) -> tuple[list, list]:
    if shuffle:
        rows = list(rows)
        random.Random(seed).shuffle(rows)
    if val_size <= 0 or len(rows) <= val_size:
        return rows, []
    return rows[:-val_size], rows[-val_size:]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("inputs", nargs="+", type=Path, help="traj.json files, directories of them, JSONL files")
    p.add_argument("--output-dir", type=Path, required=True)
    p.add_argument("--only-resolved", action="store_true", help="keep trajectories marked resolved only")
    p.add_argument("--no-dedupe", dest="dedupe", action="store_false", help="keep identical pivots")
    p.add_argument("--skip-submit", action="store_true", help="leave out the bash-block submit turns")
    p.add_argument("--max-context-chars", type=int, default=None, help="longest context (message characters)")
    p.add_argument(
        "--max-context-tokens",
        type=int,
        default=None,
        help="longest prompt in tokens (needs --tokenizer; rendered with the chat template)",
    )
    p.add_argument("--tokenizer", default=None, help="tokenizer directory for --max-context-tokens")
    p.add_argument(
        "--chat-template",
        default=None,
        help="chat template (default: the shipped configs/chat_template_qwen3_thinking.jinja)",
    )
    p.add_argument(
        "--max-action-chars", type=int, default=None, help="longest expert action (JSON characters)"
    )
    p.add_argument("--val-size", type=int, default=100, help="pivots held out at the end (default 100)")
    p.add_argument("--shuffle", action="store_true", help="shuffle before the split")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--workdir", default="/testbed", help="the expert's working directory (paths are relative to it)"
    )
    p.add_argument(
        "--instances",
        type=Path,
        default=None,
        help="JSONL of the task instances: pivots of these instances can be executed (metadata.instance)",
    )
    p.add_argument("--source-name", default=None, help="source recorded in each pivot (default: the file)")
    p.add_argument("--data-source-name", default="pivot", help="metadata.data_source of the rows")
    args = p.parse_args(argv)
    if args.max_context_tokens and not args.tokenizer:
        p.error("--max-context-tokens needs --tokenizer")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = [str(p) for p in args.inputs if not p.exists()]
    if missing:
        print(f"error: no such input: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows, stats = build(args)
    train, val = split(rows, args.val_size, args.shuffle, args.seed)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.output_dir / "train.jsonl", train)
    write_jsonl(args.output_dir / "val.jsonl", val)
    stats.update(train=len(train), val=len(val))
    (args.output_dir / "stats.json").write_text(json.dumps(stats, indent=1))
    if rows and not val and args.val_size > 0:
        print(
            f"warning: {len(rows)} pivot(s), not more than --val-size {args.val_size}: no validation split",
            file=sys.stderr,
        )
    print(
        f"{stats['trajectories']} trajectories -> {len(rows)} pivots (train {len(train)}, val {len(val)}); "
        f"skipped: {json.dumps(stats['skipped'], sort_keys=True)}"
    )
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
