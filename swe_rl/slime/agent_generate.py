"""Upstream slime's coding-agent example, with our Docker fleet as its sandbox.

    --custom-generate-function-path swe_rl.slime.agent_generate.generate

Same `generate` as `examples.coding_agent_rl.generate.generate` at the pinned
slime commit (claude-code or codex in a container per sample, the token-exact
adapter on the training host, grading in a fresh container); the one change is
the sandbox: every `E2BSandbox(image)` the example makes becomes a
`FleetSandbox(image)` leased from our pool (`SWE_POOL_URL`, `SWE_POOL_TOKEN`).
The agent's container gets a network (it must reach the adapter), the grading
container none unless asked. slime is imported at the first call only, so this
module imports without it. See docs/slime_agent_sandbox.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from swe_rl.fleet.sandbox import AGENT_GENERATE_ENV, FleetSandbox
from swe_rl.fleet.settings import read_env

UPSTREAM_GENERATE = "examples.coding_agent_rl.generate"
UPSTREAM_TASKS = "examples.coding_agent_rl.swe"

_upstream_generate: Callable[..., Any] | None = None


def agent_network() -> bool | str:
    """Network of the agent's container (`SWE_FLEET_SANDBOX_NETWORK`, default: the node's bridge)."""
    return read_env(AGENT_GENERATE_ENV, {}).get("network", True)


def eval_network() -> bool | str:
    """Network of the grading container (`SWE_FLEET_SANDBOX_EVAL_NETWORK`, default: none)."""
    return read_env(AGENT_GENERATE_ENV, {}).get("eval_network", False)


def agent_sandbox(image: str) -> FleetSandbox:
    return FleetSandbox(image, network=agent_network())


def eval_sandbox(image: str) -> FleetSandbox:
    return FleetSandbox(image, network=eval_network())


def install() -> Callable[..., Any]:
    """Point the example's sandbox name at our fleet (once) and return its generate."""
    global _upstream_generate
    if _upstream_generate is None:
        example: Any = importlib.import_module(UPSTREAM_GENERATE)  # we set its module attributes
        tasks: Any = importlib.import_module(UPSTREAM_TASKS)
        example.E2BSandbox = agent_sandbox  # boot_agent_sandbox: the agent's container
        tasks.E2BSandbox = eval_sandbox  # the graders: a fresh container per evaluation
        _upstream_generate = example.generate
    return _upstream_generate


async def generate(
    args: Any, base_sample: Any, sampling_params: dict[str, Any], evaluation: bool = False
) -> Any:
    return await install()(args, base_sample, sampling_params, evaluation=evaluation)
