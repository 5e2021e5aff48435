"""Harnesses: one action format each (prompts, parsing, observations). See `swe_rl.agent.protocols.Harness`
(and `ToolHarness` for the tool-calling ones).

- `BashBlockHarness` (`bash_block`, the default): one ```bash block per turn.
- `CodeActHarness` (`codeact`): OpenHands' execute_bash / str_replace_editor / finish.
- `CodexHarness` (`codex`): Codex's shell_command / apply_patch / read_file / list_dir / grep_files.
- `OpenCodeHarness` (`opencode`): OpenCode's bash / read / write / edit / glob / grep / list_dir.

Every harness is registered by name in `swe_rl.harnesses.registry` (`HARNESSES`: one entry each, with its
traits); `harness_by_name` and `choose_harness` (per-instance mixing) are there too. Tool-calling harnesses
share `ToolCallingHarness` (`swe_rl.harnesses.tool_harness`).
"""

from swe_rl.harnesses.bash_block import BashBlockConfig, BashBlockHarness
from swe_rl.harnesses.codeact import CodeActHarness
from swe_rl.harnesses.codex import CodexHarness
from swe_rl.harnesses.opencode import OpenCodeHarness
from swe_rl.harnesses.registry import choose_harness, harness_by_name
from swe_rl.harnesses.tool_harness import ToolCallingHarness, ToolHarnessConfig

__all__ = [
    "BashBlockConfig",
    "BashBlockHarness",
    "CodeActHarness",
    "CodexHarness",
    "OpenCodeHarness",
    "ToolCallingHarness",
    "ToolHarnessConfig",
    "choose_harness",
    "harness_by_name",
]
