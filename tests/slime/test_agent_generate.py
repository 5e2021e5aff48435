"""swe_rl.slime.agent_generate: upstream's coding-agent example gets our fleet as its sandbox.

Upstream's example is stood in for by two small modules with the same names and the one name the
wrapper replaces (`E2BSandbox`, looked up when a sandbox is made); the sandboxes are real leases.
"""

from __future__ import annotations

import sys
import types

import pytest
from pool_fixtures import PoolProc

from swe_rl.fleet.sandbox import FleetSandbox
from swe_rl.slime import agent_generate as wrapper

EXAMPLE = """
class E2BSandbox:  # what upstream boots unless told otherwise
    def __init__(self, image):
        raise AssertionError("the E2B backend was used")

async def generate(args, base_sample, sampling_params, evaluation=False):
    async with E2BSandbox(base_sample["image"]) as sb:
        code, out, _ = await sb.exec("echo agent-ran", user="root")
    reward = await swe.run_evaluation(base_sample)
    return {"agent": (code, out.split()[0], type(sb).__name__, sb.config.network), "eval": reward,
            "evaluation": evaluation}
"""
TASKS = """
class E2BSandbox:
    def __init__(self, image):
        raise AssertionError("the E2B backend was used")

async def run_evaluation(md):
    async with E2BSandbox(md["image"]) as ev:
        code, out, _ = await ev.exec("echo graded")
    return (code, out, ev.config.network)
"""


@pytest.fixture
def upstream_example(monkeypatch):
    tasks = types.ModuleType(wrapper.UPSTREAM_TASKS)
    exec(TASKS, tasks.__dict__)
    example = types.ModuleType(wrapper.UPSTREAM_GENERATE)
    example.swe = tasks
    exec(EXAMPLE, example.__dict__)
    monkeypatch.setitem(sys.modules, wrapper.UPSTREAM_GENERATE, example)
    monkeypatch.setitem(sys.modules, wrapper.UPSTREAM_TASKS, tasks)
    monkeypatch.setattr(wrapper, "_upstream_generate", None)
    return example


def test_networks_from_env(monkeypatch):
    monkeypatch.delenv("SWE_FLEET_SANDBOX_NETWORK", raising=False)
    monkeypatch.delenv("SWE_FLEET_SANDBOX_EVAL_NETWORK", raising=False)
    assert wrapper.agent_network() is True and wrapper.eval_network() is False
    monkeypatch.setenv("SWE_FLEET_SANDBOX_NETWORK", "agents-egress")
    monkeypatch.setenv("SWE_FLEET_SANDBOX_EVAL_NETWORK", "none")
    assert wrapper.agent_network() == "agents-egress" and wrapper.eval_network() is False
    assert isinstance(wrapper.agent_sandbox("img"), FleetSandbox)


async def test_generate_runs_upstreams_example_on_the_fleet(
    fleet, pool_factory, base_image, upstream_example, monkeypatch
):
    pool: PoolProc = pool_factory(fleet(1))
    monkeypatch.setenv("SWE_POOL_URL", pool.url)
    monkeypatch.setenv("SWE_POOL_TOKEN", pool.token)
    monkeypatch.delenv("SWE_FLEET_SANDBOX_NETWORK", raising=False)
    monkeypatch.delenv("SWE_FLEET_SANDBOX_EVAL_NETWORK", raising=False)
    result = await wrapper.generate(None, {"image": base_image}, {}, evaluation=True)
    assert result["agent"][:4] == (0, "agent-ran", "FleetSandbox", True)
    assert result["eval"] == (0, "graded\n", False) and result["evaluation"] is True
    assert upstream_example.E2BSandbox is wrapper.agent_sandbox
    assert pool.status()["totals"]["leases"] == 0  # both sandboxes closed their leases
