"""A compacting multi-turn episode against the project's SGLang-protocol server, and slime's path on its calls.

`play` drives `SGLangTokenPolicy` turn by turn (no container: the observations are scripted) on a MoE
`FakeSGLang` with top-p ids, speculative counts and a prefix cache, in a window small enough to compact
twice. `slime_path` feeds the same calls' answers to a Sample's ``append_response_tokens`` the way slime's own
multi-turn path does (each call's input is the sample's tokens; the ids between two calls are environment
ids): with upstream's ``Sample`` that is slime itself; with `RestatedSample` it is our restatement of it
(what CI checks, slime being absent there).
"""

from __future__ import annotations

import base64
from argparse import Namespace
from array import array
from typing import Any

from swe_rl.policies.sglang_tokens import SGLangTokenConfig, SGLangTokenPolicy
from swe_rl.slime.replay import ReplaySettings
from swe_rl.testing.fake_sglang import FakeSGLang

MOE = (3, 2, 8)
"""Layers, top-k, experts of the served model."""
PARAMS = {
    "temperature": 1.0,
    "top_p": 0.95,
    "max_new_tokens": 48,
    "custom_params": {"return_top_p_token_ids": True},  # what slime's GenerateState adds below top-p 1
}
SYSTEM = {"role": "system", "content": "You are a shell agent."}
PROBLEM = {"role": "user", "content": "Fix the bug in toolz.interleave."}


def reply(i: int) -> str:
    return f"<think>\nstep {i}\n</think>\n\n```bash\nsed -n {i},{i + 9}p toolz/itertoolz.py\n```"


def slime_args(**over: Any) -> Namespace:
    """slime's args the replay reads."""
    layers, topk, experts = MOE
    base = dict(
        use_rollout_routing_replay=True,
        num_layers=layers,
        moe_router_topk=topk,
        num_experts=experts,
        rollout_top_p=0.95,
        sglang_speculative_algorithm="EAGLE",
    )
    return Namespace(**{**base, **over})


def settings(**over: Any) -> ReplaySettings:
    return ReplaySettings.from_args(slime_args(**over))


async def play(codec: Any, sglang: FakeSGLang, turns: int = 9, **config: Any) -> SGLangTokenPolicy:
    """``turns`` turns in a window that compacts (to 60%) about every three turns."""
    prompt = codec.prompt_ids([SYSTEM, PROBLEM])
    sglang.add(*[reply(i) for i in range(turns)])
    policy = SGLangTokenPolicy(
        codec,
        SGLangTokenConfig(
            url=f"{sglang.url}/generate",
            sampling_params=dict(PARAMS),
            max_context_len=len(prompt) + 300,
            low_water=0.6,
            return_routed_experts=True,
            **config,
        ),
    )
    messages = [SYSTEM, PROBLEM]
    try:
        for i in range(turns):
            turn = await policy.act(messages)
            messages.append({"role": "assistant", "content": turn.text, "reasoning_content": turn.reasoning})
            messages.append({"role": "user", "content": "\n".join(f"{n}: line {n}" for n in range(i, i + 9))})
    finally:
        await policy.aclose()
    return policy


def calls_of(sglang: FakeSGLang, turns: list[Any]) -> list[tuple[list[int], dict[str, Any]]]:
    """The (input ids, answer meta_info) of the calls that sampled ``turns`` (one call per turn)."""
    return [(sglang.requests[t.index]["input_ids"], sglang.answers[t.index]) for t in turns]


def slime_path(Sample: Any, args: Namespace, calls: list[tuple[list[int], dict[str, Any]]]) -> Any:
    """The sample slime's own multi-turn path builds from these calls."""
    sample = Sample(tokens=list(calls[0][0]))
    for i, (inputs, meta) in enumerate(calls):
        if i:
            assert inputs[: len(sample.tokens)] == list(sample.tokens)
            sample.append_response_tokens(args, tokens=inputs[len(sample.tokens) :], trainable=False)
        pairs = meta["output_token_logprobs"]
        sample.append_response_tokens(
            args,
            tokens=[p[1] for p in pairs],
            log_probs=[p[0] for p in pairs],
            trainable=True,
            meta_info=meta,
        )
    return sample


def _ints(value: str) -> list[int]:
    out = array("i")
    out.frombytes(base64.b64decode(value))
    return out.tolist()


class RestatedSample:
    """Our restatement of what upstream's ``append_response_tokens`` keeps (pin 624b824a), plain lists."""

    class Info(Namespace):
        pass

    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.response_length = list(tokens), 0
        self.loss_mask: list[int] = []
        self.rollout_log_probs: list[float] = []
        self.rollout_top_p_token_ids: list[int] | None = None
        self.rollout_top_p_token_offsets: list[int] | None = None
        self.rollout_routed_experts: list[list[list[int]]] | None = None
        self.prefix_cache_info = self.Info(cached_tokens=0, total_prompt_tokens=0)
        self.spec_info = self.Info(
            spec_accept_token_num=0, spec_draft_token_num=0, spec_verify_ct=0, completion_token_num=0
        )

    def append_response_tokens(
        self,
        args: Namespace,
        *,
        tokens: list[int],
        trainable: bool,
        log_probs: Any = None,
        meta_info: Any = None,
    ) -> None:
        self.tokens += tokens
        self.response_length += len(tokens)
        self.loss_mask += [int(trainable)] * len(tokens)
        self.rollout_log_probs += list(log_probs) if trainable else [0.0] * len(tokens)
        if not trainable:  # environment ids: empty top-p spans
            if self.rollout_top_p_token_offsets is not None:
                self.rollout_top_p_token_offsets += [self.rollout_top_p_token_offsets[-1]] * len(tokens)
            return
        meta = meta_info
        if "top_p_token_ids" in meta:
            ids, offsets = _ints(meta["top_p_token_ids"]), _ints(meta["top_p_token_offsets"])
            base_ids = self.rollout_top_p_token_ids or []
            base_offsets = self.rollout_top_p_token_offsets or [0]
            self.rollout_top_p_token_ids = base_ids + ids
            self.rollout_top_p_token_offsets = base_offsets + [base_offsets[-1] + o for o in offsets[1:]]
        if "routed_experts" in meta:  # rows [start, len(tokens) - 1), after the sample's own rows [0, start)
            start, flat = int(meta.get("routed_experts_start_len") or 0), _ints(meta["routed_experts"])
            layers, topk = args.num_layers, args.moe_router_topk
            rows = len(self.tokens) - 1 - start
            assert len(flat) == rows * layers * topk
            new = [
                [flat[(r * layers + k) * topk : (r * layers + k + 1) * topk] for k in range(layers)]
                for r in range(rows)
            ]
            self.rollout_routed_experts = (self.rollout_routed_experts or [])[:start] + new
        if args.sglang_speculative_algorithm:
            self.spec_info.spec_accept_token_num += meta.get("spec_accept_token_num", 0)
            self.spec_info.spec_draft_token_num += meta.get("spec_draft_token_num", 0)
            self.spec_info.spec_verify_ct += meta.get("spec_verify_ct", 0)
            self.spec_info.completion_token_num += meta.get("completion_tokens", 0)
        self.prefix_cache_info.cached_tokens += meta.get("cached_tokens", 0)
        self.prefix_cache_info.total_prompt_tokens += meta.get("prompt_tokens", 0)


def listed(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def replay_view(sample: Any) -> dict[str, Any]:
    """What slime's training and metrics read of a sample's replay, comparable across list / tensor forms."""
    return {
        "tokens": list(sample.tokens),
        "response_length": sample.response_length,
        "loss_mask": list(sample.loss_mask),
        "rollout_log_probs": [round(float(x), 9) for x in sample.rollout_log_probs],
        "routed": listed(sample.rollout_routed_experts),
        "top_p_ids": listed(sample.rollout_top_p_token_ids),
        "top_p_offsets": listed(sample.rollout_top_p_token_offsets),
        "cache": (sample.prefix_cache_info.cached_tokens, sample.prefix_cache_info.total_prompt_tokens),
        "spec": (
            sample.spec_info.spec_accept_token_num,
            sample.spec_info.spec_draft_token_num,
            sample.spec_info.spec_verify_ct,
            sample.spec_info.completion_token_num,
        ),
    }
