"""End-to-end mode for slime: token-exact `generate` of one SWE episode (reward: `swe_rl.slime.reward`).

    --custom-generate-function-path swe_rl.slime.e2e.generate
    --custom-rm-path swe_rl.slime.reward.reward_func --reward-key score
    --custom-config-path configs/plugin_swe.yaml  # swe_* keys, see swe_rl.slime.config

`generate` plays one task instance: it leases a container from the fleet, runs the agent
loop (`swe_rl.agent.run_agent`) with `SGLangTokenPolicy` (SGLang ``/generate`` on ids,
log-probs kept) and the instance's harness (bash blocks by default; ``swe_harness_mix`` mixes tool-calling
harnesses per instance in training, ``swe_eval_harness`` is the one of evaluation; the choice is in
``metadata["swe"]["harness"]``, meta.json and traj.json), grades the patch in a fresh container, saves
artifacts, and returns slime samples:

- ``samples: segment`` (default): a list, one sample per context segment (the turns between two
  compactions): its ids, a loss mask over every sampled id of its turns (mask 1, log-probs) and
  observations (mask 0); each sampled id is trained once, on exactly the context it was sampled on.
- ``samples: turn``: a list, one sample per policy turn on exactly the context it saw (its sampled ids
  are the response); also what PRM runs use (one step bonus per sample). Siblings of both lists share
  ``rollout_id`` (the parent's, else its ``index``) and the parent's group fields.
- ``samples: last`` (and evaluation): one sample, the last segment; in training context management is
  then off and an over-long episode ends truncated.

Statuses: a turn cut at ``max_new_tokens`` or a full context (also the server's own context-overflow
answer; the budget is clamped to the server's context length, asked at start) → TRUNCATED; a request
aborted by slime (`swe_rl.slime.runtime.slime_aborting`) → ABORTED (not graded, upstream's shape; an
episode slime aborted before it leased — queued on ``swe_max_concurrent`` or not started — returns so
at once, asking neither the fleet nor the policy server for anything);
an abort slime did not ask for (router restart), infrastructure failures (fleet, image, timeouts,
router unreachable) and unusable rows → one minimal FAILED sample with ``remove_sample``, a zero
loss mask, a one-id response and its reward preset (``swe_reward_removed``), the reason logged and
kept in ``metadata["swe"]["removed_reason"]`` (`swe_rl.slime.records.RolloutRecord`); never a negative reward. Advantages: train with
``--custom-reward-post-process-path swe_rl.slime.post_process.post_process_rewards`` (docs/advantages.md).
``metadata["swe"]["episode"]`` keeps turns and fleet timings for the dashboard (``docs/metrics.md``).
A pivot row (``metadata.pivot``) is handed to `swe_rl.slime.pivot.generate`, so one dataset may mix both.
slime is imported lazily (`swe_rl.slime.samples`); everything works without it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from swe_rl.agent import AgentConfig, AgentResult, run_agent
from swe_rl.grading import GradeResult, GradeStatus
from swe_rl.grading.artifacts import write_grade_artifacts
from swe_rl.grading.certification import certification_gate
from swe_rl.harnesses.registry import choose_harness, harness_by_name
from swe_rl.metrics.integrity import is_flagged, rollout_integrity
from swe_rl.metrics.rollout import episode_stats
from swe_rl.policies.sglang_tokens import SGLangTokenConfig, SGLangTokenPolicy
from swe_rl.rewards.prm import StepJudge
from swe_rl.slime import runtime
from swe_rl.slime.branching import BranchSettings, drop_trunk_turns
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.fork_mode import RetrySettings, play_forked
from swe_rl.slime.records import SWE_KEY, RolloutRecord
from swe_rl.slime.replay import ReplaySettings, fill_removed
from swe_rl.slime.reward import reward_for
from swe_rl.slime.runtime import ProcessState, shutdown
from swe_rl.slime.samples import (
    Removed,
    removed_sample,
    sample_class_of,
    trajectory_samples,
)
from swe_rl.tasks import RowInvalid, TaskInstance, instance_from_row
from swe_rl.tasks.pass_rates import NOT_COUNTED_STATUSES, Attempt, append_attempts
from swe_rl.tokens import ChatCodec

__all__ = ["generate", "shutdown"]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- generate


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime's custom generate: one SWE episode → a Sample, or a list of Samples (``samples: segment | turn``).
    A pivot row (``metadata.pivot``, stage 1) is played by `swe_rl.slime.pivot.generate` instead."""
    if isinstance(sample.metadata, dict) and sample.metadata.get("pivot") is not None:
        from swe_rl.slime import pivot

        return await pivot.generate(args, sample, sampling_params, evaluation)
    config = PluginConfig.from_args(args)
    runtime.check_options(args, config, evaluation=evaluation)
    state = runtime.state(config)
    Sample = sample_class_of(sample)
    started = time.monotonic()
    sample.status = Sample.Status.PENDING  # a retried (aborted) sample starts over
    codec = state.codec(config)
    mode = runtime.sample_mode(config, evaluation=evaluation)
    single = mode == "last"
    if runtime.slime_aborting(args):  # slime aborted before this episode started: nothing asked of anyone
        return _not_started(Sample, sample, codec, single)
    url = PluginConfig.router_url(args)
    replay = ReplaySettings.from_args(args)
    budget = await state.context.budget(
        state.http, url, config.max_context_len
    )  # clamped to the server's window
    policy = SGLangTokenPolicy(
        codec,
        SGLangTokenConfig(
            url=url,
            sampling_params=dict(sampling_params),
            max_context_len=budget,
            context_management=config.context_management and not (single and not evaluation),
            low_water=config.context_low_water,
            head_ratio=config.context_head_ratio,
            tail_ratio=config.context_tail_ratio,
            omission_marker=config.omission_marker,
            timeout=config.generate_timeout,
            retries=config.generate_retries,
            headers=runtime.routing_headers(args, sample),
            return_routed_experts=replay.routing,
            routing_per_turn=mode == "turn",
        ),
        http=state.http,
        should_abort=lambda: runtime.slime_aborting(args),
    )
    info: dict[str, Any] = {"removed": False, "removed_reason": None}
    agent: AgentResult | None = None
    grade: GradeResult | None = None
    instance: TaskInstance | None = None
    judge: StepJudge | None = None
    try:
        try:
            instance = instance_from_row({"metadata": sample.metadata or {}})
        except RowInvalid as exc:
            raise Removed(f"bad_instance: {exc}") from None
        if not evaluation:
            state.prefetch_hints(args, config).after(instance.instance_id)
        gate = certification_gate(config.require_certified)
        if gate is not None and (refusal := gate.refusal(instance.instance_id)):
            raise Removed(refusal)
        harness = _harness(config, instance, evaluation)
        info["harness"] = harness.name
        if config.prm.enable and not evaluation:
            judge = state.step_judge(config, instance)
        async with state.semaphore:
            if runtime.slime_aborting(args):  # queued while slime aborted: return before leasing
                raise _AbortedBeforeLease
            played = time.monotonic()
            played_agent, grade = await asyncio.wait_for(
                _play(
                    instance,
                    policy,
                    harness,
                    state,
                    config,
                    judge,
                    _forks(config, args, sample, instance, evaluation),
                    info,
                ),
                timeout=config.rollout_timeout,
            )
        agent = played_agent  # the outer name feeds the summary
        runtime.check_prompt_fits(agent, policy, instance.instance_id, state.context.known.get(url))
        info["episode"] = episode_stats(agent, time.monotonic() - played - agent.seconds if grade else None)
        if agent.stop_reason == "aborted":
            if not runtime.slime_aborting(args):  # not slime's abort (router restart, engine crash)
                raise Removed(f"server_abort: {agent.error or 'request aborted'}")
            # slime aborted the request: handed back as ABORTED, neither graded nor removed
        elif agent.infra_failure or (grade is not None and grade.infra_failure):
            raise Removed(f"env_error: {agent.error or (grade.message if grade else '')}")
        elif gate is not None and gate.flaky_only(grade):  # a flaky-only difference is no failure to learn
            raise Removed(
                f"flaky_only: failed only on tests the ledger marks flaky ({grade.message if grade else ''})"
            )
        elif agent.stop_reason in ("unreachable", "bad_response"):
            raise Removed(f"policy_server: {agent.error}")
        elif not policy.trajectory or not policy.trajectory.turns:
            raise Removed(f"no_turns: {agent.error or agent.exit_reason.value}")
    except _AbortedBeforeLease:
        return _not_started(Sample, sample, codec, single, instance)
    except (TimeoutError, asyncio.TimeoutError):
        info.update(removed=True, removed_reason=f"rollout_timeout: over {config.rollout_timeout}s")
    except Removed as exc:
        info.update(removed=True, removed_reason=str(exc))
    except BaseException:
        if judge is not None:
            judge.cancel()  # cancelled rollout: no judgment outlives it
        raise
    if not info["removed"] and agent is not None and config.drop_flagged:
        flagged = rollout_integrity(agent, grade)
        if is_flagged(flagged):
            info.update(
                removed=True, removed_reason=f"flagged: {flagged['tamper_rules'] + sorted(flagged['flags'])}"
            )
    if info["removed"]:
        log.warning(
            "removing rollout of %s (group %s, index %s) from training: %s",
            instance.instance_id if instance else "?",
            sample.group_index,
            sample.index,
            info["removed_reason"],
        )

    aborted = agent is not None and agent.stop_reason == "aborted" and not info["removed"]
    if policy.server_context_len:  # an overflow answer named the server's window: clamp the next rollouts
        state.context.learn(url, policy.server_context_len)
    if judge is not None:  # after grading: the judge had the grading time too
        if info["removed"] or aborted:
            judge.cancel()
        prm = await judge.finish(config.prm.finish_timeout)
        info["prm"] = {
            "step_coef": config.prm.step_coef,
            "model": config.prm.model,
            "m": config.prm.m,
            **prm.model_dump(mode="json"),
        }
    info.update(_summary(instance, agent, grade, policy, codec, started))
    info["aborted"] = aborted
    out_dir = None
    if config.save_traj_dir and instance is not None and not aborted:
        out_dir = await asyncio.to_thread(
            _save,
            Path(config.save_traj_dir),
            instance,
            sample,
            agent,
            grade,
            info,
            policy,
            sampling_params,
            config,
            evaluation,
        )
        info["traj_dir"] = str(out_dir)
    if (
        config.attempts_file
        and grade is not None
        and instance is not None
        and not info["removed"]
        and not aborted
    ):
        await asyncio.to_thread(record_attempt, config, args, instance.instance_id, grade, evaluation)
    record = RolloutRecord.model_validate(info).to_metadata()
    if info["removed"] or not (policy.trajectory and policy.trajectory.turns):
        samples = [removed_sample(Sample, sample, codec, {**(sample.metadata or {}), SWE_KEY: record})]
        fill_removed(samples[0], replay)
        if not aborted:
            samples[0].reward = reward_for(samples[0], config)  # preset: upstream skips the rm for some paths
    else:
        samples = trajectory_samples(
            Sample, sample, policy.trajectory, codec, record, mode=mode, replay=replay
        )
        samples = drop_trunk_turns(samples, record, mode)
    if aborted:
        for s in samples:
            s.status = Sample.Status.ABORTED
    return samples[-1] if single else samples


class _AbortedBeforeLease(Exception):
    """slime aborted the rollout while this episode waited for its turn: it leases nothing."""


def _not_started(
    Sample: Any, sample: Any, codec: ChatCodec, single: bool, instance: TaskInstance | None = None
) -> Any:
    """The ABORTED answer of an episode slime aborted before it leased (upstream's shape for an abort: not
    graded, no reward; `removed_sample`'s minimal ids). slime drops it, or requeues its group (fully async)."""
    record = RolloutRecord(
        aborted=True, instance_id=instance.instance_id if instance else None, stop_reason="aborted"
    ).to_metadata()
    out = removed_sample(Sample, sample, codec, {**(sample.metadata or {}), SWE_KEY: record})
    out.status = Sample.Status.ABORTED
    return out if single else [out]


def _harness(config: PluginConfig, instance: TaskInstance, evaluation: bool) -> Any:
    """The instance's harness: eval_harness in evaluation, else its pick from harness_mix (bash_block without one)."""
    if evaluation:
        name = config.eval_harness
    elif config.harness_mix:
        name = choose_harness(instance.instance_id, config.harness_mix, config.harness_seed)
    else:
        name = "bash_block"
    return harness_by_name(name, config.harness_config if name == "bash_block" else None)


async def _play(
    instance: TaskInstance,
    policy: SGLangTokenPolicy,
    harness: Any,
    state: ProcessState,
    config: PluginConfig,
    judge: StepJudge | None = None,
    forks: tuple[RetrySettings, BranchSettings, Any] | None = None,
    info: dict[str, Any] | None = None,
) -> tuple[AgentResult, GradeResult | None]:
    agent_config = AgentConfig(
        step_limit=config.step_limit,
        command_timeout=config.command_timeout,
        deadline=config.episode_deadline,
        env_options=dict(config.container_options),
        git_hygiene=config.git_hygiene,
        monitor=config.monitor,
    )
    fleet = state.fleet(config)
    retry, branch, key = forks or (RetrySettings(), BranchSettings(), None)
    agent = await play_forked(  # fork modes (swe_rl.slime.fork_mode): branching groups, retries
        lambda **fork: run_agent(
            instance,
            policy,
            harness,
            env_factory=fleet.env_factory,
            client=fleet.client,  # a resumed fork leases its container restored from the snapshot
            config=agent_config,
            on_step=judge,
            **fork,
        ),
        fleet.client,
        retry,
        branch,
        key,
        lambda: policy.trajectory,
        info if info is not None else {},
    )
    if agent.infra_failure or agent.stop_reason in ("aborted", "unreachable", "bad_response"):
        return agent, None  # nothing worth grading
    return agent, await fleet.grader.grade(instance, agent.patch)


def _forks(
    config: PluginConfig, args: Any, sample: Any, instance: TaskInstance, evaluation: bool
) -> tuple[RetrySettings, BranchSettings, Any]:
    """The fork modes of this rollout (none in evaluation): retries, branching, the group's key."""
    if evaluation:
        return RetrySettings(), BranchSettings(), None
    return (
        RetrySettings.from_config(config),
        BranchSettings.from_config(config, args),
        (sample.group_index, instance.instance_id),
    )


def _summary(
    instance: TaskInstance | None,
    agent: AgentResult | None,
    grade: GradeResult | None,
    policy: SGLangTokenPolicy,
    codec: ChatCodec,
    started: float,
) -> dict[str, Any]:
    traj = policy.trajectory
    return {
        "instance_id": instance.instance_id if instance else None,
        "status": grade.status.value if grade else GradeStatus.ENV_ERROR.value,
        "resolved": bool(grade and grade.resolved),
        "exit_reason": agent.exit_reason.value if agent else None,
        "error": agent.error if agent else None,
        "stop_reason": agent.stop_reason if agent else None,
        "steps": len(agent.steps) if agent else 0,
        "format_errors": agent.format_errors if agent else 0,
        "patch_bytes": len(agent.patch.encode()) if agent else 0,
        "tokens": traj.summary() if traj else None,
        "prefix_breaks": codec.prefix_breaks,
        "weight_versions": policy.weight_versions,
        "seconds": round(time.monotonic() - started, 3),
        **rollout_integrity(agent, grade),
    }


# --------------------------------------------------------------------------- artifacts


def record_attempt(config: PluginConfig, args: Any, instance_id: str, grade: Any, evaluation: bool) -> None:
    """One line in the attempts file for a graded trajectory (fleet failures never reach here: removed)."""
    if grade.status.value in NOT_COUNTED_STATUSES:
        return
    version = config.policy_version or Path(str(getattr(args, "hf_checkpoint", "") or "")).name
    attempt = Attempt(
        instance_id=instance_id,
        resolved=bool(grade.resolved),
        policy_version=version,
        source="eval" if evaluation else "train",
    )
    append_attempts(str(config.attempts_file), [attempt])


def _save(
    root: Path,
    instance: TaskInstance,
    sample: Any,
    agent: AgentResult | None,
    grade: GradeResult | None,
    info: dict[str, Any],
    policy: SGLangTokenPolicy,
    sampling_params: dict[str, Any],
    config: PluginConfig,
    evaluation: bool,
) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    out = root / f"{instance.instance_id}__g{sample.group_index}__i{sample.index}__{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    traj = policy.trajectory
    turns = [
        {
            "turn": t.index,
            "segment": t.segment,
            "context_tokens": t.start,
            "sampled_tokens": len(t.ids),
            "observation_tokens": len(t.observation),
            "finish_reason": t.finish_reason,
            "logprob_sum": round(sum(t.logprobs), 4),
        }
        for t in (traj.turns if traj else [])
    ]
    body = {
        "instance_id": instance.instance_id,
        "status": info["status"],
        "resolved": info["resolved"],
        "removed_reason": info["removed_reason"],
        **(agent.model_dump(mode="json", exclude={"instance_id", "patch"}) if agent else {}),
        "grade": grade.model_dump(mode="json") if grade else None,
        "token_turns": turns,
        "prm": info.get("prm"),
    }
    (out / "traj.json").write_text(json.dumps(body, indent=1, ensure_ascii=False))
    (out / "patch.diff").write_text(agent.patch if agent else "")
    if grade is not None:
        write_grade_artifacts(out, grade)  # eval.log + report.json
    meta = {
        **{k: v for k, v in info.items() if k != "tokens"},
        "tokens": info.get("tokens"),
        "segments": (info.get("tokens") or {}).get("segments"),
        "image": instance.image,
        "data_source": instance.data_source,
        "group_index": sample.group_index,
        "index": sample.index,
        "rollout_id": sample.rollout_id,
        "evaluation": evaluation,
        "sampling_params": sampling_params,
        "config": config.model_dump(mode="json"),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    return out
