"""`SGLangTokenPolicy`: token-exact turns through SGLang's native ``/generate``.

    policy = SGLangTokenPolicy(codec, SGLangTokenConfig(url="http://router:30000/generate",
                                                        sampling_params={"temperature": 1.0, "max_new_tokens": 4096},
                                                        max_context_len=32768))
    result = await run_agent(instance, policy, BashBlockHarness(), client=client)
    policy.trajectory            # every sampled id and log-prob, every observation id, per segment

One policy per episode (it keeps the episode's `TokenTrajectory`). Each turn sends the
context as ``input_ids`` with ``return_logprob``; the sampled ids and their log-probs
come from ``meta_info.output_token_logprobs`` and are kept verbatim. The messages the
agent added since the last turn (observations, format feedback) are rendered by the
chat template and appended as ids (`ChatCodec.observation_ids`). The turn goes back
to the agent as text, its ``<think>`` span split off as the reasoning.

When the next turn would not fit ``max_context_len - max_new_tokens``: with context
management the history is compacted into a new segment (head + marker + tail, filled to
``low_water`` of the budget),
otherwise (or when even that cannot fit) the episode ends (`ContextExhausted`, status
truncated). So does a context-overflow answer of the server (HTTP 400, the server's window
smaller than the budget): `ContextExhausted` too, the window it named kept in
``server_context_len`` (see `swe_rl.policies.server_context`). An ``abort`` finish is sent again
(``abort_retries``: a weight update aborts in-flight requests) unless the trainer is aborting, then ends
it too (`PolicyAborted`), and so does ``should_abort()`` turning true before a call (slime aborting
its rollout: no new request is started). Every such end is a `PolicyError` (`swe_rl.agent.errors`)
whose ``stop_reason`` the agent keeps on its result (`AgentResult.stop_reason`).

Each turn also keeps what slime's own path reads from an answer (`swe_rl.tokens.replay.TurnMeta` on the
turn): the routed experts of every position when ``return_routed_experts`` (MoE routing replay), the top-p
kept ids when the sampling parameters ask ``custom_params.return_top_p_token_ids`` (slime does below top-p
1), and the prefix-cache / speculative counts. Asked-for data missing from an answer is a `PolicyBadResponse`
naming the server flag it needs.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from swe_rl.agent.errors import (
    ContextExhausted,
    PolicyAborted,
    PolicyBadResponse,
    PolicyUnreachable,
)
from swe_rl.agent.protocols import Environment, Message, PolicyTurn, TokenUsage
from swe_rl.fleet.retry import RetryPolicy, TryAgain, retry_async
from swe_rl.policies.server_context import context_overflow
from swe_rl.tasks.instance import TaskInstance
from swe_rl.tokens.codec import ChatCodec, split_thinking
from swe_rl.tokens.replay import ReplayError, TurnMeta, turn_meta
from swe_rl.tokens.trajectory import TokenTrajectory

__all__ = ["SGLangTokenConfig", "SGLangTokenPolicy"]


class SGLangTokenConfig(BaseModel):
    """Endpoint, sampling and context window of the token policy."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    url: str
    """The router's generate endpoint, e.g. ``http://10.0.0.1:30000/generate``."""
    sampling_params: dict[str, Any] = Field(default_factory=dict)
    """SGLang sampling parameters sent with every turn (slime's; ``max_new_tokens`` is the per-turn cap)."""
    max_context_len: int | None = None
    """Most ids a turn may see plus generate; None for no limit."""
    context_management: bool = True
    """Compact the history (head + tail) when a turn would not fit; else the episode ends truncated."""
    low_water: float = 1.0
    """A compacted context is filled to at most this share of the budget (hysteresis: many turns per segment)."""
    head_ratio: float = 0.3
    """Share of the room (budget minus prompt and marker) kept from the oldest turn pairs."""
    tail_ratio: float = 0.7
    """Share of the room kept from the newest turn pairs (the newest pair always stays)."""
    omission_marker: str = "[... {n} earlier turn(s) omitted to fit the context window ...]"
    """User message standing for the omitted turns (``{n}``: how many)."""
    timeout: float = 900.0
    """Seconds one /generate call may take."""
    retries: int = 3
    """Retries of a call that failed to connect or got a 5xx, with backoff."""
    return_routed_experts: bool = False
    """Ask every call for the routed experts of every position (slime's ``--use-rollout-routing-replay``)."""
    routing_per_turn: bool = False
    """Keep every turn's rows (one sample per turn); else only the latest turn of each segment keeps them."""
    incremental_routing: bool = False
    """Ask only for the rows a segment lacks (``routed_experts_start_len``; SGLang versions that take it)."""
    abort_retries: int = 3
    """Times a turn the server aborted is sent again while the trainer is not aborting (``should_abort``):
    a weight update pauses SGLang in ``abort`` mode (slime's fully-async rollouts, docs/training.md), and
    the resent request waits for the new weights. Then the episode ends (`PolicyAborted`)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers, e.g. slime's routing key ``X-SMG-Routing-Key: <session_id>`` under consistent hashing
    (every turn of a trajectory then reaches the same engine and reuses its prefix cache)."""


class SGLangTokenPolicy:
    """An `EpisodePolicy` that keeps the episode's tokens; not shared between episodes."""

    def __init__(
        self,
        codec: ChatCodec,
        config: SGLangTokenConfig,
        http: httpx.AsyncClient | None = None,
        should_abort: Callable[[], bool] | None = None,
    ) -> None:
        self.codec = codec
        self.should_abort = should_abort
        self.config = config
        self._http = http
        self._own_http = http is None
        self.trajectory: TokenTrajectory | None = None
        self.weight_versions: list[str] = []
        self.cached_tokens = 0
        self.resent_turns = 0
        """Turns sent again after the server aborted them (weight updates of fully-async training)."""
        self.server_context_len: int | None = None
        """The context length a server's overflow answer named (the budget was larger than the server's window)."""
        self._seen = 0

    async def start_episode(self, instance: TaskInstance, env: Environment) -> None:
        self.trajectory, self._seen = None, 0
        self.weight_versions, self.cached_tokens = [], 0

    def fork_state(self) -> dict[str, Any]:
        """A copy of the episode's tokens so far (`swe_rl.agent.fork.ForkablePolicy`)."""
        return copy.deepcopy(
            {"trajectory": self.trajectory, "seen": self._seen, "weight_versions": self.weight_versions}
        )

    def restore_state(self, state: dict[str, Any]) -> None:
        """Continue a fork's episode: every id and log-prob before the fork point is the original's."""
        state = copy.deepcopy(state)
        self.trajectory, self._seen = state["trajectory"], state["seen"]
        self.weight_versions, self.cached_tokens = state["weight_versions"], 0

    async def aclose(self) -> None:
        if self._own_http and self._http is not None:
            await self._http.aclose()
            self._http = None

    # ------------------------------------------------------------------ context

    @property
    def max_new_tokens(self) -> int | None:
        value = self.config.sampling_params.get("max_new_tokens")
        return int(value) if value is not None else None

    def _extend_context(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> None:
        if self.trajectory is None:
            self.trajectory = TokenTrajectory(self.codec.prompt_ids(messages, tools), self.codec.header_ids)
        else:
            if len(messages) <= self._seen or messages[self._seen].get("role") != "assistant":
                raise ValueError("the history must continue with this policy's own turn")
            last = self.trajectory.turns[-1].ids
            ids = self.codec.observation_ids(messages[self._seen], messages[self._seen + 1 :], last)
            self.trajectory.add_observation(ids)
        self._seen = len(messages)

    def _fit(self) -> None:
        """Make the context fit ``max_context_len - max_new_tokens``, or end the episode."""
        assert self.trajectory is not None
        limit = self.config.max_context_len
        if limit is None:
            return
        budget = limit - (self.max_new_tokens or 0)
        if len(self.trajectory.context) <= budget:
            return
        fits = False
        if self.config.context_management and self.trajectory.turns:
            marker = self.config.omission_marker
            fits = self.trajectory.compact(
                budget,
                lambda n: self.codec.marker_ids(marker.format(n=n)),
                head_ratio=self.config.head_ratio,
                tail_ratio=self.config.tail_ratio,
                low_water=self.config.low_water,
            )
        if not fits:
            raise ContextExhausted(
                f"context of {len(self.trajectory.context)} ids does not fit "
                f"{limit} - {self.max_new_tokens} max new tokens"
            )

    # ------------------------------------------------------------------ generate

    async def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout, connect=30.0))
        http = self._http
        attempts = self.config.retries + 1

        async def attempt() -> dict[str, Any]:
            try:
                resp = await http.post(
                    self.config.url,
                    json=payload,
                    headers=self.config.headers or None,
                    timeout=self.config.timeout,
                )
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                error = f"{type(exc).__name__}: {exc}"
                raise TryAgain(
                    PolicyUnreachable(f"/generate failed after {attempts} attempts: {error}")
                ) from exc
            if resp.status_code == 200:
                return resp.json()
            error = f"HTTP {resp.status_code}: {resp.text[:300]}"
            if resp.status_code < 500 and (window := context_overflow(resp.text)) is not None:
                self._overflow(payload, window, error)
            if resp.status_code < 500:
                raise PolicyBadResponse(f"/generate refused the request: {error}")
            raise TryAgain(PolicyUnreachable(f"/generate failed after {attempts} attempts: {error}"))

        try:
            return await retry_async(
                attempt,
                RetryPolicy(retries=self.config.retries, backoff=1.0, backoff_max=10.0),
                name="/generate",
            )
        except PolicyUnreachable as exc:
            raise exc from None

    def _overflow(self, payload: dict[str, Any], window: int, error: str) -> None:
        """The server refused the turn for its context window: the episode ends truncated."""
        self.server_context_len = window or None
        sent = len(payload.get("input_ids") or [])
        new = (payload.get("sampling_params") or {}).get("max_new_tokens")
        raise ContextExhausted(
            f"the policy server's context{f' ({window} tokens)' if window else ''} is smaller than this turn's "
            f"budget: {sent} context ids + {new} max new tokens (budget {self.config.max_context_len}); "
            f"lower swe_max_context_len / --rollout-max-context-len or start the server with a longer "
            f"context. Server: {error}"
        )

    async def act(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None, **kwargs: Any
    ) -> PolicyTurn:
        """One turn; ``tools`` (a tool-calling harness's schemas) are rendered into the first prompt by the
        chat template, and the model answers with Hermes ``<tool_call>`` text the harness parses."""
        started = time.monotonic()
        if self.should_abort is not None and self.should_abort():
            raise PolicyAborted("the trainer is aborting this rollout")
        self._extend_context(messages, tools)
        self._fit()
        assert self.trajectory is not None
        context = self.trajectory.context
        params = dict(self.config.sampling_params)
        if self.config.max_context_len is not None:  # never generate past the window
            room = self.config.max_context_len - len(context)
            params["max_new_tokens"] = min(self.max_new_tokens or room, room)
        payload: dict[str, Any] = {"input_ids": context, "sampling_params": params, "return_logprob": True}
        previous = self._segment_meta()
        if self.config.return_routed_experts:
            payload["return_routed_experts"] = True
            if self.config.incremental_routing and previous is not None and previous.routed_rows:
                payload["routed_experts_start_len"] = previous.routed_rows
        for resend in range(self.config.abort_retries + 1):  # an abort by a weight update: sent again
            output = await self._post(payload)
            meta = output.get("meta_info") or {}
            finish = (meta.get("finish_reason") or {}).get("type") or "stop"
            if finish != "abort":
                break
            if resend == self.config.abort_retries or (self.should_abort is not None and self.should_abort()):
                raise PolicyAborted((meta.get("finish_reason") or {}).get("message") or "request aborted")
            self.resent_turns += 1
        pairs = meta.get("output_token_logprobs")
        if pairs is None:
            raise PolicyBadResponse(
                "/generate answered without output_token_logprobs (return_logprob ignored?)"
            )
        ids = [int(p[1]) for p in pairs]
        logprobs = [float(p[0]) for p in pairs]
        try:
            kept = turn_meta(
                meta,
                context_len=len(context),
                n_ids=len(ids),
                previous=previous,
                want_routing=self.config.return_routed_experts,
                want_top_p=bool((params.get("custom_params") or {}).get("return_top_p_token_ids")),
            )
        except ReplayError as exc:
            raise PolicyBadResponse(f"/generate: {exc}") from None
        if previous is not None and not self.config.routing_per_turn:
            # the new turn's rows cover the whole segment: one copy per segment, not one per turn
            previous.routed_experts = None
        self.trajectory.add_turn(ids, logprobs, finish, meta=kept)
        if meta.get("weight_version") is not None:
            self.weight_versions.append(str(meta["weight_version"]))
        self.cached_tokens += int(meta.get("cached_tokens") or 0)

        text = self.codec.decode(ids)
        end = self.codec.turn_end.split("\n")[0]  # the end-of-turn token's text (<|im_end|>)
        if end and text.endswith(end):
            text = text[: -len(end)]
        reasoning, content = split_thinking(text)
        return PolicyTurn(
            text=content,
            reasoning=reasoning,
            finish_reason=finish,
            usage=TokenUsage(
                prompt_tokens=len(context),
                completion_tokens=len(ids),
                reasoning_tokens=_reasoning_tokens(ids, self.codec),
                calls=1,
            ),
            latency=time.monotonic() - started,
            extra={
                "turn": len(self.trajectory.turns) - 1,
                "segment": self.trajectory.segment.index,
                "context_tokens": len(context),
                "weight_version": meta.get("weight_version"),
            },
        )

    def _segment_meta(self) -> TurnMeta | None:
        """The replay data of the latest turn of the current segment (None at a segment's first call)."""
        traj = self.trajectory
        if traj is None or not traj.segment.turns:
            return None
        return traj.segment.turns[-1].meta


def _reasoning_tokens(ids: list[int], codec: ChatCodec) -> int:
    end_think = codec.encode("</think>")
    if len(end_think) == 1 and end_think[0] in ids:
        return ids.index(end_think[0]) + 1
    return 0
