"""`NoopPolicy`: submits at once without changing anything (its grade should be no_patch).

It answers in the bash-block format: one ```bash block with the submit command.
"""

from __future__ import annotations

from typing import Any

from swe_rl.agent.protocols import Message, PolicyTurn
from swe_rl.harnesses.bash_block import BashBlockConfig

__all__ = ["NoopPolicy", "bash_turn"]

SUBMIT_COMMAND = BashBlockConfig.model_fields["submit_command"].default


def bash_turn(command: str, thought: str) -> PolicyTurn:
    """A scripted bash-block turn: a line of thought and one ```bash block."""
    return PolicyTurn(text=f"{thought}\n\n```bash\n{command}\n```", finish_reason="stop")


class NoopPolicy:
    """Submits the untouched checkout on its first turn."""

    def __init__(self, submit_command: str = SUBMIT_COMMAND) -> None:
        self.submit_command = submit_command

    async def act(self, messages: list[Message], **kwargs: Any) -> PolicyTurn:
        return bash_turn(self.submit_command, "Submitting without changes.")
