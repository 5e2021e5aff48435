"""`GoldPolicy`: plays the instance's gold patch through the agent's own exec path, in any harness.

Before the first turn it writes the gold patch into the container (`write_file`);
turn 1 applies it with `git apply`, turn 2 submits. Grading the result checks an
instance end to end: its image, the exec path, the patch taken at submit, the eval
script and the log parser. Every gold run should be ``resolved``.

Stateless across episodes (the turn number is read from the history), so one policy
can serve concurrent episodes. It speaks the harness it is played with, told by the
``tools`` the agent passes: none → a bash block; CodeAct (``execute_bash`` + ``finish``),
Codex (``shell_command``) or OpenCode (``bash``) → tool calls, as OpenAI ``tool_calls``
(``style="chat"``) or as Hermes ``<tool_call>`` text (``style="hermes"``, as a token-mode
model writes them). Tool harnesses without a finish tool submit with the sentinel command
through their shell tool.
"""

from __future__ import annotations

from typing import Any

from swe_rl.agent.protocols import Environment, Message, PolicyTurn
from swe_rl.harnesses.registry import SHELL_TOOLS
from swe_rl.harnesses.tool_calls import ToolCall, render_hermes, to_openai
from swe_rl.policies.noop import SUBMIT_COMMAND, bash_turn
from swe_rl.tasks.instance import TaskInstance

__all__ = ["GOLD_PATCH_PATH", "GoldPolicy", "tool_turn"]

GOLD_PATCH_PATH = "/tmp/swe-rl-gold.patch"
"""Outside the repository, so the patch file itself is not part of the diff."""


def tool_turn(call: ToolCall, thought: str, style: str = "chat") -> PolicyTurn:
    """A scripted turn with one tool call: OpenAI ``tool_calls`` (chat) or Hermes text (token mode)."""
    if style == "hermes":
        return PolicyTurn(text=f"{thought}\n\n{render_hermes([call])}", finish_reason="stop")
    return PolicyTurn(text=thought, tool_calls=to_openai([call]), finish_reason="tool_calls")


class GoldPolicy:
    """Apply the gold patch, then submit."""

    def __init__(
        self, submit_command: str = SUBMIT_COMMAND, patch_path: str = GOLD_PATCH_PATH, style: str = "chat"
    ) -> None:
        if style not in ("chat", "hermes"):
            raise ValueError(f"style must be chat or hermes, not {style!r}")
        self.submit_command = submit_command
        self.patch_path = patch_path
        self.style = style

    async def start_episode(self, instance: TaskInstance, env: Environment) -> None:
        if not instance.patch.strip():
            raise ValueError(f"{instance.instance_id} has no gold patch")
        await env.write_file(self.patch_path, instance.patch)

    async def act(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None, **kwargs: Any
    ) -> PolicyTurn:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        apply = f"git apply --verbose {self.patch_path}"
        if not tools:
            if turn == 0:
                return bash_turn(apply, "Applying the gold patch.")
            return bash_turn(self.submit_command, "Submitting the gold patch.")
        names = [t.get("function", t).get("name") for t in tools]
        shell = next((n for n in SHELL_TOOLS if n in names), None)
        if shell is None:
            raise ValueError(f"no shell tool among {names}: the gold policy cannot play this harness")
        call_id = f"call_gold_{turn}"
        if turn == 0:
            return tool_turn(
                ToolCall(shell, {"command": apply}, call_id), "Applying the gold patch.", self.style
            )
        if "finish" in names:
            return tool_turn(
                ToolCall("finish", {"message": "Applied the gold patch."}, call_id),
                "Submitting the gold patch.",
                self.style,
            )
        return tool_turn(
            ToolCall(shell, {"command": self.submit_command}, call_id),
            "Submitting the gold patch.",
            self.style,
        )
