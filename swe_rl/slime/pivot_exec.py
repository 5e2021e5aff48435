"""Executable pivots: a pivot's action is run in the expert's environment state, and rewarded by what it does.

Argument matching (`swe_rl.rewards.pivot`) misses equivalent actions spelt otherwise and pays actions that
read alike but do something else. With ``swe_pivot_reward: execute`` (or ``execute+match``) a pivot row that
carries its task instance (``metadata.instance``, added by ``swe-build-pivots --instances``) is executed:

1. **The pivot's state**, once per group (lazily, at the first sample that needs it): a container of the
   instance plays the expert's earlier actions and its action at the pivot (`run_agent` with the expert's
   turns scripted, the row's harness), snapshotting before the pivot's step (`fork_at`). The expert's
   outcome is kept: the repository diff after its action, its output and exit code. The snapshot is owned
   by this process's fleet client and is deleted when the group's last sample is done (`Trunks`).
2. **The policy's action** runs in a container restored from that snapshot (hash-verified by the fleet),
   one step (`run_agent(resume=...)`), and its outcome is compared with the expert's: **same outcome** when
   the repository diff is the expert's and, for an action that changed nothing in the tree (a read), also
   the same exit code and the same output (whitespace collapsed).

Scores (``PivotRewardConfig.reward_match`` / ``reward_miss``): ``execute`` pays the same outcome;
``execute+match`` pays the lower of the two rewards (a match whose execution differs is not paid). An
action the behaviour monitor flags (tampering with tests, forging output) is never paid more than its
match. A pivot that cannot be replayed (no instance in the row, a harness that is not an agent harness,
an expert step that does not parse, returns another exit code than recorded, ends the episode, or the
expert action submits) falls back to matching; ``metadata["pivot_result"]["execution"]["fallback"]`` says
why. Fleet failures remove the sample (never a negative reward).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from swe_rl.agent import AgentConfig, run_agent
from swe_rl.agent.fork import EpisodeFork
from swe_rl.agent.protocols import Harness, Message, PolicyTurn
from swe_rl.agent.results import AgentResult, ExitReason
from swe_rl.fleet.client import EnvClient
from swe_rl.fleet.errors import FleetError, FleetUnavailable
from swe_rl.harnesses.registry import harness_by_name
from swe_rl.slime import runtime
from swe_rl.slime.branching import BranchSettings, trunks
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.records import PivotRow
from swe_rl.slime.samples import Removed
from swe_rl.tasks import RowInvalid, TaskInstance, instance_from_row

__all__ = [
    "MODES",
    "PivotExecSettings",
    "ScriptedTurns",
    "Unreplayable",
    "execute_pivot",
    "expert_turns",
    "release",
]

MODES = ("match", "execute", "execute+match")
_RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")


@dataclass(frozen=True)
class PivotExecSettings:
    reward: str = "match"
    """How pivot samples are rewarded (slime arg ``swe_pivot_reward``): ``match``, ``execute``, ``execute+match``."""
    group_size: int = 1
    """Samples per group (``n_samples_per_prompt``): the last one done deletes the pivot's snapshot."""

    @classmethod
    def from_args(cls, args: Any) -> PivotExecSettings:
        reward = str(getattr(args, "swe_pivot_reward", None) or "match")
        if reward not in MODES:
            raise ValueError(f"swe_pivot_reward must be one of {', '.join(MODES)}, not {reward!r}")
        return cls(reward, int(getattr(args, "n_samples_per_prompt", 1) or 1))

    @property
    def executes(self) -> bool:
        return self.reward != "match"


class Unreplayable(Exception):
    """The pivot's state cannot be re-created: the sample is scored by matching."""


class ScriptedTurns:
    """A policy that answers with the given turns in order (the expert's, or the policy's one sampled turn)."""

    def __init__(self, turns: list[PolicyTurn]) -> None:
        self.turns = list(turns)

    async def act(self, messages: list[Message], **kwargs: Any) -> PolicyTurn:
        if not self.turns:
            raise RuntimeError("no scripted turn left")
        return self.turns.pop(0)


def expert_turns(row: PivotRow) -> list[PolicyTurn]:
    """The expert's assistant turns before the pivot, then its action at the pivot, as policy turns."""
    out = [
        PolicyTurn(text=str(m.get("content") or ""), tool_calls=m.get("tool_calls") or None)
        for m in row.messages
        if m.get("role") == "assistant"
    ]
    action = row.expert()
    if action.tool == "bash" and row.parser == "bash_block":
        out.append(PolicyTurn(text=f"```bash\n{action.arguments.get('command', '')}\n```"))
    else:
        function = {"name": action.tool, "arguments": json.dumps(action.arguments)}
        call: dict[str, Any] = {"id": "pivot", "type": "function", "function": function}
        out.append(PolicyTurn(text="", tool_calls=[call], finish_reason="tool_calls"))
    return out


def recorded_returncodes(row: PivotRow) -> list[int | None]:
    """The exit code the expert's observation after each of its turns shows (None when it shows none)."""
    codes: list[int | None] = []
    for i, m in enumerate(row.messages):
        if m.get("role") != "assistant":
            continue
        nxt = row.messages[i + 1] if i + 1 < len(row.messages) else {}
        found = _RETURNCODE.search(str(nxt.get("content") or "")) if nxt.get("role") != "assistant" else None
        codes.append(int(found.group(1)) if found else None)
    return codes


def _harness(row: PivotRow, config: PluginConfig) -> Harness:
    try:
        return harness_by_name(row.harness, config.harness_config if row.harness == "bash_block" else None)
    except (KeyError, ValueError) as exc:
        raise Unreplayable(f"harness {row.harness!r} is not an agent harness: {exc}") from None


def _agent_config(config: PluginConfig, steps: int) -> AgentConfig:
    return AgentConfig(
        step_limit=steps,
        command_timeout=config.command_timeout,
        deadline=config.episode_deadline,
        env_options=dict(config.container_options),
        git_hygiene=config.git_hygiene,
        monitor=config.monitor,
    )


def _outcome(agent: AgentResult, step: int) -> dict[str, Any]:
    s = agent.steps[step]
    return {
        "patch": agent.patch,
        "output": " ".join(s.observation.split()),
        "returncode": s.returncode,
        "timed_out": s.timed_out,
        "flags": list(s.flags),
        "format_error": s.format_error,
        "submitted": agent.exit_reason is ExitReason.SUBMITTED,
    }


async def _replay(
    instance: TaskInstance, row: PivotRow, harness: Harness, client: EnvClient, config: PluginConfig
) -> EpisodeFork:
    """Play the expert up to its pivot (the fork), then its pivot action from the restored fork, as the
    policy's will be; the expert's outcome and the diff before the pivot go in the fork's ``extra``."""
    turns = expert_turns(row)
    at = len(turns) - 1
    trunk = await run_agent(
        instance,
        ScriptedTurns(turns[:at]),
        harness,
        client=client,
        config=_agent_config(config, at + 1),
        fork_at=at,
        stop_at_fork=True,
    )
    fork = trunk.fork
    try:
        if trunk.infra_failure:
            raise FleetUnavailable(f"replaying the expert: {trunk.error}")
        if fork is None:
            raise Unreplayable(
                f"the expert's replay ended at step {len(trunk.steps)} ({trunk.exit_reason.value})"
            )
        for step, recorded in zip(trunk.steps, recorded_returncodes(row)):
            if step.format_error:
                raise Unreplayable(f"expert step {step.index} does not parse: {step.format_error}")
            if recorded is not None and step.returncode != recorded:
                raise Unreplayable(
                    f"expert step {step.index} returned {step.returncode}, the recording {recorded}"
                )
        expert = await _play_one(instance, turns[at], harness, client, config, fork)
        if expert is None or expert["format_error"] or expert["submitted"]:
            raise Unreplayable("the expert's pivot action submits or does not parse")
    except BaseException:
        if fork is not None:
            await _forget(client, fork)
        raise
    return dataclasses.replace(fork, extra={"expert": expert, "patch_before": trunk.patch})


async def _play_one(
    instance: TaskInstance,
    turn: PolicyTurn,
    harness: Harness,
    client: EnvClient,
    config: PluginConfig,
    fork: EpisodeFork,
) -> dict[str, Any] | None:
    """One turn played in a container restored from the fork: its outcome (None if it took no step)."""
    agent = await run_agent(
        instance,
        ScriptedTurns([turn]),
        harness,
        client=client,
        config=_agent_config(config, fork.step + 1),
        resume=fork,
    )
    if agent.infra_failure:
        raise FleetUnavailable(f"executing the pivot action: {agent.error}")
    return _outcome(agent, fork.step) if len(agent.steps) > fork.step else None


async def _forget(client: EnvClient, fork: EpisodeFork) -> None:
    try:
        await client.delete_snapshot(fork.snapshot.snapshot_id)
    except FleetError:
        pass  # it expires by itself


def same_outcome(policy: dict[str, Any], expert: dict[str, Any], expert_changed_tree: bool) -> bool:
    """The policy's action did what the expert's did (see the module's docstring)."""
    if (
        policy["format_error"]
        or policy["submitted"]
        or policy["timed_out"]
        or policy["patch"] != expert["patch"]
    ):
        return False
    if expert_changed_tree:
        return True
    return policy["returncode"] == expert["returncode"] and policy["output"] == expert["output"]


async def execute_pivot(
    args: Any,
    sample: Any,
    row: PivotRow,
    turn: PolicyTurn,
    config: PluginConfig,
    settings: PivotExecSettings,
    match_score: float,
) -> tuple[float, dict[str, Any]]:
    """The pivot's score under ``settings.reward`` and the ``execution`` record; `match_score` on fallback.
    Raises `Removed` on a fleet failure. The caller calls `release` once per sample, whatever happened."""
    record: dict[str, Any] = {"mode": settings.reward, "fallback": None}
    try:
        instance = instance_from_row({"metadata": sample.metadata or {}})
    except RowInvalid as exc:
        record["fallback"] = f"no_instance: {exc}"
        return match_score, record
    client = runtime.state(config).fleet(config).client
    try:
        harness = _harness(row, config)
        fork = await trunks().fork_for(
            _key(sample, row), lambda: _replay(instance, row, harness, client, config)
        )
    except Unreplayable as exc:
        record["fallback"] = f"unreplayable: {exc}"
        return match_score, record
    except FleetError as exc:
        raise Removed(f"env_error: the pivot's replay failed: {exc}") from None
    assert fork is not None
    try:
        policy = await _play_one(instance, turn, harness, client, config, fork)
    except FleetError as exc:
        raise Removed(f"env_error: {exc}") from None
    expert = fork.extra["expert"]
    changed = bool(expert["patch"] != fork.extra["patch_before"])
    same = policy is not None and same_outcome(policy, expert, changed)
    pivot = config.pivot
    score = pivot.reward_match if same else pivot.reward_miss
    flags = policy["flags"] if policy else []
    if settings.reward == "execute+match" or flags:
        score = min(score, match_score)
    record.update(
        category="same_outcome" if same else "different_outcome",
        score=score,
        expert_changed_tree=changed,
        flags=flags,
        returncode=policy["returncode"] if policy else None,
        snapshot_id=fork.snapshot.snapshot_id,
    )
    return score, record


def _key(sample: Any, row: PivotRow) -> tuple[Any, str]:
    return (sample.group_index, f"pivot:{row.pivot_id or row.instance_id}:{row.step_index}")


async def release(args: Any, sample: Any, config: PluginConfig) -> None:
    """Count this sample done for its group (call once per sample, whatever happened); the group's last one
    deletes the pivot's snapshot (else it expires)."""
    try:
        row = PivotRow.model_validate((sample.metadata or {}).get("pivot"))
    except (ValueError, TypeError):
        return  # no row, no state was replayed for it
    key, group = _key(sample, row), trunks()
    settings = BranchSettings(0, PivotExecSettings.from_args(args).group_size)
    if key in group.trunks:
        await group.branch_done(key, settings, runtime.state(config).fleet(config).client)
    else:  # nothing replayed yet: count it all the same
        group.done[key] = group.done.get(key, 0) + 1
