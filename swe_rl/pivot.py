"""Stage-1 pivot mode for slime: one policy turn at an expert decision point, no sandbox.

    --custom-generate-function-path swe_rl.pivot.generate      # or swe_rl.slime_plugin.generate:
    --custom-rm-path swe_rl.pivot.reward_func --reward-key score   # it dispatches on metadata.pivot

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
(`swe_rl.pivot_reward`), and returns the sample with ``reward`` set (a dict; ``score`` is the
scalar) and ``metadata["pivot_result"]``; with ``swe_dynamic_history`` on (the default, training
only) it returns ``[sample]``, the shape end-to-end rows have, so one process always returns one
shape and a dataset may mix pivot and end-to-end rows. A turn cut at ``max_new_tokens`` is
TRUNCATED (and usually scores 0: its action is incomplete); an abort by slime is ABORTED; an abort
slime did not ask for, an unusable row, a prompt longer than the context or an unreachable router
give a minimal removed sample (a few prompt ids, one response id, zero loss mask, ``remove_sample``,
reward preset), never a negative reward. `reward_func` returns the stored reward, or scores
``sample.response`` when another generate function (slime's default) produced the sample.
Reward settings: ``swe_pivot`` (`PivotRewardConfig`) in the plugin YAML.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import Any

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from swe_rl import slime_runtime
from swe_rl.pivot_reward import ExpertAction, PivotRewardConfig, PivotScore, score_turn
from swe_rl.plugin_config import PluginConfig
from swe_rl.policies.sglang_tokens import (
    PolicyAborted,
    SGLangTokenConfig,
    SGLangTokenPolicy,
)
from swe_rl.slime_sample import removed_ids, sample_class
from swe_rl.tokens import ChatCodec, ChatRenderer, load_tokenizer

__all__ = ["PivotRow", "generate", "reward_config", "reward_for", "reward_func", "shutdown"]

log = logging.getLogger(__name__)
TOOL_HARNESSES = ("codeact", "codex", "opencode")
"""Harness names a pivot row may give: their tool calls are Hermes / OpenAI tool calls."""


class PivotRow(BaseModel):
    """``metadata["pivot"]`` of a pivot sample."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]] = Field(min_length=1)
    """The context: OpenAI-style messages up to (not including) the expert's turn."""
    tools: list[dict[str, Any]] | None = None
    """OpenAI tool schemas rendered into the system prompt (tool-calling harnesses); None for bash blocks."""
    expected_action: dict[str, Any]
    """The expert's action: ``{"tool": ..., "arguments": {...}}`` (a bash block is tool ``bash``)."""
    harness: str = "bash_block"
    """How the policy's turn is parsed: ``bash_block``, ``tool_call`` (Hermes ``<tool_call>``) or ``auto``; or
    a tool-calling harness by name (``codeact``, ``codex``, ``opencode``): its calls are parsed as ``tool_call``,
    and its tool schemas are the row's ``tools`` when the row has none."""
    workdir: str | None = None
    """The episode's working directory (paths are compared relative to it); None for the reward config's."""
    instance_id: str | None = None
    step_index: int | None = None
    """Index of the expert's turn among the trajectory's assistant turns."""
    source: str | None = None
    pivot_id: str | None = None

    @field_validator("messages")
    @classmethod
    def _context_ends_before_an_assistant_turn(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if value[-1].get("role") == "assistant":
            raise ValueError("the context must end before the expert's turn, not with an assistant message")
        return value

    @model_validator(mode="after")
    def _harness_tools(self) -> PivotRow:
        if self.harness in TOOL_HARNESSES and self.tools is None:
            from swe_rl.harnesses.registry import harness_by_name

            self.tools = harness_by_name(self.harness).tool_schemas
        return self

    @property
    def parser(self) -> str:
        """How `swe_rl.pivot_reward.parse_action` reads the policy's turn."""
        return "tool_call" if self.harness in TOOL_HARNESSES else self.harness

    def expert(self) -> ExpertAction:
        return ExpertAction.from_any(self.expected_action)


def reward_config(config: PluginConfig) -> PivotRewardConfig:
    return config.pivot


# --------------------------------------------------------------------------- process state



class _State:
    def __init__(self, config: PluginConfig) -> None:
        self.loop = asyncio.get_running_loop()
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(config.generate_timeout, connect=30.0),
                                      limits=httpx.Limits(max_connections=None, max_keepalive_connections=256))
        self.codecs: dict[tuple[Any, ...], ChatCodec] = {}

    def codec(self, config: PluginConfig, tools: list[dict[str, Any]] | None) -> ChatCodec:
        tools_key = json.dumps(tools, sort_keys=True) if tools else None
        key = (config.tokenizer_path, config.chat_template, config.enable_thinking, tools_key)
        if key not in self.codecs:
            if not config.tokenizer_path:
                raise ValueError("no tokenizer: set --hf-checkpoint or swe_tokenizer_path")
            kwargs: dict[str, Any] = {} if config.enable_thinking is None else {"enable_thinking": config.enable_thinking}
            if tools:
                kwargs["tools"] = tools
            if len(self.codecs) > 256:  # rows of many different tool sets: keep the cache bounded
                self.codecs.clear()
            self.codecs[key] = ChatCodec(load_tokenizer(config.tokenizer_path),
                                         ChatRenderer.from_file(config.chat_template), **kwargs)
        return self.codecs[key]


_STATE: _State | None = None


def _state(config: PluginConfig) -> _State:
    global _STATE
    if _STATE is None or _STATE.loop is not asyncio.get_running_loop():
        _STATE = _State(config)
    return _STATE


async def shutdown() -> None:
    """Close this process's HTTP pool (tests, clean exits)."""
    global _STATE
    if _STATE is not None and _STATE.loop is asyncio.get_running_loop():
        await _STATE.http.aclose()
    _STATE = None


# --------------------------------------------------------------------------- generate


class _Removed(Exception):
    """The sample cannot be trained on; not the policy's fault."""


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime's custom generate for a pivot row: one turn, scored; returns the same sample, filled in
    (``[sample]`` in training with dynamic history, the shape of end-to-end rows)."""
    config = PluginConfig.from_args(args)
    slime_runtime.check_options(args, dynamic_history=config.dynamic_history, evaluation=evaluation)
    out = await _generate(args, sample, sampling_params, evaluation, config)
    if evaluation or not config.dynamic_history:
        return out
    if out.rollout_id is None:
        out.rollout_id = out.index
    return [out]


async def _generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool,
                    config: PluginConfig) -> Any:
    Sample = type(sample) if dataclasses.is_dataclass(sample) else sample_class()
    started = time.monotonic()
    sample.status = Sample.Status.PENDING
    metadata = dict(sample.metadata or {})
    result: dict[str, Any] = {"removed": False, "removed_reason": None}
    codec = _state(config).codec(config, None)  # the removed sample's ids, whatever the row holds
    try:
        try:
            row = PivotRow.model_validate(metadata.get("pivot"))
            expert = row.expert()
        except (ValidationError, ValueError, TypeError) as exc:
            raise _Removed(f"bad_pivot: {exc}") from None
        result.update(instance_id=row.instance_id, step_index=row.step_index, pivot_id=row.pivot_id)
        state = _state(config)
        codec = state.codec(config, row.tools)
        prompt = codec.prompt_ids(row.messages)
        params = dict(sampling_params)
        if config.max_context_len is not None:
            room = config.max_context_len - len(prompt)
            if room <= 0:
                raise _Removed(f"context_too_long: {len(prompt)} prompt ids, context {config.max_context_len}")
            params["max_new_tokens"] = min(int(params.get("max_new_tokens") or room), room)
        policy = SGLangTokenPolicy(codec, SGLangTokenConfig(
            url=PluginConfig.router_url(args), sampling_params=params, max_context_len=None,
            context_management=False, timeout=config.generate_timeout, retries=config.generate_retries,
            headers=slime_runtime.routing_headers(args, sample)), http=state.http,
            should_abort=lambda: slime_runtime.slime_aborting(args))
        try:
            turn = await policy.act([dict(m) for m in row.messages])
        except PolicyAborted as exc:
            if not slime_runtime.slime_aborting(args):  # not slime's abort (router restart, engine crash)
                raise _Removed(f"server_abort: {exc}") from None
            sample.tokens, sample.response, sample.response_length = list(prompt), "", 0
            sample.loss_mask, sample.rollout_log_probs, sample.reward = [], [], None
            sample.status = Sample.Status.ABORTED
            sample.metadata = {**metadata, "pivot_result": {**result, "aborted": True}}
            return sample
        except Exception as exc:
            raise _Removed(f"policy_server: {type(exc).__name__}: {exc}") from None
    except _Removed as exc:
        result.update(removed=True, removed_reason=str(exc))
        log.warning("removing pivot sample (group %s, index %s) from training: %s", sample.group_index, sample.index,
                    exc)
        return _removed(Sample, sample, codec, metadata, result, config)

    assert policy.trajectory is not None
    sampled = policy.trajectory.turns[0]
    scored = score_turn(turn.text, expert, _row_config(config, row), harness=row.parser, tools=row.tools)
    result.update(_result(scored), finish_reason=sampled.finish_reason, prompt_tokens=len(prompt),
                  response_tokens=len(sampled.ids), weight_versions=policy.weight_versions,
                  seconds=round(time.monotonic() - started, 3))
    sample.tokens = list(prompt) + list(sampled.ids)
    sample.response = codec.decode(sampled.ids)
    sample.response_length = len(sampled.ids)
    sample.loss_mask = [1] * len(sampled.ids)
    sample.rollout_log_probs = list(sampled.logprobs)
    sample.weight_versions = list(policy.weight_versions)
    sample.status = {"length": Sample.Status.TRUNCATED}.get(sampled.finish_reason, Sample.Status.COMPLETED)
    sample.metadata = {**metadata, "pivot_result": result}
    sample.reward = _reward(result, config)
    return sample


def _row_config(config: PluginConfig, row: PivotRow) -> PivotRewardConfig:
    cfg = reward_config(config)
    return cfg.model_copy(update={"workdir": row.workdir}) if row.workdir else cfg


def _result(scored: PivotScore) -> dict[str, Any]:
    return {"score": scored.score, "category": scored.category.value, "details": scored.details}


def _removed(Sample: Any, sample: Any, codec: ChatCodec, metadata: dict[str, Any], result: dict[str, Any],
             config: PluginConfig) -> Any:
    """A minimal trainable-shaped sample with a zero loss mask: a few prompt ids, one end-of-turn id."""
    prompt, end = removed_ids(codec)
    sample.tokens = list(prompt) + end
    sample.response, sample.response_length = codec.decode(end), len(end)  # text and ids agree
    sample.loss_mask, sample.rollout_log_probs = [0] * len(end), [0.0] * len(end)
    sample.status, sample.remove_sample = Sample.Status.FAILED, True
    sample.metadata = {**metadata, "pivot_result": result}
    sample.reward = _reward(result, config)
    return sample


# --------------------------------------------------------------------------- reward


def _reward(result: dict[str, Any], config: PluginConfig) -> dict[str, Any]:
    if result.get("removed"):
        return {"score": float(config.reward_removed), "acc": 0.0, "category": "removed", "removed": True}
    return {"score": float(result["score"]), "acc": 1.0 if result["category"] == "match" else 0.0,
            "category": result["category"], "removed": False}


def reward_for(sample: Any, config: PluginConfig) -> dict[str, Any]:
    """The pivot reward of one sample: the one `generate` stored, else scored from ``sample.response``."""
    metadata = sample.metadata or {}
    result = metadata.get("pivot_result")
    if result is None or result.get("aborted"):
        if "pivot" not in metadata:
            raise ValueError("sample has no metadata['pivot']: not a pivot sample")
        try:
            row = PivotRow.model_validate(metadata["pivot"])
            scored = score_turn(sample.response or "", row.expert(), _row_config(config, row), harness=row.parser,
                                tools=row.tools)
            result = _result(scored)
        except (ValidationError, ValueError, TypeError) as exc:
            result = {"removed": True, "removed_reason": f"bad_pivot: {exc}"}
    if getattr(sample, "remove_sample", False):
        result = {**result, "removed": True}
    return _reward(result, config)


async def reward_func(args: Any, sample_or_samples: Any, **kwargs: Any) -> Any:
    """slime's custom reward: a dict for one Sample, a list (same nesting) for a list of Samples."""
    config = PluginConfig.from_args(args)

    def one(item: Any) -> Any:
        return [one(x) for x in item] if isinstance(item, list) else reward_for(item, config)

    return one(sample_or_samples)
