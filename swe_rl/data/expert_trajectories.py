"""Expert trajectories read from every input format the pivot builder takes, as one kind of record.

`read_trajectories` walks files and directories: this project's ``traj.json`` (eval runs, saved
rollouts), OpenAI-messages JSONL, and Responses-style JSONL (``responses_create_params``, already one
pivot per row: its ``expected_action`` is kept). Each becomes an `ExpertTrajectory` (messages, tools,
instance, resolved); what cannot be read is counted in ``skip`` by reason, never raised.
`build_pivot_dataset` cuts the trajectories into pivots.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from swe_rl.rewards.pivot import ExpertAction

__all__ = ["ExpertTrajectory", "Message", "message_text", "read_trajectories", "trajectory_of_row"]

Message = dict[str, Any]


class ExpertTrajectory:
    """Messages of one expert episode, with what we know about it."""

    def __init__(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        instance_id: str | None = None,
        resolved: bool | None = None,
        source: str = "",
        expected_action: dict[str, Any] | None = None,
    ) -> None:
        self.messages = messages
        self.tools = tools or None
        self.instance_id = instance_id
        self.resolved = resolved
        self.source = source
        self.expected_action = expected_action
        """Set for an already-cut pivot (Responses rows): the action after ``messages``."""


def message_text(content: Any) -> str:
    """A message's content as text: a string as is, content parts joined, anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else str(p.get("text") or "") for p in content)
    return json.dumps(content)


def _responses_messages(items: list[Any]) -> list[Message]:
    messages: list[Message] = []
    reasoning: str | None = None
    open_turn = False  # the last item belongs to an assistant turn that further calls may join
    for item in items:
        if isinstance(item, str):
            item = {"role": "user", "content": item}
        kind = item.get("type") or "message"
        if kind == "reasoning":
            parts = (item.get("summary") or []) + (item.get("content") or [])
            reasoning = "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)) or reasoning
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"},
            }
            if open_turn and messages and messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            if reasoning:
                messages[-1]["reasoning_content"], reasoning = reasoning, None
            open_turn = True
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": output if isinstance(output, str) else message_text(output),
                }
            )
            open_turn = False
        else:
            message = {"role": item.get("role", "user"), "content": message_text(item.get("content"))}
            if message["role"] == "assistant" and reasoning:
                message["reasoning_content"], reasoning = reasoning, None
            messages.append(message)
            open_turn = message["role"] == "assistant"
    return messages


def _responses_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    out = []
    for tool in tools or []:
        if "function" in tool:
            out.append(tool)
        elif tool.get("type", "function") == "function" and tool.get("name"):
            out.append(
                {
                    "type": "function",
                    "function": {k: tool[k] for k in ("name", "description", "parameters") if k in tool},
                }
            )
    return out or None


def _resolved(row: dict[str, Any]) -> bool | None:
    for holder in (row, row.get("metadata") or {}):
        if isinstance(holder.get("resolved"), bool):
            return holder["resolved"]
    return None


def trajectory_of_row(row: Any, source: str, skip: Counter) -> ExpertTrajectory | None:
    if not isinstance(row, dict):
        skip["bad_row"] += 1
        return None
    meta = row["metadata"] if isinstance(row.get("metadata"), dict) else {}
    instance_id = row.get("instance_id") or meta.get("instance_id")
    if "responses_create_params" in row:
        params = row["responses_create_params"] or {}
        action = row.get("expected_action") or {}
        if action.get("type", "function_call") != "function_call":
            skip["expected_message"] += 1
            return None
        try:
            expected = ExpertAction.from_any(action).model_dump()
        except (ValueError, TypeError):
            skip["bad_tool_call"] += 1
            return None
        items = params.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
        return ExpertTrajectory(
            _responses_messages(items),
            tools=_responses_tools(params.get("tools")),
            instance_id=instance_id,
            resolved=_resolved(row),
            source=source,
            expected_action=expected,
        )
    if isinstance(row.get("messages"), list):
        return ExpertTrajectory(
            row["messages"],
            tools=row.get("tools") or _harness_tools(row.get("harness")),
            instance_id=instance_id,
            resolved=_resolved(row),
            source=source,
        )
    skip["bad_row"] += 1
    return None


def _harness_tools(name: Any) -> list[dict[str, Any]] | None:
    """The tool schemas of a tool-calling harness named in a traj.json (``harness``), else None."""
    from swe_rl.harnesses.registry import harness_tool_schemas

    return harness_tool_schemas(name)


def read_trajectories(
    paths: Iterable[Path], skip: Counter, source_name: str | None = None
) -> Iterator[ExpertTrajectory]:
    """Trajectories of every input; unreadable ones are counted in ``skip``."""
    for path in paths:
        files = sorted(path.rglob("traj.json")) if path.is_dir() else [path]
        for file in files:
            source = source_name or str(file)
            if file.suffix == ".jsonl":
                for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        skip["bad_row"] += 1
                        continue
                    traj = trajectory_of_row(row, source_name or f"{file}:{n}", skip)
                    if traj is not None:
                        yield traj
                continue
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                skip["bad_file"] += 1
                continue
            rows = data if isinstance(data, list) else [data]
            for row in rows:
                traj = trajectory_of_row(row, source, skip)
                if traj is not None:
                    yield traj
