"""The agent loop: Policy → Harness → Environment → … → patch → grade in a fresh container.

    async with EnvClient() as client:
        result = await run_instance(instance, policy, BashBlockHarness(), client=client)
        result.status            # resolved | unresolved | no_patch | ... | env_error

`run_agent` plays one episode in a leased container and returns the trajectory and
the patch (`git diff` of the container, taken at submit or when the episode stops
for another reason). `run_instance` adds grading in a fresh container. The agent's
container is released whatever happens, cancellation included. A failure of the
fleet ends the episode with ``env_error`` (to be dropped from training), never with
a score.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.agent.errors import FormatError, PolicyError, PolicyUnreachable
from swe_rl.agent.fleet_environment import fleet_env_factory
from swe_rl.agent.fork import EpisodeFork, ForkablePolicy, drop_snapshot, take_fork
from swe_rl.agent.git_hygiene import GitHygieneResult, clean_history
from swe_rl.agent.monitor import MonitorConfig, flag_action
from swe_rl.agent.protocols import (
    Action,
    EnvFactory,
    Environment,
    EpisodePolicy,
    Grader,
    Harness,
    Message,
    Policy,
    PolicyTurn,
    TokenUsage,
    ToolHarness,
)
from swe_rl.agent.results import AgentResult, ExitReason, InstanceResult, Step
from swe_rl.fleet.client import EnvClient, ExecResult, FleetError, FleetUnavailable
from swe_rl.fleet.errors import BadRequest
from swe_rl.grading.fleet import FleetGrader
from swe_rl.grading.patch.baseline import record_baseline
from swe_rl.grading.result import GradeResult, GradeStatus
from swe_rl.tasks.instance import TaskInstance
from swe_rl.tasks.setup import TaskSetupFailed, set_up_task

__all__ = ["AgentConfig", "StepObserver", "harness_name", "run_agent", "run_instance"]

log = logging.getLogger(__name__)


class AgentConfig(BaseModel):
    """Limits of one episode."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    step_limit: int = 50
    """Policy turns at most (format errors count); then the container's `git diff` is the patch."""
    command_timeout: float = 180.0
    """Seconds one command may run before it is killed (the agent sees a timeout message)."""
    deadline: float | None = 3600.0
    """Seconds the whole episode may take (policy and commands); None for no limit."""
    max_format_errors: int = 3
    """Consecutive turns without a valid action that end the episode (exit format_errors)."""
    observation_max_chars: int | None = None
    """Overrides the harness's own output limit when set."""
    diff_timeout: float = 120.0
    """Seconds for taking the final patch (outside the deadline)."""
    env_options: dict[str, Any] = Field(default_factory=dict)
    """Allocate options for the agent's container (network, memory, cpus, pids_limit, env)."""
    git_hygiene: bool = True
    """Strip git history beyond the base commit from the container before the first turn (swe_rl.agent.git_hygiene)."""
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    """Suspicious-action patterns flagged per step (swe_rl.agent.monitor)."""


class StepObserver(Protocol):
    """Sees each step once it is done (e.g. the PRM step judge); must return at once, not block the loop."""

    def on_step(self, step: Step, turn: PolicyTurn, submitted: bool) -> None:
        """``step`` after its command ran (or its format error), ``turn`` the policy's turn;
        ``submitted`` when the step ended the episode by submitting. Errors are logged and ignored."""
        ...


class _Episode:
    """Mutable state of one run, kept when a deadline cancels the loop midway."""

    def __init__(
        self, instance: TaskInstance, messages: list[Message], observer: StepObserver | None = None
    ) -> None:
        self.instance = instance
        self.observer = observer
        self.messages = messages
        self.steps: list[Step] = []
        self.usage = TokenUsage()
        self.exit: ExitReason | None = None
        self.submission: str | None = None
        self.error: str | None = None
        self.stop_reason: str | None = None
        self.start, self.format_errors = 0, 0
        self.fork_at: int | None = None
        self.fork_every: int | None = None
        self.stop_at_fork = False
        self.fork: EpisodeFork | None = None

    def finish(self, reason: ExitReason, error: str | None = None) -> None:
        self.exit, self.error = reason, error

    def policy_failed(self, exc: Exception, where: str = "") -> None:
        """The policy raised: exit policy_error, with the `PolicyError`'s stop reason when it has one."""
        self.stop_reason = exc.stop_reason if isinstance(exc, PolicyError) else None
        self.finish(ExitReason.POLICY_ERROR, f"{where}{type(exc).__name__}: {exc}")

    def step_done(self, step: Step, turn: PolicyTurn, submitted: bool = False) -> None:
        if self.observer is None:
            return
        try:
            self.observer.on_step(step, turn, submitted)
        except Exception as exc:  # noqa: BLE001 - an observer never ends the episode
            log.warning("step observer failed on %s step %d: %s", self.instance.instance_id, step.index, exc)


async def _loop(
    ep: _Episode, policy: Policy, harness: Harness, env: Environment, config: AgentConfig
) -> None:
    format_errors = ep.format_errors
    for index in range(ep.start, config.step_limit):
        if index == ep.fork_at or (ep.fork_every and index > ep.start and index % ep.fork_every == 0):
            # the state before step `index`: its history, the container, the policy
            previous, ep.fork = (
                ep.fork,
                await take_fork(
                    ep.instance, index, ep.messages, ep.steps, ep.usage, env, policy, format_errors
                ),
            )
            if previous is not None and ep.fork_at is None:  # a superseded checkpoint
                await drop_snapshot(env, previous)
            if ep.stop_at_fork and index == ep.fork_at:  # a trunk: its branches play on
                return ep.finish(ExitReason.STEP_LIMIT)
        remaining = config.step_limit - index - 1
        step = Step(index=index)
        ep.steps.append(step)
        started = time.monotonic()
        try:
            turn: PolicyTurn = await policy.act(ep.messages, **_act_kwargs(harness))
        except FleetUnavailable as exc:  # a policy that touches the fleet (gold) hit an outage
            return ep.finish(ExitReason.ENV_ERROR, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - any policy failure ends the episode, recorded
            log.warning("policy failed on %s: %s", ep.instance.instance_id, exc)
            return ep.policy_failed(exc)
        step.policy_seconds = time.monotonic() - started
        ep.usage = ep.usage + turn.usage
        ep.messages.append(harness.assistant_message(turn))

        try:
            actions = harness.parse(turn)
        except FormatError as exc:
            step.format_error = exc.reason
            ep.step_done(step, turn)
            format_errors += 1
            if format_errors >= config.max_format_errors:
                return ep.finish(ExitReason.FORMAT_ERRORS, exc.reason)
            ep.messages.extend(harness.format_error_messages(exc, remaining_steps=remaining))
            continue
        format_errors = 0

        for action in actions:
            result = await _run(env, action, config, step, harness)
            submitted = harness.submission(action, result)
            if submitted is not None:
                ep.submission = submitted
                ep.step_done(step, turn, submitted=True)
                return ep.finish(ExitReason.SUBMITTED)
            ep.messages.extend(
                harness.observation_messages(
                    action,
                    result,
                    remaining_steps=remaining,
                    max_chars=config.observation_max_chars,
                    timeout=config.command_timeout,
                )
            )
        ep.step_done(step, turn)
    ep.finish(ExitReason.STEP_LIMIT)


def _act_kwargs(harness: Harness) -> dict[str, Any]:
    """What the policy needs to know of the harness: its tools, when it has any (bash blocks: nothing)."""
    tools = harness.tool_schemas if isinstance(harness, ToolHarness) else None
    return {"tools": tools} if tools else {}


async def _run(
    env: Environment, action: Action, config: AgentConfig, step: Step, harness: Harness
) -> ExecResult:
    step.action = action.command if step.action is None else f"{step.action}\n{action.command}"
    step.flags = sorted(set(step.flags) | set(flag_action(action.command, config.monitor)))
    started = time.monotonic()
    try:
        if action.kind != "bash" and isinstance(harness, ToolHarness):  # the harness runs its own tools
            result = await harness.run_action(env, action, timeout=config.command_timeout)
        else:
            result = await env.exec(action.command, timeout=config.command_timeout)
    except BadRequest as exc:  # the command itself was refused (too large, ...): the policy's doing
        result = ExecResult(
            returncode=-1,
            output=f"the command was refused: {exc}",
            timed_out=False,
            truncated=False,
            output_bytes=0,
            duration=0.0,
        )
    step.exec_seconds += time.monotonic() - started
    step.observation += result.output
    step.returncode, step.timed_out = result.returncode, result.timed_out
    return result


async def _start(ep: _Episode, policy: Policy, env: Environment) -> bool:
    """Let an `EpisodePolicy` see the instance first; False when it failed (policy_error)."""
    if not isinstance(policy, EpisodePolicy):
        return True
    try:
        await policy.start_episode(ep.instance, env)
    except FleetError:
        raise
    except Exception as exc:  # noqa: BLE001
        ep.policy_failed(exc, "start_episode: ")
        return False
    return True


async def _play(
    ep: _Episode,
    policy: Policy,
    harness: Harness,
    env: Environment,
    config: AgentConfig,
    resume: EpisodeFork | None = None,
) -> None:
    if await _start(ep, policy, env):
        if resume is not None and isinstance(policy, ForkablePolicy):
            policy.restore_state(resume.policy_state)
        await _loop(ep, policy, harness, env, config)


async def _final_patch(ep: _Episode, env: Environment, config: AgentConfig) -> str:
    """The container's `git diff`; a refused diff (the agent deleted .git, a patch too large) is the
    agent's doing and gives an empty patch, a fleet failure raises."""
    try:
        return await asyncio.wait_for(env.diff(), timeout=config.diff_timeout)
    except BadRequest as exc:
        ep.error = f"no patch: {exc}"
        return ""
    except (TimeoutError, asyncio.TimeoutError):
        raise FleetUnavailable(f"the final diff took longer than {config.diff_timeout}s") from None


async def run_agent(
    instance: TaskInstance,
    policy: Policy,
    harness: Harness,
    *,
    env_factory: EnvFactory | None = None,
    client: EnvClient | None = None,
    config: AgentConfig | None = None,
    on_step: StepObserver | None = None,
    fork_at: int | None = None,
    resume: EpisodeFork | None = None,
    fork_every: int | None = None,
    stop_at_fork: bool = False,
) -> AgentResult:
    """Play one episode in a container from `env_factory` (or leased from `client`);
    `on_step` sees every step once it is done. `fork_at=t` captures the episode before step t
    (`AgentResult.fork`), `fork_every=k` every k-th step (the last one is kept: a checkpoint to
    retry from), `stop_at_fork` ends the episode there (a trunk); `resume=fork` plays a branch of a fork
    (`swe_rl.agent.fork`)."""
    config = config or AgentConfig()
    if resume is not None:  # a container restored from the fork's snapshot (its baseline comes with it)
        if client is None:
            raise ValueError("resuming a fork needs a client (the container is restored by the pool)")
        env_factory = fleet_env_factory(
            client, **config.env_options, from_snapshot=resume.snapshot.snapshot_id
        )
    if env_factory is None:
        if client is None:
            raise ValueError("run_agent needs env_factory or client")
        env_factory = fleet_env_factory(client, **config.env_options)
    started = time.monotonic()
    ep = _Episode(instance, harness.initial_messages(instance, step_limit=config.step_limit), on_step)
    ep.fork_at, ep.fork_every, ep.stop_at_fork = fork_at, fork_every, stop_at_fork
    if resume is not None:
        ep.messages, ep.steps = resume.history()
        ep.usage, ep.start, ep.format_errors = resume.usage.model_copy(), resume.step, resume.format_errors
    patch = ""
    hygiene: GitHygieneResult | None = None
    allocate_seconds = warm = None
    try:
        async with env_factory(instance) as env:
            allocate_seconds, warm = time.monotonic() - started, env.warm
            # a shared per-repo image gets the task's bug first, as the repo's only commit (tasks.setup)
            await set_up_task(env, instance, commit=True)
            if config.git_hygiene:  # before the policy sees anything (warm containers included)
                hygiene = await clean_history(env, instance.workdir)
            if resume is None:  # before the first action: pre-existing untracked files stay out
                await record_baseline(env)
            try:
                await asyncio.wait_for(
                    _play(ep, policy, harness, env, config, resume), timeout=config.deadline
                )
            except (TimeoutError, asyncio.TimeoutError):
                ep.finish(ExitReason.DEADLINE, f"episode deadline of {config.deadline}s reached")
            if ep.exit is not ExitReason.ENV_ERROR:
                patch = await _final_patch(ep, env, config)
    except (FleetError, TaskSetupFailed) as exc:  # the fleet failed (or the task's set-up patch did)
        if ep.exit is not ExitReason.ENV_ERROR:
            log.warning("environment failed on %s: %s", instance.instance_id, exc)
            ep.finish(ExitReason.ENV_ERROR, f"{type(exc).__name__}: {exc}")
        patch = ""
    assert ep.exit is not None
    return AgentResult(
        instance_id=instance.instance_id,
        exit_reason=ep.exit,
        patch=patch,
        submission=ep.submission,
        error=ep.error,
        stop_reason=ep.stop_reason,
        messages=ep.messages,
        steps=ep.steps,
        usage=ep.usage,
        seconds=time.monotonic() - started,
        harness=harness_name(harness),
        git_hygiene=hygiene,
        allocate_seconds=allocate_seconds,
        warm=warm,
        fork=ep.fork,
        resumed_at=resume.step if resume is not None else None,
    )


def harness_name(harness: Harness) -> str:
    """The harness's ``name`` (``bash_block`` for the bash-block harness)."""
    return str(getattr(harness, "name", None) or type(harness).__name__)


async def run_instance(
    instance: TaskInstance,
    policy: Policy,
    harness: Harness,
    *,
    client: EnvClient,
    config: AgentConfig | None = None,
    grader: Grader | None = None,
    env_factory: EnvFactory | None = None,
) -> InstanceResult:
    """Play an episode, then grade its patch in a fresh container (`FleetGrader` by default).

    An episode lost to the infrastructure (its container, or a policy endpoint that could not be
    reached, `PolicyUnreachable`) is not graded: its result is ``env_error``, never a score."""
    started = time.monotonic()
    agent = await run_agent(instance, policy, harness, env_factory=env_factory, client=client, config=config)
    agent_done = time.monotonic()
    if agent.infra_failure or agent.stop_reason == PolicyUnreachable.stop_reason:
        # the container or the policy's endpoint failed: nothing of the policy's to grade (env_error)
        where = "agent environment" if agent.infra_failure else "policy endpoint"
        grade = GradeResult(
            instance_id=instance.instance_id,
            status=GradeStatus.ENV_ERROR,
            resolved=False,
            message=f"{where}: {agent.error}",
        )
    else:
        grade = await (grader or FleetGrader(client)).grade(instance, agent.patch)
    return InstanceResult(
        instance_id=instance.instance_id,
        agent=agent,
        grade=grade,
        agent_seconds=agent_done - started,
        grade_seconds=time.monotonic() - agent_done,
    )
