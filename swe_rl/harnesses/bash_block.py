"""The bash-block harness: each assistant turn carries exactly one ```bash fenced block.

    harness = BashBlockHarness()                       # templates from configs/harness_bash_block.yaml
    messages = harness.initial_messages(instance)      # system + instance prompt
    actions = harness.parse(turn)                      # [Action] or raises FormatError
    harness.submission(action, result)                 # submitted text, or None
    messages += harness.observation_messages(action, result, remaining_steps=7)

A command whose output starts with the line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``
submits; the rest of its output is the submitted text. Observations longer than
``max_observation_chars`` keep their head and tail around a marker. Thinking in the
content (``<think>…</think>``) is not searched for blocks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import yaml
from pydantic import BaseModel, ConfigDict

from swe_rl.agent.protocols import Action, CommandResult, FormatError, Message, PolicyTurn
from swe_rl.configs import config_path
from swe_rl.tasks import TaskInstance

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "SUBMIT_SENTINEL",
    "BashBlockConfig",
    "BashBlockHarness",
    "find_bash_blocks",
    "strip_thinking",
    "truncate_middle",
]

SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
DEFAULT_CONFIG_PATH = config_path("harness_bash_block.yaml")

_BLOCK = re.compile(r"```bash[ \t]*\r?\n(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


class BashBlockConfig(BaseModel):
    """Templates and limits of the bash-block harness (defaults: `DEFAULT_CONFIG_PATH`)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    system_template: str
    """System prompt (Jinja2)."""
    instance_template: str
    """First user message: the issue and how to submit (Jinja2)."""
    observation_template: str
    """Result of a command that finished (Jinja2)."""
    timeout_template: str
    """Result of a command that was killed at its timeout (Jinja2)."""
    format_error_template: str
    """Feedback for a turn without exactly one bash block (Jinja2)."""
    remaining_steps_template: str
    """Reminder appended to feedback when few turns remain (Jinja2)."""
    max_observation_chars: int = 10000
    """Longer command output keeps its first and last halves of this many characters."""
    remind_at_steps: int = 3
    """Show the remaining-steps reminder once this few turns (or fewer) remain; 0 never."""
    strip_thinking: bool = True
    """Ignore ``<think>…</think>`` in the content when looking for the block."""
    keep_reasoning: bool = True
    """Keep the turn's separate thinking (``reasoning_content``) in the history."""
    sentinel: str = SUBMIT_SENTINEL
    """First output line that submits."""
    submit_command: str = f"echo {SUBMIT_SENTINEL} && git add -A && git diff --cached"
    """The command the instance prompt tells the agent to submit with."""

    @classmethod
    def from_yaml(cls, path: str | Path | None = None, **overrides: Any) -> BashBlockConfig:
        """Read a YAML file of fields (default: the bundled one); keyword overrides win."""
        data = yaml.safe_load(Path(path or DEFAULT_CONFIG_PATH).read_text(encoding="utf-8")) or {}
        return cls(**{**data, **overrides})


def find_bash_blocks(text: str) -> list[str]:
    """The contents of every ```bash fenced block, in order."""
    return [m.group(1) for m in _BLOCK.finditer(text)]


def strip_thinking(text: str) -> str:
    """Drop ``<think>…</think>`` spans, and anything before a lone ``</think>`` (thinking
    opened by the chat template)."""
    text = _THINK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text


def sentinel_submission(output: str, sentinel: str) -> str | None:
    """The submission when a command's output starts with the sentinel line (the rest is the patch), else None."""
    lines = output.lstrip().splitlines(keepends=True)
    if lines and lines[0].strip() == sentinel:
        return "".join(lines[1:])
    return None


def reminder(render: Callable[..., str], remaining_steps: int, remind_at_steps: int) -> str:
    """The remaining-steps reminder, only in the last `remind_at_steps` steps."""
    if 0 < remaining_steps <= remind_at_steps:
        return render("remaining_steps", remaining_steps=remaining_steps)
    return ""


def truncate_middle(text: str, max_chars: int) -> tuple[str, int]:
    """Keep the head and tail of text (max_chars in all) around a marker; returns (text, elided)."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text, 0
    head = max_chars // 2
    tail = max_chars - head
    elided = len(text) - max_chars
    return f"{text[:head]}\n[... {elided} characters elided ...]\n{text[-tail:]}", elided


class BashBlockHarness:
    """mini-swe-agent style: think, then one bash command per turn; observations as user messages."""

    name = "bash_block"

    def __init__(self, config: BashBlockConfig | None = None) -> None:
        self.config = config or BashBlockConfig.from_yaml()
        self._jinja = jinja2.Environment(
            undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False
        )

    @cached_property
    def _templates(self) -> dict[str, jinja2.Template]:
        c = self.config
        return {
            name: self._jinja.from_string(getattr(c, f"{name}_template"))
            for name in ("system", "instance", "observation", "timeout", "format_error", "remaining_steps")
        }

    def render(self, name: str, **variables: Any) -> str:
        """Render one of the templates by short name (``observation``, ``timeout``, ...)."""
        return self._templates[name].render(**variables).strip("\n")

    # ------------------------------------------------------------------ prompts

    def initial_messages(self, instance: TaskInstance, **variables: Any) -> list[Message]:
        common = {
            "sentinel": self.config.sentinel,
            "submit_command": self.config.submit_command,
            "step_limit": variables.pop("step_limit", "many"),
            **variables,
        }
        return [
            {"role": "system", "content": self.render("system", **common)},
            {
                "role": "user",
                "content": self.render(
                    "instance",
                    instance=instance,
                    workdir=instance.workdir,
                    problem_statement=instance.problem_statement,
                    **common,
                ),
            },
        ]

    def assistant_message(self, turn: PolicyTurn) -> Message:
        message: Message = {"role": "assistant", "content": turn.text}
        if turn.reasoning and self.config.keep_reasoning:
            message["reasoning_content"] = turn.reasoning
        return message

    # ------------------------------------------------------------------ parsing

    def parse(self, turn: PolicyTurn) -> list[Action]:
        text = strip_thinking(turn.text) if self.config.strip_thinking else turn.text
        blocks = find_bash_blocks(text)
        if len(blocks) != 1:
            if not blocks:
                reason = "it has no ```bash block"
                if turn.finish_reason == "length":
                    reason += " (the answer was cut off at the length limit; think more briefly)"
            else:
                reason = f"it has {len(blocks)} ```bash blocks, and exactly one is allowed"
            raise FormatError(reason, n_blocks=len(blocks))
        command = blocks[0].strip()
        if not command:
            raise FormatError("its ```bash block is empty", n_blocks=1)
        return [Action(command=command)]

    def submission(self, action: Action, result: CommandResult) -> str | None:
        return sentinel_submission(result.output, self.config.sentinel)

    # ------------------------------------------------------------------ feedback

    def _reminder(self, remaining_steps: int) -> str:
        return reminder(self.render, remaining_steps, self.config.remind_at_steps)

    def format_error_messages(self, error: FormatError, *, remaining_steps: int) -> list[Message]:
        content = self.render(
            "format_error",
            reason=error.reason,
            n_blocks=error.details.get("n_blocks", 0),
            remaining_steps=remaining_steps,
            reminder=self._reminder(remaining_steps),
            submit_command=self.config.submit_command,
        )
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
        output, elided = truncate_middle(result.output, limit)
        output = output.rstrip("\n")
        common = {
            "command": action.command,
            "output": output,
            "elided_chars": elided,
            "remaining_steps": remaining_steps,
            "reminder": self._reminder(remaining_steps),
        }
        if result.timed_out:
            content = self.render(
                "timeout", timeout=float(result.duration if timeout is None else timeout), **common
            )
        else:
            content = self.render(
                "observation", returncode=result.returncode, truncated=result.truncated, **common
            )
        return [{"role": "user", "content": content}]
