"""The base of tool-calling harnesses (CodeAct, Codex, OpenCode): prompts, tool schemas, parsing of
tool calls, running them in the environment, and tool messages back.

    harness = CodeActHarness()                 # or CodexHarness(), OpenCodeHarness()
    harness.tool_schemas                       # OpenAI tools: the chat endpoint / chat template gets them
    actions = harness.parse(turn)              # OpenAI tool_calls (chat mode) or Hermes <tool_call> text (tokens)
    result = await harness.run_action(env, actions[0], timeout=180)   # the agent calls it (a ToolHarness)
    harness.observation_messages(actions[0], result, remaining_steps=9)  # [{"role": "tool", ...}]

A turn may hold several calls (run in order). A turn without a call, a call that does not parse,
an unknown tool or arguments that do not fit the tool's schema is a `FormatError` (the agent counts
it); in chat mode its feedback answers every call id, as OpenAI-style endpoints require. A tool
that fails for a reason the policy caused (file not found, old string not unique, path outside the
repository, ...) is not a format error: its message is the observation. Subclasses define
``name``, ``default_config`` and ``_tools()``; prompts live in ``configs/harness_<name>.yaml``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import jinja2
import yaml
from pydantic import BaseModel, ConfigDict

from swe_rl.agent.errors import FormatError
from swe_rl.agent.protocols import (
    Action,
    CommandResult,
    Environment,
    Message,
    PolicyTurn,
)
from swe_rl.fleet.client import ExecResult, FleetError
from swe_rl.harnesses.bash_block import (
    SUBMIT_SENTINEL,
    reminder,
    sentinel_submission,
    truncate_middle,
)
from swe_rl.harnesses.tool_calls import (
    ToolCall,
    ToolCallError,
    calls_from_openai,
    calls_from_text,
    normalize_openai_calls,
)
from swe_rl.harnesses.tools import ToolError, ToolOutput, Workspace
from swe_rl.tasks.instance import TaskInstance

__all__ = ["Tool", "ToolCallingHarness", "ToolHarnessConfig", "check_arguments"]

log = logging.getLogger(__name__)

ToolRun = Callable[[Workspace, dict[str, Any], float | None], Awaitable[ToolOutput]]
"""A tool's body: (workspace, checked arguments, the command time limit) → output; raises ToolError."""


@dataclass(frozen=True)
class Tool:
    """One tool: its OpenAI schema and its body."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolRun
    shell: bool = False
    """Runs a command whose output may carry the submit sentinel."""
    finish: bool = False
    """Calling it ends the episode (its ``message`` is the submission)."""

    @property
    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolHarnessConfig(BaseModel):
    """Prompts and limits of a tool-calling harness (its YAML in configs/)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    system_template: str
    """System prompt (Jinja2; variables: tools, sentinel, submit_command, step_limit, workdir)."""
    instance_template: str
    """First user message (Jinja2; plus instance, problem_statement)."""
    format_error_template: str
    """Feedback for a turn without a valid tool call (Jinja2; reason, tools, submit_command, reminder)."""
    remaining_steps_template: str
    """Appended to observations when few turns remain (Jinja2; remaining_steps)."""
    max_observation_chars: int = 10000
    """Longer tool output keeps its head and tail around a marker."""
    remind_at_steps: int = 3
    """Show the remaining-steps reminder once this few turns (or fewer) remain; 0 never."""
    keep_reasoning: bool = True
    """Keep the turn's separate thinking (``reasoning_content``) in the history."""
    max_calls_per_turn: int = 8
    """More calls than this in one turn is a format error."""
    sentinel: str = SUBMIT_SENTINEL
    """First output line of the shell tool that submits (harnesses without a finish tool)."""
    submit_command: str = f"echo {SUBMIT_SENTINEL} && git add -A && git diff --cached"
    """The command the prompt tells the agent to submit with (harnesses without a finish tool)."""

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> ToolHarnessConfig:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        return cls(**{**data, **overrides})


_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list}


def _coerce(value: Any, spec: dict[str, Any], where: str) -> Any:
    kind = spec.get("type")
    if kind == "integer":
        if isinstance(value, bool):
            raise ToolCallError(f"{where} must be an integer, not {value!r}")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value.strip())
        if not isinstance(value, int):
            raise ToolCallError(f"{where} must be an integer, not {value!r}")
    elif kind == "number":
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ToolCallError(f"{where} must be a number, not {value!r}")
    elif kind == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    elif kind in _TYPES and not isinstance(value, _TYPES[kind]):
        raise ToolCallError(
            f"{where} must be a{'n' if kind[0] in 'aeiou' else ''} {kind}, not {type(value).__name__}"
        )
    if kind == "array" and "items" in spec:
        value = [_coerce(v, spec["items"], f"{where}[{i}]") for i, v in enumerate(value)]
    if "enum" in spec and value not in spec["enum"]:
        raise ToolCallError(f"{where} must be one of {', '.join(map(repr, spec['enum']))}, not {value!r}")
    return value


def check_arguments(tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments checked against the tool's schema (numbers in strings accepted); ToolCallError otherwise."""
    props: dict[str, Any] = tool.parameters.get("properties", {})
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        raise ToolCallError(
            f"{tool.name} does not take {', '.join(map(repr, unknown))} "
            f"(its arguments: {', '.join(props) or 'none'})"
        )
    missing = [k for k in tool.parameters.get("required", []) if arguments.get(k) is None]
    if missing:
        raise ToolCallError(f"{tool.name} needs {', '.join(map(repr, missing))}")
    return {k: _coerce(v, props[k], f"{tool.name}: {k!r}") for k, v in arguments.items() if v is not None}


class ToolCallingHarness:
    """Shared by the tool-calling harnesses (each one a `swe_rl.agent.protocols.ToolHarness`); safe to share
    across concurrent episodes (per-episode state, e.g. undo history, lives in the environment's `Workspace`)."""

    name: ClassVar[str] = "tool"
    default_config: ClassVar[Path]

    def __init__(self, config: ToolHarnessConfig | None = None) -> None:
        self.config = config or ToolHarnessConfig.from_yaml(self.default_config)
        self._jinja = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
        self.tools: dict[str, Tool] = {t.name: t for t in self._tools()}

    def _tools(self) -> list[Tool]:
        raise NotImplementedError

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function schemas (sent to chat endpoints, rendered by the chat template)."""
        return [t.schema for t in self.tools.values()]

    @cached_property
    def _templates(self) -> dict[str, jinja2.Template]:
        return {
            n: self._jinja.from_string(getattr(self.config, f"{n}_template"))
            for n in ("system", "instance", "format_error", "remaining_steps")
        }

    def render(self, name: str, **variables: Any) -> str:
        return self._templates[name].render(**variables).strip("\n")

    def _common(self, **variables: Any) -> dict[str, Any]:
        return {
            "tools": list(self.tools),
            "sentinel": self.config.sentinel,
            "submit_command": self.config.submit_command,
            **variables,
        }

    # ------------------------------------------------------------------ prompts

    def initial_messages(self, instance: TaskInstance, **variables: Any) -> list[Message]:
        common = self._common(
            step_limit=variables.pop("step_limit", "many"), workdir=instance.workdir, **variables
        )
        return [
            {"role": "system", "content": self.render("system", **common)},
            {
                "role": "user",
                "content": self.render(
                    "instance", instance=instance, problem_statement=instance.problem_statement, **common
                ),
            },
        ]

    def assistant_message(self, turn: PolicyTurn) -> Message:
        message: Message = {"role": "assistant", "content": turn.text}
        if turn.reasoning and self.config.keep_reasoning:
            message["reasoning_content"] = turn.reasoning
        if turn.tool_calls:
            message["tool_calls"] = normalize_openai_calls(turn.tool_calls)
        return message

    # ------------------------------------------------------------------ parsing

    def parse(self, turn: PolicyTurn) -> list[Action]:
        try:
            calls = calls_from_openai(turn.tool_calls) if turn.tool_calls else calls_from_text(turn.text)
        except ToolCallError as exc:
            raise FormatError(exc.reason, call_ids=exc.call_ids, n_calls=len(exc.call_ids)) from None
        ids = [c.call_id for c in calls] if turn.tool_calls else []
        if not calls:
            reason = "it has no tool call"
            if turn.finish_reason == "length":
                reason += " (the answer was cut off at the length limit; think more briefly)"
            raise FormatError(reason, call_ids=[], n_calls=0)
        if len(calls) > self.config.max_calls_per_turn:
            raise FormatError(
                f"it has {len(calls)} tool calls, at most {self.config.max_calls_per_turn} are allowed",
                call_ids=ids,
                n_calls=len(calls),
            )
        actions = []
        for call in calls:
            tool = self.tools.get(call.name)
            if tool is None:
                raise FormatError(
                    f"there is no tool {call.name!r} (the tools: {', '.join(self.tools)})",
                    call_ids=ids,
                    n_calls=len(calls),
                )
            try:
                args = check_arguments(tool, call.arguments)
            except ToolCallError as exc:
                raise FormatError(exc.reason, call_ids=ids, n_calls=len(calls)) from None
            actions.append(self.action(ToolCall(call.name, args, call.call_id)))
        return actions

    def action(self, call: ToolCall) -> Action:
        """The agent's record of a call: shell tools show their command, others ``name {json arguments}``."""
        tool = self.tools[call.name]
        command = call.arguments.get("command") if tool.shell else None
        shown = (
            command
            if isinstance(command, str)
            else f"{call.name} {json.dumps(call.arguments, ensure_ascii=False)}"
        )
        return Action(
            command=shown, kind="tool", name=call.name, arguments=call.arguments, call_id=call.call_id
        )

    # ------------------------------------------------------------------ running

    def shell_output(self, res: ExecResult, text: str) -> ToolOutput:
        """A shell tool's output rendered as ``text``; the raw output when it starts with the submit sentinel."""
        if res.output.lstrip().startswith(self.config.sentinel):
            text = res.output
        return ToolOutput(
            text=text,
            ok=res.returncode == 0 and not res.timed_out,
            returncode=res.returncode,
            timed_out=res.timed_out,
            truncated=res.truncated,
            duration=res.duration,
        )

    @staticmethod
    def limit(requested: float | None, cap: float | None) -> float | None:
        """A tool's own time limit (seconds), never above the agent's command timeout."""
        if requested is None or requested <= 0:
            return cap
        return min(requested, cap) if cap else requested

    async def run_action(
        self, env: Environment, action: Action, timeout: float | None = None
    ) -> CommandResult:
        """Run one tool call in the environment; fleet failures propagate, tool failures are results."""
        tool = self.tools[action.name or ""]
        started = time.monotonic()
        try:
            out = await tool.run(await Workspace.of(env), dict(action.arguments), timeout)
        except ToolError as exc:
            out = ToolOutput(text=f"Error: {exc}", ok=False)
        except FleetError:
            raise
        except Exception as exc:
            log.exception("tool %s failed", tool.name)
            out = ToolOutput(
                text=f"Error: the tool failed unexpectedly: {type(exc).__name__}: {exc}", ok=False
            )
        if not out.duration:
            out.duration = time.monotonic() - started
        return out.as_result()

    def submission(self, action: Action, result: CommandResult) -> str | None:
        tool = self.tools.get(action.name or "")
        if tool is None:
            return None
        if tool.finish:
            return str(action.arguments.get("message") or "")
        if tool.shell and not any(
            t.finish for t in self.tools.values()
        ):  # with a finish tool, only it submits
            return sentinel_submission(result.output, self.config.sentinel)
        return None

    # ------------------------------------------------------------------ feedback

    def _reminder(self, remaining_steps: int) -> str:
        return reminder(self.render, remaining_steps, self.config.remind_at_steps)

    def format_error_messages(self, error: FormatError, *, remaining_steps: int) -> list[Message]:
        content = self.render(
            "format_error",
            **self._common(
                reason=error.reason, remaining_steps=remaining_steps, reminder=self._reminder(remaining_steps)
            ),
        )
        ids = error.details.get("call_ids") or []
        if ids:  # chat mode: every call of the turn gets an answer
            return [{"role": "tool", "tool_call_id": i, "content": content} for i in ids]
        return [{"role": "user", "content": content}]

    def observation_messages(
        self,
        action: Action,
        result: CommandResult,
        *,
        remaining_steps: int,
        max_chars: int | None = None,
        timeout: float | None = None,
    ) -> list[Message]:
        limit = self.config.max_observation_chars if max_chars is None else max_chars
        text, elided = truncate_middle(result.output, limit)
        if elided:
            text += (
                f"\n[The output was too long: {elided} characters in the middle were left out. "
                "Narrow the command or the range to see what you need.]"
            )
        reminder = self._reminder(remaining_steps)
        if reminder:
            text = f"{text}\n{reminder}"
        return [{"role": "tool", "tool_call_id": action.call_id or "call_0", "content": text}]
