"""The slime `Sample`s the plugin builds, for both modes: the class, a removed sample, step samples.

`removed_sample` is the one shape of a sample that cannot be trained on (infrastructure failure,
unusable row, abort slime did not ask for): a few prompt ids, one end-of-turn id, zero loss mask,
``remove_sample``, status FAILED. `trajectory_samples` cuts a token trajectory into training samples:
one per context segment (the default), one per policy turn, or one of the last segment.

`sample_class()` returns ``slime.utils.types.Sample`` when importable. Without slime
(tests, eval machines) it returns `CompatSample`: a dataclass with the same field
names, annotations, defaults and `Status` values as upstream at the pinned commit
(``third_party/slime.md``), so code written against one works with the other;
``tests/slime/test_samples.py`` checks it against ``tests/data/slime_sample_fields.json``.
Tensor-typed fields are annotated as upstream (strings here: torch is not imported).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from swe_rl.slime.records import SEGMENT_KEY, STEP_KEY, SWE_KEY
from swe_rl.slime.replay import ReplaySettings, fill_segment, fill_turn

if TYPE_CHECKING:
    import torch  # upstream's annotations name torch.Tensor; never imported at run time

__all__ = [
    "CompatSample",
    "Removed",
    "child_sample",
    "removed_ids",
    "removed_sample",
    "rollout_id_of",
    "sample_class",
    "sample_class_of",
    "trajectory_samples",
]


class Removed(Exception):
    """The rollout cannot be trained on, and not by the policy's fault: the message is its removed_reason."""


@dataclass
class CompatSample:
    """Field-for-field stand-in for ``slime.utils.types.Sample`` (no methods beyond what we use)."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: list[int] | torch.Tensor | None = None
    rollout_top_p_token_offsets: list[int] | torch.Tensor | None = None
    rollout_routed_experts: list[list[int]] | torch.Tensor | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    @dataclass
    class SpecInfo:
        spec_accept_token_num: int = 0
        spec_draft_token_num: int = 0
        spec_verify_ct: int = 0
        completion_token_num: int = 0

    @dataclass
    class PrefixCacheInfo:
        cached_tokens: int = 0
        total_prompt_tokens: int = 0

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0
    spec_info: SpecInfo = field(default_factory=SpecInfo)
    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)

    def get_reward_value(self, args: Any) -> float:
        key = getattr(args, "reward_key", None)
        return self.reward if not key else self.reward[key]  # type: ignore[index,return-value]

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length


def sample_class() -> type[CompatSample]:
    """``slime.utils.types.Sample`` if slime is installed, else `CompatSample`."""
    try:
        from slime.utils.types import Sample
    except ImportError:
        return CompatSample
    return Sample


def removed_ids(codec: Any) -> tuple[list[int], list[int]]:
    """Prompt and response ids of a removed sample (zero loss mask): the assistant header — a few ids, never an
    empty prompt (training reads the logits before the response) — and one end-of-turn id. Minimal, so a
    removed rollout never becomes a full-length row of zero gradient."""
    prompt = list(codec.header_ids) or list(codec.encode(codec.turn_end))
    return prompt, list(codec.encode(codec.turn_end))[:1]


def sample_class_of(sample: Any) -> type[CompatSample]:
    """The class to build samples of: the given sample's own when it is a dataclass, else `sample_class()`."""
    if dataclasses.is_dataclass(sample):
        own: Any = type(sample)  # slime's Sample or ours: the same fields
        return own
    return sample_class()


def rollout_id_of(parent: Any) -> int | None:
    """The id siblings of one rollout share: the parent's ``rollout_id``, else its ``index``."""
    return parent.rollout_id if parent.rollout_id is not None else parent.index


def child_sample(
    parent: Any,
    *,
    tokens: list[int],
    mask: list[int],
    logprobs: list[float],
    status: Any,
    response: str,
    metadata: dict[str, Any],
    rollout_id: int | None,
    removed: bool = False,
    weight_versions: list[Any] | None = None,
) -> Any:
    """A copy of ``parent`` (group fields and all) with a new response; no reward yet."""
    fresh = {k: type(getattr(parent, k))() for k in ("spec_info", "prefix_cache_info") if hasattr(parent, k)}
    return dataclasses.replace(
        parent,
        tokens=tokens,
        response=response,
        response_length=len(mask),
        loss_mask=mask,
        rollout_log_probs=logprobs,
        status=status,
        reward=None,
        remove_sample=removed,
        metadata=metadata,
        rollout_id=rollout_id,
        weight_versions=list(weight_versions or []),
        rollout_top_p_token_ids=None,  # filled from the sample's own calls (`swe_rl.slime.replay`)
        rollout_top_p_token_offsets=None,
        rollout_routed_experts=None,
        **fresh,
    )


def removed_sample(Sample: type[CompatSample], parent: Any, codec: Any, metadata: dict[str, Any]) -> Any:
    """A minimal trainable-shaped sample with a zero loss mask: a few prompt ids, one end-of-turn id
    (``response`` is that id's text, so text and ids agree); FAILED, ``remove_sample`` set."""
    prompt, end = removed_ids(codec)
    return child_sample(
        parent,
        tokens=list(prompt) + end,
        mask=[0] * len(end),
        logprobs=[0.0] * len(end),
        status=Sample.Status.FAILED,
        response=codec.decode(end),
        metadata=metadata,
        rollout_id=rollout_id_of(parent),
        removed=True,
        weight_versions=(metadata.get(SWE_KEY) or {}).get("weight_versions"),
    )


def _status(Sample: type[CompatSample], finish: str) -> Any:
    return {"length": Sample.Status.TRUNCATED, "abort": Sample.Status.ABORTED}.get(
        finish, Sample.Status.COMPLETED
    )


def _prm_step(record: dict[str, Any], turn: int) -> dict[str, Any]:
    """The PRM score of agent step ``turn`` (= policy turn), when the judge ran."""
    prm = record.get("prm")
    if not prm:
        return {}
    judged = next((j for j in prm["steps"] if j["step"] == turn), None)
    return {
        "prm_score": judged["score"] if judged else None,
        "prm_status": judged["status"] if judged else None,
    }


def trajectory_samples(
    Sample: type[CompatSample],
    parent: Any,
    traj: Any,
    codec: Any,
    record: dict[str, Any],
    *,
    mode: str,
    replay: ReplaySettings | None = None,
) -> list[Any]:
    """The training samples of a played token trajectory (``record``: the rollout's ``metadata["swe"]``).

    ``mode`` (`PluginConfig.samples`): ``segment``, one sample per context segment — its ids, a loss mask over
    every sampled id of every turn in it (observations, markers and its prompt masked) and the log-probs on
    that mask; ``turn``, one sample per policy turn on exactly the context it saw; ``last``, one sample of the
    last segment. Siblings share the parent's rollout id (``last``: the parent's own). Each sample also gets
    the routed experts, top-p ids and call counts slime's own path would give it (`swe_rl.slime.replay`)."""
    replay = replay or ReplaySettings()
    base = dict(parent.metadata or {})
    versions = record.get("weight_versions")
    exhausted = record.get("stop_reason") == "context_exhausted"
    if mode == "turn":
        return _turn_samples(Sample, parent, traj, codec, record, base, replay)
    segments = [s for s in traj.segments if s.turns]  # a compaction right before the end starts none
    if mode == "last":
        segments = segments[-1:]
    out = []
    for seg in segments:
        n = seg.end - seg.prompt_len
        status = _status(Sample, seg.turns[-1].finish_reason) if seg.turns else Sample.Status.COMPLETED
        if exhausted and seg is segments[-1]:
            status = Sample.Status.TRUNCATED
        sample = child_sample(
            parent,
            tokens=seg.tokens[: seg.end],
            mask=seg.loss_mask[:n],
            logprobs=seg.logprobs[:n],
            status=status,
            response=codec.decode(seg.tokens[seg.prompt_len : seg.end]),
            metadata={**base, SWE_KEY: record, SEGMENT_KEY: seg.index},
            rollout_id=parent.rollout_id if mode == "last" else rollout_id_of(parent),
            weight_versions=versions,
        )
        fill_segment(sample, seg, replay, calls=traj.turns if mode == "last" else None)
        out.append(sample)
    return out


def _turn_samples(
    Sample: type[CompatSample],
    parent: Any,
    traj: Any,
    codec: Any,
    record: dict[str, Any],
    base: dict[str, Any],
    replay: ReplaySettings,
) -> list[Any]:
    """One sample per policy turn on exactly the context it saw (its sampled ids are the response)."""
    versions = record.get("weight_versions")
    exhausted = record.get("stop_reason") == "context_exhausted"
    rollout_id = rollout_id_of(parent)
    out = []
    for turn in traj.turns:
        seg = traj.segments[turn.segment]
        status = _status(Sample, turn.finish_reason)
        if turn is traj.turns[-1] and exhausted:
            status = Sample.Status.TRUNCATED
        step = {
            "turn": turn.index,
            "segment": turn.segment,
            "of": len(traj.turns),
            **_prm_step(record, turn.index),
        }
        sample = child_sample(
            parent,
            tokens=seg.tokens[: turn.start + len(turn.ids)],
            mask=[1] * len(turn.ids),
            logprobs=list(turn.logprobs),
            status=status,
            response=codec.decode(turn.ids),
            metadata={**base, SWE_KEY: record, STEP_KEY: step},
            rollout_id=rollout_id,
            weight_versions=versions,
        )
        fill_turn(sample, turn, replay)
        out.append(sample)
    return out
