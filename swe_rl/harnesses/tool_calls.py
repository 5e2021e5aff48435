"""Tool calls in both transports: Hermes ``<tool_call>`` text (token mode) and OpenAI ``tool_calls`` (chat mode).

    calls = calls_from_text('<tool_call>\\n{"name": "bash", "arguments": {"command": "ls"}}\\n</tool_call>')
    calls = calls_from_openai(turn.tool_calls)          # [{"id", "type", "function": {"name", "arguments"}}]
    text = render_hermes(calls)                         # back into assistant text (Qwen3 chat template's form)
    message["tool_calls"] = to_openai(calls)            # back into an OpenAI assistant message

Both parsers raise `ToolCallError` with an exact reason (unclosed tag, not JSON, no name,
arguments not an object, ...) and the ids of the calls read so far, so a harness can answer
every call of a chat turn. Thinking (``<think>…</think>``) is never searched for calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from swe_rl.harnesses.bash_block import strip_thinking

__all__ = [
    "ToolCall",
    "ToolCallError",
    "calls_from_openai",
    "calls_from_text",
    "normalize_openai_calls",
    "render_hermes",
    "to_openai",
]

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call: the tool's name, its arguments, and the id its result answers."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = "call_0"


class ToolCallError(ValueError):
    """A call that cannot be read; ``call_ids`` are the ids of the turn's calls (chat mode) to answer."""

    def __init__(self, reason: str, call_ids: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.call_ids = list(call_ids or [])


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ToolCallError(
                f"{where}: its arguments are not valid JSON ({exc.msg} at char {exc.pos})"
            ) from None
    if not isinstance(raw, dict):
        raise ToolCallError(f"{where}: its arguments must be a JSON object, not {type(raw).__name__}")
    return raw


def calls_from_text(text: str, *, strip_think: bool = True) -> list[ToolCall]:
    """Every Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` of an assistant text, in order."""
    if strip_think:
        text = strip_thinking(text)
    calls: list[ToolCall] = []
    for i, m in enumerate(_CALL.finditer(text)):
        where = f"tool call {i + 1}"
        body = m.group(1).strip()
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ToolCallError(
                f"{where} is not valid JSON ({exc.msg} at char {exc.pos}): {body[:200]!r}"
            ) from None
        if not isinstance(data, dict):
            raise ToolCallError(f'{where} must be a JSON object with "name" and "arguments"')
        name = data.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ToolCallError(f'{where} has no "name" string')
        calls.append(
            ToolCall(
                name=name.strip(),
                arguments=_arguments(data.get("arguments"), f"{where} ({name})"),
                call_id=f"call_{i}",
            )
        )
    rest = _CALL.sub("", text)
    if OPEN in rest:
        raise ToolCallError(f"a {OPEN} is not closed by {CLOSE} (was the answer cut off?)")
    if CLOSE in rest:
        raise ToolCallError(f"a {CLOSE} has no {OPEN} before it")
    return calls


def normalize_openai_calls(tool_calls: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """OpenAI tool calls with an id on each (``call_<i>`` when the endpoint gave none) and string arguments."""
    out = []
    for i, tc in enumerate(tool_calls or []):
        fn = dict(tc.get("function") or {})
        args = fn.get("arguments")
        if args is not None and not isinstance(args, str):
            fn["arguments"] = json.dumps(args, ensure_ascii=False)
        out.append(
            {
                "id": tc.get("id") or f"call_{i}",
                "type": tc.get("type") or "function",
                "function": {"name": fn.get("name"), "arguments": fn.get("arguments") or "{}"},
            }
        )
    return out


def calls_from_openai(tool_calls: list[dict[str, Any]]) -> list[ToolCall]:
    """`ToolCall` s of an OpenAI message's ``tool_calls`` (arguments are a JSON string or an object)."""
    normalized = normalize_openai_calls(tool_calls)
    ids = [tc["id"] for tc in normalized]
    calls = []
    for i, tc in enumerate(normalized):
        name = tc["function"].get("name")
        where = f"tool call {i + 1}"
        if not isinstance(name, str) or not name.strip():
            raise ToolCallError(f"{where} has no function name", ids)
        try:
            args = _arguments(tc["function"].get("arguments"), f"{where} ({name})")
        except ToolCallError as exc:
            raise ToolCallError(exc.reason, ids) from None
        calls.append(ToolCall(name=name.strip(), arguments=args, call_id=tc["id"]))
    return calls


def render_hermes(calls: list[ToolCall]) -> str:
    """The calls as the Qwen3 chat template writes them (one ``<tool_call>`` block per call)."""
    return "\n".join(
        f'{OPEN}\n{{"name": "{c.name}", "arguments": {json.dumps(c.arguments, ensure_ascii=False)}}}\n{CLOSE}'
        for c in calls
    )


def to_openai(calls: list[ToolCall]) -> list[dict[str, Any]]:
    """The calls as an OpenAI assistant message's ``tool_calls``."""
    return [
        {
            "id": c.call_id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in calls
    ]
