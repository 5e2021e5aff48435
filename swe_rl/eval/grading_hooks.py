"""What eval_swe.py adds per instance for grading checks and certification (kept out of the big file).

- `grade_extras`: writes ``eval.log`` and ``report.json`` next to traj.json and returns the
  result-row fields (apply strategy, network, ``flaky_only`` when a ledger is given);
- `keep_certified`: the instances a ledger certifies (``--certified-only LEDGER``);
- `run_graders`: runs a grading coroutine on the pool in the environment, or on a one-node local fleet.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from swe_rl.grading.artifacts import write_grade_artifacts
from swe_rl.grading.certification import Ledger, flaky_only_failure, read_ledger

__all__ = ["grade_extras", "keep_certified", "local_fleet_env", "run_graders"]


def grade_extras(out: Path, result: Any, ledger: Ledger | None = None) -> dict[str, Any]:
    grade = result.grade
    write_grade_artifacts(
        out, grade, agent_seconds=round(result.agent_seconds, 3), grade_seconds=round(result.grade_seconds, 3)
    )
    row: dict[str, Any] = {
        "apply_strategy": grade.apply_strategy,
        "grading_network": grade.network,
        "eval_log": bool(grade.test_log),
    }
    if ledger is not None:
        row["flaky_only"] = flaky_only_failure(grade, ledger.flaky_tests(grade.instance_id))
    return row


def local_fleet_env(*networks: str | None) -> dict[str, str]:
    """Exec-server environment of a --local-fleet run: allow the named networks the run asks for."""
    from swe_rl.tasks.networks import parse_network

    names = [n for n in (parse_network(x) for x in networks) if isinstance(n, str)]
    allowed = [n for n in os.environ.get("SWE_EXEC_NETWORKS", "").split(",") if n.strip()]
    return {"SWE_EXEC_NETWORKS": ",".join(dict.fromkeys([*allowed, *names]))} if names else {}


def keep_certified(instances: list[Any], ledger_path: str) -> tuple[list[Any], Ledger]:
    ledger = read_ledger(ledger_path)
    kept = [i for i in instances if ledger.is_certified(i.instance_id)]
    if len(kept) < len(instances):
        print(
            f"certified-only: {len(kept)} of {len(instances)} instances certified in {ledger_path}",
            file=sys.stderr,
        )
    return kept, ledger


def run_graders(
    main: Callable[..., Coroutine[Any, Any, Any]],
    *,
    local_fleet: bool,
    max_concurrent: int,
    network: str | None,
) -> Any:
    """``main(pool_env)`` on a one-node local fleet (``--local-fleet``, named network allowed), else ``main()``
    against the pool the environment names."""
    if not local_fleet:
        return asyncio.run(main())
    from swe_rl.fleet.local import LocalFleet

    with LocalFleet(
        exec_servers=1, max_containers_per_node=max(4, 2 * max_concurrent), exec_env=local_fleet_env(network)
    ) as fleet:
        return asyncio.run(main(fleet.client_env()))
