"""What eval_swe.py adds per instance for grading checks and certification (kept out of the big file).

- `grade_extras`: writes ``eval.log`` and ``report.json`` next to traj.json and returns the
  result-row fields (apply strategy, network, ``flaky_only`` when a ledger is given);
- `keep_certified`: the instances a ledger certifies (``--certified-only LEDGER``);
- `run_graders`: runs a grading coroutine on the pool in the environment, or on a one-node local fleet.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from swe_rl.eval.clean_stop import say_stopping
from swe_rl.grading.artifacts import write_grade_artifacts
from swe_rl.grading.certification import Ledger, flaky_only_failure, read_ledger

__all__ = ["grade_extras", "keep_certified", "local_fleet_networks", "run_graders"]


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


def local_fleet_networks(args: Any, *chosen: str | None) -> list[str]:
    """The named networks the containers of a --local-fleet run may ask for: the run's choices
    (``chosen``: its --grading-network / --agent-network / --network), and where it made none, what the
    rows of ``args.data`` name. The local fleet makes (internal) and allows them for the run."""
    from swe_rl.tasks import load_instances
    from swe_rl.tasks.networks import network_for

    loaded = load_instances(args.data, image_template=args.image_template, split=args.split)
    names = [network_for(i, c) for i in loaded.instances for c in (chosen or (None,))]
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))


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
    networks: list[str],
) -> Any:
    """``main(pool_env)`` on a one-node local fleet (``--local-fleet``, with the named ``networks``,
    see `local_fleet_networks`), else ``main()`` against the pool the environment names."""
    if not local_fleet:
        return asyncio.run(main())
    from swe_rl.fleet.local import LocalFleet

    with LocalFleet(
        exec_servers=1, max_containers_per_node=max(4, 2 * max_concurrent), networks=networks
    ) as fleet:
        result = asyncio.run(main(fleet.client_env()))
        if isinstance(result, dict) and result.get("interrupted"):
            say_stopping(LOCAL_FLEET_STOP)
        return result


LOCAL_FLEET_STOP = "shutting down the local fleet (its pool and exec servers; any container left is removed)"
"""What an interrupted --local-fleet run says it waits for after its own work was released."""
