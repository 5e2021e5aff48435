"""A warning, early in a run, when a tool-calling harness's model never calls a tool.

An OpenAI-compatible endpoint that drops the ``tools`` of a request (a chat template without
tool support, a server started without a tool-call parser) makes every episode of a tool
harness end on "no tool call" format errors: zeros, silently. After the first ``after``
finished episodes of a chat policy with a tool harness, if none of them produced a single
tool call although every request carried the tools, this prints one warning naming the
likely cause, and keeps it for ``summary.json`` / ``report.html``.

    watch = ToolCallWatch(harness, chat_policy=True, after=3, endpoint=args.api_base)
    ...
    watch.observe(result.agent)        # after each instance
    summary["warnings"] = watch.warnings
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["ToolCallWatch"]


class ToolCallWatch:
    """Counts finished episodes until ``after``; warns once if none had a tool call."""

    def __init__(
        self, harness: Any, *, chat_policy: bool, after: int = 3, endpoint: str | None = None
    ) -> None:
        self.active = bool(chat_policy and getattr(harness, "tool_schemas", None) and after > 0)
        self.harness = getattr(harness, "name", "?")
        self.after = after
        self.endpoint = endpoint
        self.seen = 0
        self.with_calls = 0
        self.warnings: list[str] = []

    @staticmethod
    def called_a_tool(agent: Any) -> bool:
        """A turn parsed into an action (a tool harness only has tool actions) or carried tool_calls."""
        if any(s.format_error is None and s.action is not None for s in agent.steps):
            return True
        return any(m.get("role") == "assistant" and m.get("tool_calls") for m in agent.messages)

    def observe(self, agent: Any) -> str | None:
        """Feed one finished episode (infrastructure failures are not counted); returns the warning once."""
        if not self.active or self.seen >= self.after or agent.infra_failure or not agent.steps:
            return None
        self.seen += 1
        self.with_calls += self.called_a_tool(agent)
        if self.seen < self.after or self.with_calls:
            return None
        text = (
            f"warning: the first {self.after} episodes with the tool harness '{self.harness}' never produced a "
            f"tool call, although every request to {self.endpoint or 'the endpoint'} carried the tools. The "
            "endpoint most likely ignores `tools`: its chat template has no tool support, or the server was "
            "started without a tool-call parser (SGLang: --tool-call-parser; vLLM: --enable-auto-tool-choice "
            "--tool-call-parser). Fix the server, or evaluate with --harness bash_block."
        )
        self.warnings.append(text)
        print(text, file=sys.stderr, flush=True)
        return text
