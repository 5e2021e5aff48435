"""Stage-1 pivot mode for slime: one policy turn at an expert decision point, no sandbox.

    --custom-generate-function-path swe_rl.slime.pivot.generate   # or swe_rl.slime.e2e.generate:
    --custom-rm-path swe_rl.slime.reward.reward_func --reward-key score   # both dispatch on metadata.pivot

A pivot row (made by ``data/build_pivot_dataset.py``) carries the context messages, the
tools, and the expert's action at that point::

    {"text": "<last user message>",
     "metadata": {"pivot": {"messages": [...], "tools": [...] | null,
                            "expected_action": {"tool": "bash", "arguments": {"command": "..."}},
                            "harness": "bash_block" | "tool_call" | "codeact" | "codex" | "opencode", "workdir": "/testbed",
                            "instance_id": "...", "step_index": 3, "source": "...", "pivot_id": "...",
                            "profile": {...}},                      # from data/profile_pivots.py
                  "data_source": "pivot"}}

`generate` renders the messages (and tools) with the chat template — earlier turns keep their
thinking — makes **one** ``/generate`` call on the ids with ``return_logprob`` (token-exact, as
in end-to-end mode: the sample is the prompt ids followed by exactly the sampled ids, mask 1,
their log-probs), parses the action with the row's harness, scores it against the expert's
(`swe_rl.rewards.pivot`), and returns the sample with ``reward`` set (a dict; ``score`` is the
scalar) and ``metadata["pivot_result"]``; with ``swe_samples`` segment or turn (the default, training
only) it returns ``[sample]``, the shape end-to-end rows have, so one process always returns one
shape and a dataset may mix pivot and end-to-end rows. A turn cut at ``max_new_tokens`` is
TRUNCATED (and usually scores 0: its action is incomplete); an abort by slime is ABORTED; an abort
slime did not ask for, an unusable row, a prompt longer than the context or an unreachable router
give a minimal removed sample (a few prompt ids, one response id, zero loss mask, ``remove_sample``,
reward preset), never a negative reward. `swe_rl.slime.reward.reward_func` returns the stored reward, or
scores ``sample.response`` when another generate function (slime's default) produced the sample.
The row is `swe_rl.slime.records.PivotRow`, the result `PivotRecord` (``metadata["pivot_result"]``).
Reward settings: ``swe_pivot`` (`PivotRewardConfig`) in the plugin YAML.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError

from swe_rl.policies.sglang_tokens import (
    PolicyAborted,
    SGLangTokenConfig,
    SGLangTokenPolicy,
)
from swe_rl.rewards.pivot import score_turn
from swe_rl.slime import pivot_exec, runtime
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.records import PIVOT_RESULT_KEY, PivotRecord, PivotRow
from swe_rl.slime.replay import ReplaySettings, fill_removed, fill_turn
from swe_rl.slime.reward import pivot_reward, pivot_row_config, scored_record
from swe_rl.slime.runtime import shutdown
from swe_rl.slime.samples import Removed, removed_sample, sample_class_of

__all__ = ["PivotRow", "generate", "shutdown"]

log = logging.getLogger(__name__)


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime's custom generate for a pivot row: one turn, scored; returns the same sample, filled in
    (``[sample]`` in training with ``swe_samples: segment`` or ``turn``, the shape of end-to-end rows)."""
    config = PluginConfig.from_args(args)
    runtime.check_options(args, config, evaluation=evaluation, several=False)
    settings = pivot_exec.PivotExecSettings.from_args(args)
    if evaluation:
        settings = pivot_exec.PivotExecSettings()  # evaluation scores by matching
    try:
        out = await _generate(args, sample, sampling_params, evaluation, config, settings)
    finally:
        if settings.executes:  # the group's last sample deletes the pivot's snapshot
            await pivot_exec.release(args, sample, config)
    if evaluation or not config.multi_sample:
        return out
    if out.rollout_id is None:
        out.rollout_id = out.index
    return [out]


async def _generate(
    args: Any,
    sample: Any,
    sampling_params: dict[str, Any],
    evaluation: bool,
    config: PluginConfig,
    settings: pivot_exec.PivotExecSettings,
) -> Any:
    Sample = sample_class_of(sample)
    started = time.monotonic()
    sample.status = Sample.Status.PENDING
    metadata = dict(sample.metadata or {})
    result: dict[str, Any] = {"removed": False, "removed_reason": None}
    codec = runtime.state(config).codec(config)  # the removed sample's ids, whatever the row holds
    try:
        try:
            row = PivotRow.model_validate(metadata.get("pivot"))
            expert = row.expert()
        except (ValidationError, ValueError, TypeError) as exc:
            raise Removed(f"bad_pivot: {exc}") from None
        result.update(instance_id=row.instance_id, step_index=row.step_index, pivot_id=row.pivot_id)
        state = runtime.state(config)
        codec = state.codec(config, row.tools)
        prompt = codec.prompt_ids(row.messages)
        params = dict(sampling_params)
        if config.max_context_len is not None:
            room = config.max_context_len - len(prompt)
            if room <= 0:
                raise Removed(f"context_too_long: {len(prompt)} prompt ids, context {config.max_context_len}")
            params["max_new_tokens"] = min(int(params.get("max_new_tokens") or room), room)
        policy = SGLangTokenPolicy(
            codec,
            SGLangTokenConfig(
                url=PluginConfig.router_url(args),
                sampling_params=params,
                max_context_len=None,
                context_management=False,
                timeout=config.generate_timeout,
                retries=config.generate_retries,
                headers=runtime.routing_headers(args, sample),
                return_routed_experts=ReplaySettings.from_args(args).routing,
            ),
            http=state.http,
            should_abort=lambda: runtime.slime_aborting(args),
        )
        try:
            turn = await policy.act([dict(m) for m in row.messages])
        except PolicyAborted as exc:
            if not runtime.slime_aborting(args):  # not slime's abort (router restart, engine crash)
                raise Removed(f"server_abort: {exc}") from None
            sample.tokens, sample.response, sample.response_length = list(prompt), "", 0
            sample.loss_mask, sample.rollout_log_probs, sample.reward = [], [], None
            sample.status = Sample.Status.ABORTED
            fill_removed(sample, ReplaySettings.from_args(args))
            sample.metadata = {
                **metadata,
                PIVOT_RESULT_KEY: PivotRecord(**result, aborted=True).to_metadata(),
            }
            return sample
        except Exception as exc:  # noqa: BLE001 - any other policy-server failure removes the sample
            raise Removed(f"policy_server: {type(exc).__name__}: {exc}") from None
        scored = score_turn(
            turn.text, expert, pivot_row_config(config, row), harness=row.parser, tools=row.tools
        )
        result.update(scored_record(scored))
        if settings.executes and scored.category.value != "no_action":  # run it in the expert's state
            score, execution = await pivot_exec.execute_pivot(
                args, sample, row, turn, config, settings, scored.score
            )
            result.update(score=score, execution=execution)
    except Removed as exc:
        result.update(removed=True, removed_reason=str(exc))
        log.warning(
            "removing pivot sample (group %s, index %s) from training: %s",
            sample.group_index,
            sample.index,
            exc,
        )
        record = PivotRecord(**result)
        out = removed_sample(Sample, sample, codec, {**metadata, PIVOT_RESULT_KEY: record.to_metadata()})
        out.rollout_id = sample.rollout_id  # generate names the trajectory, as for a played sample
        out.reward = pivot_reward(record, config)
        fill_removed(out, ReplaySettings.from_args(args))
        return out

    assert policy.trajectory is not None
    sampled = policy.trajectory.turns[0]
    result.update(
        finish_reason=sampled.finish_reason,
        prompt_tokens=len(prompt),
        response_tokens=len(sampled.ids),
        weight_versions=policy.weight_versions,
        seconds=round(time.monotonic() - started, 3),
    )
    sample.tokens = list(prompt) + list(sampled.ids)
    sample.response = codec.decode(sampled.ids)
    sample.response_length = len(sampled.ids)
    sample.loss_mask = [1] * len(sampled.ids)
    sample.rollout_log_probs = list(sampled.logprobs)
    sample.weight_versions = list(policy.weight_versions)
    sample.status = {"length": Sample.Status.TRUNCATED}.get(sampled.finish_reason, Sample.Status.COMPLETED)
    fill_turn(sample, sampled, ReplaySettings.from_args(args))  # routed experts, top-p ids, the call's counts
    record = PivotRecord(**result)
    sample.metadata = {**metadata, PIVOT_RESULT_KEY: record.to_metadata()}
    sample.reward = pivot_reward(record, config)
    return sample
