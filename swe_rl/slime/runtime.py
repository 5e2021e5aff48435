"""The slime run this process is in, and the state its rollouts share (both modes, one per process).

- `ProcessState` / `state(config)` / `shutdown()`: what every rollout of one rollout process (slime's
  Ray actor, one event loop) shares: the HTTP pool to the router, the fleet client (made at first
  use: pivot mode never leases), the concurrency bound, chat codecs, PRM judge clients and the policy
  server's context length. A new event loop (tests) gets a new state.

- `slime_aborting(args)`: slime itself is aborting this rollout (``GenerateState(args).aborted``, read
  without creating the state). An SGLang abort while this is false (router restart, engine crash) is
  not slime's doing: the plugin then removes the rollout instead of handing back an ABORTED sample.
- `check_options(args, config, evaluation)`: refuses, at the first call, slime options that cannot work
  with list returns (``swe_samples: segment`` or ``turn``): ``--group-rm``, ``--partial-rollout``,
  upstream's step-level dynamic sampling filters, a group-normalising estimator without the
  trajectory reward post-process or with another one (unless ``swe_allow_step_advantages``), and a
  sequence-level ratio (GSPO, ``--use-opsm``) when a trajectory is several samples; and, in every
  training mode, the estimators and corrections `swe_rl.slime.estimators.check_estimator` refuses
  (REINFORCE++ without the removed-sample-safe returns, PPO / REINFORCE++ returns cut per sample,
  slime's sequence-level MIS example, OPD from an SGLang teacher).
- `check_prompt_fits(agent, policy, ...)`: a first prompt that the context budget cannot hold is a
  configuration error (every rollout would be removed): it stops the run, naming what to change.
- `sample_mode(config, evaluation)`: the samples a rollout gives (``last`` in evaluation, ``turn`` for
  PRM runs, else ``swe_samples``).
- `routing_headers(args, sample)`: slime's routing key header when the router hashes consistently,
  so every turn of one trajectory reaches the same SGLang engine (prefix cache).
slime is imported lazily; without it nothing is aborting and every check is on ``args`` alone.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import TYPE_CHECKING, Any

import httpx

from swe_rl.agent.fleet_session import FleetConfig, FleetSession, open_fleet
from swe_rl.fleet.prefetch_hints import PrefetchHints
from swe_rl.grading.clean_store import found_beside
from swe_rl.grading.config import GraderConfig
from swe_rl.policies.server_context import ContextBudget
from swe_rl.rewards.prm import JudgeClient, StepJudge
from swe_rl.slime.estimators import check_estimator, split_mode
from swe_rl.tokens import ChatCodec, ChatRenderer, load_tokenizer
from swe_rl.tokens.template_check import compare_templates

if TYPE_CHECKING:
    from swe_rl.slime.config import PluginConfig
    from swe_rl.tasks import TaskInstance

__all__ = [
    "FULLY_ASYNC_PATH",
    "OUR_FULLY_ASYNC_PATH",
    "POST_PROCESS_PATH",
    "ROUTING_KEY_HEADER",
    "TRAJECTORY_FILTER_PATH",
    "ProcessState",
    "PromptDoesNotFit",
    "check_options",
    "check_prompt_fits",
    "routing_headers",
    "sample_mode",
    "shutdown",
    "slime_aborting",
    "state",
]

log = logging.getLogger(__name__)
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
"""Header slime sends with ``--router-policy consistent_hashing`` (its value: the sample's session_id)."""
POST_PROCESS_PATH = "swe_rl.slime.post_process.post_process_rewards"
TRAJECTORY_FILTER_PATH = "swe_rl.slime.filters.check_trajectory_reward_nonzero_std"
FULLY_ASYNC_PATH = "slime.rollout.fully_async_rollout.generate_rollout_fully_async"
OUR_FULLY_ASYNC_PATH = "swe_rl.slime.fully_async.generate_rollout_fully_async"
_STEP_FILTERS = "slime.rollout.filter_hub.dynamic_sampling_filters."
_warned: set[str] = set()


@functools.lru_cache(maxsize=1)
def _generate_state() -> tuple[Any, Any] | None:
    try:
        from slime.rollout.sglang_rollout import GenerateState
        from slime.utils.misc import SingletonMeta
    except ImportError:
        return None
    return GenerateState, SingletonMeta


def slime_aborting(args: Any) -> bool:
    """True while slime aborts the rollout's outstanding requests (end of a rollout, dynamic sampling)."""
    found = _generate_state()
    if found is None:
        return False
    cls, meta = found
    state = getattr(meta, "_instances", {}).get(cls)
    return bool(state is not None and getattr(state, "aborted", False))


def routing_headers(args: Any, sample: Any) -> dict[str, str]:
    """``{X-SMG-Routing-Key: session_id}`` under ``--router-policy consistent_hashing``, else nothing."""
    session = getattr(sample, "session_id", None)
    if session and getattr(args, "router_policy", None) == "consistent_hashing":
        return {ROUTING_KEY_HEADER: str(session)}
    return {}


def check_options(args: Any, config: PluginConfig, *, evaluation: bool, several: bool = True) -> None:
    """Fail fast (ValueError naming the flag) on options that break with a list of samples per rollout.

    ``several``: the rollout may give several samples (end-to-end; a pivot row gives a list of one), so
    upstream's own reward normalisation would weigh trajectories by their samples: the project's reward
    post-process is then required for a group-normalising estimator, unless ``swe_allow_step_advantages``."""
    if evaluation:
        return
    check_estimator(args, config, several=several)  # every mode: a removed sample is in any batch
    if not config.multi_sample:
        return
    why = f"swe_samples: {config.samples} returns a list of samples per rollout"
    if getattr(args, "group_rm", False):
        raise ValueError(
            f"--group-rm is not supported: {why}, and upstream's group reward assigns one reward per "
            "group item. The SWE reward needs no group: drop --group-rm (or set swe_samples: last)."
        )
    if getattr(args, "partial_rollout", False):
        raise ValueError(
            f"--partial-rollout is not supported: {why}; upstream's abort walks group items as "
            "single samples, and an agent episode cannot resume anyway (its container is gone). Drop "
            "--partial-rollout (or set swe_samples: last: aborted episodes are then replayed from the start)."
        )
    if getattr(args, "rollout_function_path", None) == FULLY_ASYNC_PATH:
        raise ValueError(
            f"--rollout-function-path {FULLY_ASYNC_PATH}: slime's fully-async worker reads every group item "
            f"as one Sample (it sorts groups by item.index and requeues a group by item.status), but {why}: "
            f"at the pin it stops at the first collected rollout. Use --rollout-function-path {OUR_FULLY_ASYNC_PATH} "
            "(slime's worker, a collector that reads lists), or swe_samples: last with slime's (one sample per "
            "trajectory; context management then off). See docs/training.md."
        )
    path = getattr(args, "dynamic_sampling_filter_path", None) or ""
    if path.startswith(_STEP_FILTERS):
        raise ValueError(
            f"--dynamic-sampling-filter-path {path} judges single samples but {why}: use "
            f"--dynamic-sampling-filter-path {TRAJECTORY_FILTER_PATH} (or its _with_fallback variant), "
            "which judges trajectories."
        )
    estimator = getattr(args, "advantage_estimator", None)
    if several:
        _check_sequence_ratio(args, config, estimator)
    post_process = getattr(args, "custom_reward_post_process_path", None)
    if (
        several
        and estimator in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
        and getattr(args, "rewards_normalization", True)
        and post_process != POST_PROCESS_PATH
    ):
        given = (
            f"--custom-reward-post-process-path {post_process}, which is not the project's"
            if post_process
            else "no --custom-reward-post-process-path"
        )
        message = (
            f"--advantage-estimator {estimator} with {why} but {given}: "
            "upstream would normalise the samples batch-wide, a trajectory weighing by its number of "
            f"samples; pass --custom-reward-post-process-path {POST_PROCESS_PATH} (docs/advantages.md), "
            "or set swe_allow_step_advantages: true to train that way on purpose"
        )
        if not config.allow_step_advantages:
            raise ValueError(message)
        _warn_once("post_process", message)


def _check_sequence_ratio(args: Any, config: PluginConfig, estimator: str | None) -> None:
    """GSPO (``--advantage-estimator gspo``) and ``--use-opsm`` take one importance ratio (a KL) per
    slime sample. The objective means one per trajectory, which a sample holds only when the trajectory
    is one sample: with segment samples and context management, or turn samples, the ratio would be a
    segment's or a turn's, neither the trajectory's (docs/advantages.md). Token-level ratios (grpo,
    cispo, ...) are unaffected."""
    flags = [
        f
        for f, on in (
            ("--advantage-estimator gspo", estimator == "gspo"),
            ("--use-opsm", bool(getattr(args, "use_opsm", False))),
        )
        if on
    ]
    mode = split_mode(config)
    if flags and mode is not None:
        per = "policy turn" if mode == "turn" else "context segment"
        raise ValueError(
            f"{' and '.join(flags)}: a sequence-level ratio, which slime computes per sample, but "
            f"swe_samples: {mode} gives one sample per {per}, so the ratio would not be the trajectory's. "
            "Make every trajectory one sample: swe_context_management: false (with swe_samples: segment; an "
            "episode that outgrows the context window then ends truncated) or swe_samples: last; or use a "
            "token-level objective (--advantage-estimator grpo without --use-opsm). See docs/advantages.md."
        )


class PromptDoesNotFit(ValueError):
    """The context budget cannot hold an instance's first prompt: a configuration error, not a rollout's."""


def check_prompt_fits(agent: Any, policy: Any, instance_id: str, server_window: int | None) -> None:
    """Raise `PromptDoesNotFit` when the episode ended before its first turn because the prompt plus
    ``max_new_tokens`` did not fit the budget (the token policy's own check, not a server's answer).

    Removing such rollouts one by one (reward 0, one warning each) would let a run go on training on
    nothing; the budget is a setting, so the run stops at the first one with what to change."""
    trajectory = getattr(policy, "trajectory", None)
    if getattr(agent, "stop_reason", None) != "context_exhausted" or (
        trajectory is not None and trajectory.turns
    ):
        return
    if getattr(
        policy, "server_context_len", None
    ):  # the server refused: the window is learned, next rollouts clamp
        return
    budget = policy.config.max_context_len
    new = policy.max_new_tokens or 0
    prompt = len(trajectory.context) if trajectory is not None else None
    window = f"{server_window} tokens" if server_window else "not stated"
    raise PromptDoesNotFit(
        f"the first prompt of {instance_id} ({prompt} ids) does not fit the context budget: {budget} "
        f"(swe_max_context_len, else --rollout-max-context-len, clamped to the policy server's window minus 1) "
        f"- {new} max new tokens per turn (--rollout-max-response-len) leaves {budget - new if budget else '?'}, "
        "so every rollout would end before its first turn. Raise --rollout-max-context-len / "
        f"swe_max_context_len (the policy server's window: {window}; start SGLang with a longer "
        "--context-length when that is the limit) or lower --rollout-max-response-len."
    )


def sample_mode(config: PluginConfig, *, evaluation: bool) -> str:
    """The training samples of this rollout: ``last`` in evaluation (one sample per prompt); ``turn`` when
    the PRM is on with ``samples: segment`` (the pinned slime trains one advantage per sample, and each step
    has its own bonus: docs/advantages.md); else ``config.samples``."""
    if evaluation:
        return "last"
    if config.samples == "segment" and config.prm.enable:
        _warn_once(
            "prm_turn",
            "swe_prm.enable with swe_samples: segment: PRM step bonuses need one sample per turn "
            "(one advantage per sample in the pinned slime), so this run trains per-turn samples",
        )
        return "turn"
    if config.samples == "last":
        _warn_once(
            "last",
            "swe_samples: last trains one sample per trajectory, its last context segment: earlier "
            "segments would be dropped, so context management is off and an over-long episode ends truncated",
        )
    return config.samples


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


# --------------------------------------------------------------------------- process state

_CODEC_CACHE = 256
"""Codecs kept per process at most (pivot rows of many different tool sets each need their own)."""


def clean_store_of(config: PluginConfig) -> str:
    """The grader's clean-tree store: ``swe_clean_store`` (``SWE_CLEAN_STORE``), else the one
    certification wrote beside the ``swe_require_certified`` ledger when it is there, else none."""
    if config.clean_store is not None:
        return config.clean_store
    return found_beside(config.require_certified) or ""


class ProcessState:
    """Shared by all rollouts of one process (slime's rollout Ray actor) on one event loop."""

    def __init__(self, config: PluginConfig) -> None:
        self.loop = asyncio.get_running_loop()
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(config.generate_timeout, connect=30.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )
        self.semaphore = asyncio.Semaphore(max(1, config.max_concurrent))
        self.codecs: dict[tuple[Any, ...], ChatCodec] = {}
        self.templates_checked: set[tuple[Any, ...]] = set()  # our chat template vs the tokenizer's own
        self.judges: dict[
            str, JudgeClient
        ] = {}  # PRM clients; each one's semaphore bounds the process's requests
        self.context = (
            ContextBudget()
        )  # the policy server's context length, asked once; the budget clamped to it
        self._fleet: FleetSession | None = None
        self._fleets: dict[str, FleetSession] = {}
        self._hints: PrefetchHints | None = None

    def fleet(self, config: PluginConfig) -> FleetSession:
        """The fleet session of `config` (its grading and container options) on the process's one fleet
        client (``SWE_POOL_URL``, ``SWE_POOL_TOKEN``), made at first use."""
        fleet_config = FleetConfig(
            grading=GraderConfig(
                eval_timeout=config.eval_timeout,
                network=config.grading_network,
                test_empty_patch=False,  # training: no_patch needs no run
                clean_store=clean_store_of(config),
                integrity=config.integrity,
            ),
            env_options=dict(config.container_options),
        )
        key = json.dumps(
            [fleet_config.grading.model_dump(mode="json"), fleet_config.env_options],
            sort_keys=True,
            default=str,
        )
        if self._fleet is None:
            self._fleet = open_fleet(fleet_config)
            self._fleets[key] = self._fleet
        elif key not in self._fleets:
            self._fleets[key] = self._fleet.with_config(fleet_config)
        return self._fleets[key]

    def prefetch_hints(self, args: Any, config: PluginConfig) -> PrefetchHints:
        """Hints of the images that come next, in the order of ``--prompt-data`` (read once)."""
        if self._hints is None:
            self._hints = PrefetchHints(
                self.fleet(config).client.prefetch, _prompt_order(args), config.prefetch_ahead
            )
        return self._hints

    def step_judge(self, config: PluginConfig, instance: TaskInstance) -> StepJudge:
        key = config.prm.model_dump_json()
        if key not in self.judges:
            self.judges[key] = JudgeClient(config.prm)
        return StepJudge(self.judges[key], issue=instance.problem_statement, repo=instance.repo)

    def codec(self, config: PluginConfig, tools: list[dict[str, Any]] | None = None) -> ChatCodec:
        """The chat codec of the config's tokenizer and template (with ``tools`` rendered, pivot rows)."""
        tools_key = json.dumps(tools, sort_keys=True) if tools else None
        key = (config.tokenizer_path, config.chat_template, config.enable_thinking, tools_key)
        if key not in self.codecs:
            if not config.tokenizer_path:
                raise ValueError("no tokenizer: set --hf-checkpoint or swe_tokenizer_path")
            kwargs: dict[str, Any] = {}
            if config.enable_thinking is not None:
                kwargs["enable_thinking"] = config.enable_thinking
            if tools:
                kwargs["tools"] = tools
            if len(self.codecs) > _CODEC_CACHE:  # rows of many different tool sets: keep the cache bounded
                self.codecs.clear()
            tokenizer = load_tokenizer(config.tokenizer_path)
            renderer = ChatRenderer.from_file(config.chat_template)
            template_key = (config.tokenizer_path, config.chat_template, config.enable_thinking)
            if template_key not in self.templates_checked:  # once per tokenizer and template: at start
                thinking = {k: v for k, v in kwargs.items() if k == "enable_thinking"}
                report = compare_templates(
                    tokenizer, renderer, config.chat_template, **thinking
                )  # may refuse
                self.templates_checked.add(template_key)
                if not report.same:
                    log.warning("%s", report.note)
            self.codecs[key] = ChatCodec(tokenizer, renderer, **kwargs)
        return self.codecs[key]

    async def aclose(self) -> None:
        if self._fleet is not None:
            await self._fleet.close()
        await self.http.aclose()
        for judge in self.judges.values():
            await judge.aclose()


_STATE: ProcessState | None = None


def _prompt_order(args: Any) -> list[tuple[str, str]]:
    """(instance id, image) of each row of slime's ``--prompt-data`` JSONL; empty when it is not a local file."""
    from swe_rl.tasks import RowInvalid, instance_from_row

    path = getattr(args, "prompt_data", None)
    order: list[tuple[str, str]] = []
    try:
        with open(str(path), encoding="utf-8") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                    meta = row.get("metadata")
                    if isinstance(meta, str):
                        row = {**row, "metadata": json.loads(meta)}
                    inst = instance_from_row(row)
                except (ValueError, AttributeError, RowInvalid):
                    continue
                order.append((inst.instance_id, inst.image))
    except (OSError, TypeError):
        return []
    return order


def state(config: PluginConfig) -> ProcessState:
    """This process's state, made on first use (again on a new event loop: the old clients belong to the old one)."""
    global _STATE
    if _STATE is None or _STATE.loop is not asyncio.get_running_loop():
        _STATE = ProcessState(config)
    return _STATE


async def shutdown() -> None:
    """Close the shared fleet client, HTTP pool and judge clients of this process (tests, clean exits)."""
    global _STATE
    if _STATE is not None and _STATE.loop is asyncio.get_running_loop():
        await _STATE.aclose()
    _STATE = None
