"""`open_fleet` (swe_rl/agent/fleet_session.py): the one place that builds the fleet client, the agent's
environment factory and the grader; slime, eval, certify and grade-predictions build none themselves."""

from __future__ import annotations

import ast

from swe_rl.agent.fleet_session import FleetConfig, open_fleet
from swe_rl.fleet.client import EnvClientConfig
from swe_rl.grading.config import GraderConfig
from tests.conftest import ROOT
from tests.package_sources import parse

BUILDERS = {"EnvClient", "FleetGrader"}
# who may still build them: the fleet package (its own client users), the session itself, the loop's default
# grader for a caller that gives none, and slime's agent-layer sandbox (a client of its own by design)
ALLOWED = {"swe_rl/agent/fleet_session.py", "swe_rl/agent/loop.py", "swe_rl/fleet/sandbox.py"}


async def test_open_fleet_builds_the_client_the_environments_and_the_grader_once():
    config = FleetConfig(
        client=EnvClientConfig(pool_url="http://127.0.0.1:9", token="t"),
        grading=GraderConfig(eval_timeout=123),
        env_options={"memory": "1g"},
    )
    async with open_fleet(config) as fleet:
        assert fleet.client.config.pool_url == "http://127.0.0.1:9"
        assert fleet.grader.client is fleet.client and fleet.grader.config.eval_timeout == 123
        assert callable(fleet.env_factory)
        other = fleet.with_config(FleetConfig(client=config.client, grading=GraderConfig(eval_timeout=7)))
        assert other.client is fleet.client and other.grader.config.eval_timeout == 7
        await other.close()  # a derived session leaves the shared client open
        assert not fleet.client._http.is_closed
    assert fleet.client._http.is_closed


def test_for_pool_takes_a_local_fleets_pool():
    cfg = FleetConfig.for_pool({"SWE_POOL_URL": "http://127.0.0.1:5", "SWE_POOL_TOKEN": "tok"})
    assert cfg.client.pool_url == "http://127.0.0.1:5" and cfg.client.token == "tok"


def test_nothing_else_builds_a_fleet_client_or_a_grader():
    bad = []
    for path in sorted((ROOT / "swe_rl").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in ALLOWED or rel.startswith("swe_rl/fleet/"):
            continue
        for node in ast.walk(parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILDERS:
                bad.append(f"{rel}:{node.lineno}: {node.func.id}(...)")
    assert not bad, bad
