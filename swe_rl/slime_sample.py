"""The slime `Sample` the plugin builds: upstream's class when slime is installed, else a stand-in.

`sample_class()` returns ``slime.utils.types.Sample`` when importable. Without slime
(tests, eval machines) it returns `CompatSample`: a dataclass with the same field
names, annotations, defaults and `Status` values as upstream at the pinned commit
(``third_party/slime.md``), so code written against one works with the other;
``tests/test_slime_sample.py`` checks it against ``tests/data/slime_sample_fields.json``.
Tensor-typed fields are annotated as upstream (strings here: torch is not imported).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["CompatSample", "removed_ids", "sample_class"]


@dataclass
class _SpecInfo:
    spec_accept_token_num: int = 0
    spec_draft_token_num: int = 0
    spec_verify_ct: int = 0
    completion_token_num: int = 0


@dataclass
class _PrefixCacheInfo:
    cached_tokens: int = 0
    total_prompt_tokens: int = 0


class _Status(Enum):
    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


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
    rollout_top_p_token_ids: list[int] | torch.Tensor | None = None  # noqa: F821 - annotation only
    rollout_top_p_token_offsets: list[int] | torch.Tensor | None = None  # noqa: F821
    rollout_routed_experts: list[list[int]] | torch.Tensor | None = None  # noqa: F821
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    Status = _Status
    SpecInfo = _SpecInfo
    PrefixCacheInfo = _PrefixCacheInfo

    status: Status = _Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0
    spec_info: SpecInfo = field(default_factory=_SpecInfo)
    prefix_cache_info: PrefixCacheInfo = field(default_factory=_PrefixCacheInfo)

    def get_reward_value(self, args: Any) -> float:
        key = getattr(args, "reward_key", None)
        return self.reward if not key else self.reward[key]  # type: ignore[index,return-value]

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length


def sample_class() -> type:
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
