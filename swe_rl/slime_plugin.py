"""slime plugin for end-to-end SWE rollouts: token-exact `generate` and an outcome `reward_func`.

    --custom-generate-function-path swe_rl.slime_plugin.generate
    --custom-rm-path swe_rl.slime_plugin.reward_func --reward-key score
    --custom-config-path swe_rl/configs/plugin_swe.yaml          # swe_* keys, see swe_rl.plugin_config

`generate` plays one task instance: it leases a container from the fleet, runs the agent
loop (`swe_rl.agent.run_agent`) with `SGLangTokenPolicy` (SGLang ``/generate`` on ids,
log-probs kept) and the instance's harness (bash blocks by default; ``swe_harness_mix`` mixes tool-calling
harnesses per instance in training, ``swe_eval_harness`` is the one of evaluation; the choice is in
``metadata["swe"]["harness"]``, meta.json and traj.json), grades the patch in a fresh container, saves
artifacts, and returns slime samples:

- ``dynamic_history`` on (default): a list, one sample per policy turn, each on exactly
  the context that turn saw (its sampled ids are the response); siblings share
  ``rollout_id`` (the parent's, else its ``index``) and the parent's group fields.
- off: one sample, ``tokens`` = prompt + every turn (mask 1, log-probs) and observation
  (mask 0); context management is then off and an over-long episode ends truncated.

Statuses: a turn cut at ``max_new_tokens`` or a full context (also the server's own context-overflow
answer; the budget is clamped to the server's context length, asked at start) → TRUNCATED; a request
aborted by slime (`swe_rl.slime_runtime.slime_aborting`) → ABORTED (not graded, upstream's shape);
an abort slime did not ask for (router restart), infrastructure failures (fleet, image, timeouts,
router unreachable) and unusable rows → one minimal FAILED sample with ``remove_sample``, a zero
loss mask, a one-id response and its reward preset (``swe_reward_removed``), the reason logged and
kept in ``metadata["swe"]["removed_reason"]``; never a negative reward. Advantages: train with
``--custom-reward-post-process-path swe_rl.advantages.post_process_rewards`` (docs/advantages.md).
``metadata["swe"]["episode"]`` keeps turns and fleet timings for the dashboard (``docs/metrics.md``).
slime is imported lazily (`swe_rl.slime_sample`); everything works without it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from swe_rl import slime_runtime
from swe_rl.agent import AgentConfig, AgentResult, run_agent
from swe_rl.env_client import EnvClient, EnvClientConfig
from swe_rl.certification import certification_gate
from swe_rl.grade_artifacts import write_grade_artifacts
from swe_rl.grader import FleetGrader, GraderConfig
from swe_rl.grading import GradeResult, GradeStatus
from swe_rl.harnesses.bash_block import BashBlockConfig, BashBlockHarness
from swe_rl.harnesses.registry import choose_harness, harness_by_name
from swe_rl.integrity_metrics import is_flagged, rollout_integrity
from swe_rl.plugin_config import PluginConfig
from swe_rl.policies.server_context import ContextBudget
from swe_rl.policies.sglang_tokens import SGLangTokenConfig, SGLangTokenPolicy
from swe_rl.prm import JudgeClient, StepJudge, mixed_reward
from swe_rl.rollout_metrics import episode_stats
from swe_rl.slime_sample import removed_ids, sample_class
from swe_rl.tasks import RowInvalid, TaskInstance, instance_from_row
from swe_rl.tokens import ChatCodec, ChatRenderer, TokenTrajectory, load_tokenizer

__all__ = ["generate", "reward_for", "reward_func", "shutdown"]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- process state


class _ProcessState:
    """Shared by all rollouts of one process (slime's rollout Ray actor) on one event loop."""

    def __init__(self, config: PluginConfig) -> None:
        self.loop = asyncio.get_running_loop()
        self.client = EnvClient(EnvClientConfig.from_env())
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(config.generate_timeout, connect=30.0),
                                      limits=httpx.Limits(max_connections=None, max_keepalive_connections=256))
        self.semaphore = asyncio.Semaphore(max(1, config.max_concurrent))
        self.codecs: dict[tuple[Any, ...], ChatCodec] = {}
        self.judges: dict[str, JudgeClient] = {}  # PRM clients; each one's semaphore bounds the process's requests
        self.context = ContextBudget()  # the policy server's context length, asked once; the budget clamped to it

    def step_judge(self, config: PluginConfig, instance: TaskInstance) -> StepJudge:
        key = config.prm.model_dump_json()
        if key not in self.judges:
            self.judges[key] = JudgeClient(config.prm)
        return StepJudge(self.judges[key], issue=instance.problem_statement, repo=instance.repo)

    def codec(self, config: PluginConfig) -> ChatCodec:
        key = (config.tokenizer_path, config.chat_template, config.enable_thinking)
        if key not in self.codecs:
            if not config.tokenizer_path:
                raise ValueError("no tokenizer: set --hf-checkpoint or swe_tokenizer_path")
            kwargs = {} if config.enable_thinking is None else {"enable_thinking": config.enable_thinking}
            self.codecs[key] = ChatCodec(load_tokenizer(config.tokenizer_path),
                                         ChatRenderer.from_file(config.chat_template), **kwargs)
        return self.codecs[key]


_STATE: _ProcessState | None = None


def _state(config: PluginConfig) -> _ProcessState:
    global _STATE
    if _STATE is None or _STATE.loop is not asyncio.get_running_loop():
        _STATE = _ProcessState(config)  # a new event loop (tests): the old client belongs to the old loop
    return _STATE


async def shutdown() -> None:
    """Close the shared fleet client and HTTP pool of this process (tests, clean exits)."""
    global _STATE
    if _STATE is not None and _STATE.loop is asyncio.get_running_loop():
        await _STATE.client.aclose()
        await _STATE.http.aclose()
        for judge in _STATE.judges.values():
            await judge.aclose()
    _STATE = None


# --------------------------------------------------------------------------- generate


class _Removed(Exception):
    """The rollout cannot be trained on; not the policy's fault."""


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime's custom generate: one SWE episode → a Sample, or a list of Samples (dynamic history).
    A pivot row (``metadata.pivot``, stage 1) is played by `swe_rl.pivot.generate` instead."""
    if isinstance(sample.metadata, dict) and sample.metadata.get("pivot") is not None:
        from swe_rl import pivot

        return await pivot.generate(args, sample, sampling_params, evaluation)
    config = PluginConfig.from_args(args)
    slime_runtime.check_options(args, dynamic_history=config.dynamic_history, evaluation=evaluation)
    state = _state(config)
    Sample = type(sample) if dataclasses.is_dataclass(sample) else sample_class()
    started = time.monotonic()
    sample.status = Sample.Status.PENDING  # a retried (aborted) sample starts over
    codec = state.codec(config)
    single = evaluation or not config.dynamic_history
    url = PluginConfig.router_url(args)
    budget = await state.context.budget(state.http, url, config.max_context_len)  # clamped to the server's window
    policy = SGLangTokenPolicy(codec, SGLangTokenConfig(
        url=url, sampling_params=dict(sampling_params),
        max_context_len=budget, context_management=config.context_management and not (
            single and not evaluation),
        head_ratio=config.context_head_ratio, tail_ratio=config.context_tail_ratio,
        omission_marker=config.omission_marker, timeout=config.generate_timeout,
        retries=config.generate_retries, headers=slime_runtime.routing_headers(args, sample)), http=state.http,
        should_abort=lambda: slime_runtime.slime_aborting(args))
    info: dict[str, Any] = {"removed": False, "removed_reason": None}
    agent: AgentResult | None = None
    grade: GradeResult | None = None
    instance: TaskInstance | None = None
    judge: StepJudge | None = None
    try:
        try:
            instance = instance_from_row({"metadata": sample.metadata or {}})
        except RowInvalid as exc:
            raise _Removed(f"bad_instance: {exc}") from None
        gate = certification_gate(config.require_certified)
        if gate is not None and (refusal := gate.refusal(instance.instance_id)):
            raise _Removed(refusal)
        harness = _harness(config, instance, evaluation)
        info["harness"] = harness.name
        if config.prm.enable and not evaluation:
            judge = state.step_judge(config, instance)
        async with state.semaphore:
            played = time.monotonic()
            agent, grade = await asyncio.wait_for(_play(instance, policy, harness, state, config, judge),
                                                  timeout=config.rollout_timeout)
        info["episode"] = episode_stats(agent, time.monotonic() - played - agent.seconds if grade else None)
        if policy.stop_reason == "aborted":
            if not slime_runtime.slime_aborting(args):  # not slime's abort (router restart, engine crash)
                raise _Removed(f"server_abort: {agent.error or 'request aborted'}")
            # slime aborted the request: handed back as ABORTED, neither graded nor removed
        elif agent.infra_failure or (grade is not None and grade.infra_failure):
            raise _Removed(f"env_error: {agent.error or (grade.message if grade else '')}")
        elif gate is not None and gate.flaky_only(grade):  # a flaky-only difference is no failure to learn
            raise _Removed(f"flaky_only: failed only on tests the ledger marks flaky ({grade.message})")
        elif policy.stop_reason in ("unreachable", "bad_response"):
            raise _Removed(f"policy_server: {agent.error}")
        elif not policy.trajectory or not policy.trajectory.turns:
            raise _Removed(f"no_turns: {agent.error or agent.exit_reason.value}")
    except (TimeoutError, asyncio.TimeoutError):
        info.update(removed=True, removed_reason=f"rollout_timeout: over {config.rollout_timeout}s")
    except _Removed as exc:
        info.update(removed=True, removed_reason=str(exc))
    except BaseException:
        if judge is not None:
            judge.cancel()  # cancelled rollout: no judgment outlives it
        raise
    if not info["removed"] and agent is not None and config.drop_flagged:
        flagged = rollout_integrity(agent, grade)
        if is_flagged(flagged):
            info.update(removed=True, removed_reason=f"flagged: {flagged['tamper_rules'] + sorted(flagged['flags'])}")
    if info["removed"]:
        log.warning("removing rollout of %s (group %s, index %s) from training: %s",
                    instance.instance_id if instance else "?", sample.group_index, sample.index,
                    info["removed_reason"])

    aborted = policy.stop_reason == "aborted" and not info["removed"]
    if policy.server_context_len:  # an overflow answer named the server's window: clamp the next rollouts
        state.context.learn(url, policy.server_context_len)
    if judge is not None:  # after grading: the judge had the grading time too
        if info["removed"] or aborted:
            judge.cancel()
        prm = await judge.finish(config.prm.finish_timeout)
        info["prm"] = {"step_coef": config.prm.step_coef, "model": config.prm.model, "m": config.prm.m,
                       **prm.model_dump(mode="json")}
    info.update(_summary(instance, agent, grade, policy, codec, started))
    info["aborted"] = aborted
    out_dir = None
    if config.save_traj_dir and instance is not None and not aborted:
        out_dir = await asyncio.to_thread(_save, Path(config.save_traj_dir), instance, sample, agent, grade, info,
                                          policy, sampling_params, config, evaluation)
        info["traj_dir"] = str(out_dir)
    if info["removed"] or not (policy.trajectory and policy.trajectory.turns):
        samples = [_removed_sample(Sample, sample, codec, info)]
        if not aborted:
            samples[0].reward = reward_for(samples[0], config)  # preset: upstream skips the rm for some paths
    else:
        samples = _samples(Sample, sample, policy.trajectory, codec, info, single=single)
    if aborted:
        for s in samples:
            s.status = Sample.Status.ABORTED
    return samples[-1] if single else samples


def _harness(config: PluginConfig, instance: TaskInstance, evaluation: bool) -> Any:
    """The instance's harness: eval_harness in evaluation, else its pick from harness_mix (bash_block without one)."""
    if evaluation:
        name = config.eval_harness
    elif config.harness_mix:
        name = choose_harness(instance.instance_id, config.harness_mix, config.harness_seed)
    else:
        name = "bash_block"
    if name == "bash_block":
        return BashBlockHarness(BashBlockConfig.from_yaml(config.harness_config) if config.harness_config else None)
    return harness_by_name(name)


async def _play(instance: TaskInstance, policy: SGLangTokenPolicy, harness: Any, state: _ProcessState,
                config: PluginConfig, judge: StepJudge | None = None) -> tuple[AgentResult, GradeResult | None]:
    agent_config = AgentConfig(step_limit=config.step_limit, command_timeout=config.command_timeout,
                               deadline=config.episode_deadline, env_options=dict(config.container_options),
                               git_hygiene=config.git_hygiene, monitor=config.monitor)
    agent = await run_agent(instance, policy, harness, client=state.client, config=agent_config, on_step=judge)
    if agent.infra_failure or policy.stop_reason in ("aborted", "unreachable", "bad_response"):
        return agent, None  # nothing worth grading
    grader = FleetGrader(state.client, GraderConfig(eval_timeout=config.eval_timeout, network=config.grading_network,
                                                    test_empty_patch=False,  # training: no_patch needs no run
                                                    integrity=config.integrity))
    return agent, await grader.grade(instance, agent.patch)


def _summary(instance: TaskInstance | None, agent: AgentResult | None, grade: GradeResult | None,
             policy: SGLangTokenPolicy, codec: ChatCodec, started: float) -> dict[str, Any]:
    traj = policy.trajectory
    return {
        "instance_id": instance.instance_id if instance else None,
        "status": grade.status.value if grade else GradeStatus.ENV_ERROR.value,
        "resolved": bool(grade and grade.resolved),
        "exit_reason": agent.exit_reason.value if agent else None,
        "error": agent.error if agent else None,
        "stop_reason": policy.stop_reason,
        "steps": len(agent.steps) if agent else 0,
        "format_errors": agent.format_errors if agent else 0,
        "patch_bytes": len(agent.patch.encode()) if agent else 0,
        "tokens": traj.summary() if traj else None,
        "prefix_breaks": codec.prefix_breaks,
        "weight_versions": policy.weight_versions,
        "seconds": round(time.monotonic() - started, 3),
        **rollout_integrity(agent, grade),
    }


# --------------------------------------------------------------------------- samples


def _status(Sample: Any, finish: str) -> Any:
    return {"length": Sample.Status.TRUNCATED, "abort": Sample.Status.ABORTED}.get(finish, Sample.Status.COMPLETED)


def _child(Sample: Any, parent: Any, *, tokens: list[int], mask: list[int], logprobs: list[float], status: Any,
           response: str, metadata: dict[str, Any], rollout_id: int | None, removed: bool = False) -> Any:
    fresh = {k: type(getattr(parent, k))() for k in ("spec_info", "prefix_cache_info") if hasattr(parent, k)}
    return dataclasses.replace(
        parent, tokens=tokens, response=response, response_length=len(mask), loss_mask=mask,
        rollout_log_probs=logprobs, status=status, reward=None, remove_sample=removed, metadata=metadata,
        rollout_id=rollout_id, weight_versions=list(metadata.get("swe", {}).get("weight_versions", [])), **fresh)


def _samples(Sample: Any, parent: Any, traj: TokenTrajectory, codec: ChatCodec, info: dict[str, Any], *,
             single: bool) -> list[Any]:
    base = dict(parent.metadata or {})
    if single:
        seg = traj.segments[-1]
        n = seg.end - seg.prompt_len
        status = _status(Sample, seg.turns[-1].finish_reason) if seg.turns else Sample.Status.COMPLETED
        if info.get("stop_reason") == "context_exhausted":
            status = Sample.Status.TRUNCATED
        return [_child(Sample, parent, tokens=seg.tokens[:seg.end], mask=seg.loss_mask[:n], logprobs=seg.logprobs[:n],
                       status=status, response=codec.decode(seg.tokens[seg.prompt_len:seg.end]),
                       metadata={**base, "swe": info, "swe_segment": seg.index}, rollout_id=parent.rollout_id)]
    rollout_id = parent.rollout_id if parent.rollout_id is not None else parent.index
    out = []
    for turn in traj.turns:
        seg = traj.segments[turn.segment]
        status = _status(Sample, turn.finish_reason)
        if turn is traj.turns[-1] and info.get("stop_reason") == "context_exhausted":
            status = Sample.Status.TRUNCATED
        out.append(_child(Sample, parent, tokens=seg.tokens[:turn.start + len(turn.ids)], mask=[1] * len(turn.ids),
                          logprobs=list(turn.logprobs), status=status, response=codec.decode(turn.ids),
                          metadata={**base, "swe": info, "swe_step": {"turn": turn.index, "segment": turn.segment,
                                                                      "of": len(traj.turns), **_prm_step(info, turn.index)}},
                          rollout_id=rollout_id))
    return out


def _prm_step(info: dict[str, Any], turn: int) -> dict[str, Any]:
    """The PRM score of agent step ``turn`` (= policy turn), when the judge ran."""
    prm = info.get("prm")
    if not prm:
        return {}
    judged = next((j for j in prm["steps"] if j["step"] == turn), None)
    return {"prm_score": judged["score"] if judged else None, "prm_status": judged["status"] if judged else None}


def _removed_sample(Sample: Any, parent: Any, codec: ChatCodec, info: dict[str, Any]) -> Any:
    """A minimal trainable-shaped sample with a zero loss mask: a few prompt ids, one end-of-turn id
    (``response`` is that id's text, so text and ids agree)."""
    prompt, end = removed_ids(codec)
    rollout_id = parent.rollout_id if parent.rollout_id is not None else parent.index
    return _child(Sample, parent, tokens=list(prompt) + end, mask=[0] * len(end), logprobs=[0.0] * len(end),
                  status=Sample.Status.FAILED, response=codec.decode(end),
                  metadata={**(parent.metadata or {}), "swe": info}, rollout_id=rollout_id, removed=True)


# --------------------------------------------------------------------------- reward


def reward_for(sample: Any, config: PluginConfig) -> dict[str, Any]:
    """The reward of one sample made by `generate`: the outcome (its grade is in metadata["swe"]), plus
    ``prm.step_coef`` × its step's PRM score (a step sample) or the mean step score (a whole trajectory)
    when the judge ran; a missing step score leaves the outcome alone."""
    if "pivot" in (sample.metadata or {}):
        from swe_rl import pivot

        return pivot.reward_for(sample, config)
    info = (sample.metadata or {}).get("swe")
    if info is None:
        raise ValueError("sample has no metadata['swe']: it was not produced by swe_rl.slime_plugin.generate")
    removed = bool(info.get("removed")) or bool(getattr(sample, "remove_sample", False))
    resolved = bool(info.get("resolved")) and not removed
    score = config.reward_removed if removed else config.reward_resolved if resolved else config.reward_unresolved
    if not removed and config.flagged_reward is not None and is_flagged(info):
        score = config.flagged_reward
    out = {"score": float(score), "acc": 1.0 if resolved else 0.0, "status": info.get("status"),
           "resolved": resolved, "removed": removed, "exit_reason": info.get("exit_reason")}
    prm = info.get("prm")
    if prm and not removed:
        step = (sample.metadata or {}).get("swe_step")
        step_score = step.get("prm_score") if step is not None else prm.get("mean")
        out.update(score=mixed_reward(score, step_score, config.prm.step_coef), outcome=float(score),
                   prm_score=step_score)
    return out


async def reward_func(args: Any, sample_or_samples: Any, **kwargs: Any) -> Any:
    """slime's custom reward: a dict for one Sample, a list (same nesting) for a list of Samples."""
    config = PluginConfig.from_args(args)

    def one(item: Any) -> Any:
        return [one(x) for x in item] if isinstance(item, list) else reward_for(item, config)

    return one(sample_or_samples)


# --------------------------------------------------------------------------- artifacts


def _save(root: Path, instance: TaskInstance, sample: Any, agent: AgentResult | None, grade: GradeResult | None,
          info: dict[str, Any], policy: SGLangTokenPolicy, sampling_params: dict[str, Any], config: PluginConfig,
          evaluation: bool) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    out = root / f"{instance.instance_id}__g{sample.group_index}__i{sample.index}__{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    traj = policy.trajectory
    turns = [{"turn": t.index, "segment": t.segment, "context_tokens": t.start, "sampled_tokens": len(t.ids),
              "observation_tokens": len(t.observation), "finish_reason": t.finish_reason,
              "logprob_sum": round(sum(t.logprobs), 4)} for t in (traj.turns if traj else [])]
    body = {"instance_id": instance.instance_id, "status": info["status"], "resolved": info["resolved"],
            "removed_reason": info["removed_reason"],
            **(agent.model_dump(mode="json", exclude={"instance_id", "patch"}) if agent else {}),
            "grade": grade.model_dump(mode="json") if grade else None, "token_turns": turns, "prm": info.get("prm")}
    (out / "traj.json").write_text(json.dumps(body, indent=1, ensure_ascii=False))
    (out / "patch.diff").write_text(agent.patch if agent else "")
    if grade is not None:
        write_grade_artifacts(out, grade)  # eval.log + report.json
    meta = {**{k: v for k, v in info.items() if k != "tokens"}, "tokens": info.get("tokens"),
            "image": instance.image, "data_source": instance.data_source, "group_index": sample.group_index,
            "index": sample.index, "rollout_id": sample.rollout_id, "evaluation": evaluation,
            "sampling_params": sampling_params, "config": config.model_dump(mode="json")}
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    return out

