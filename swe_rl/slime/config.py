"""Settings of the slime plugin: typed, from slime's ``args``, a YAML file and ``SWE_*`` variables.

Upstream slime drops CLI flags it does not know, so the plugin reads:

1. defaults (below);
2. environment variables ``SWE_<FIELD>`` (e.g. ``SWE_MAX_CONCURRENT=64``, ``SWE_SAVE_TRAJ_DIR=...``);
3. keys ``swe_<field>`` on ``args`` — put them in the YAML given with ``--custom-config-path``
   (slime sets every key of that file on ``args``), e.g. ``swe_step_limit: 30``.

Later sources win. A few values fall back on slime's own arguments when unset:
``max_context_len`` ← ``--rollout-max-context-len``, ``tokenizer_path`` ← ``--hf-checkpoint``,
the router ← ``--sglang-router-ip`` / ``--sglang-router-port``. The fleet is reached with
``SWE_POOL_URL`` / ``SWE_POOL_TOKEN`` (see `swe_rl.fleet.client.EnvClientConfig`).

slime sets every key of the YAML on ``args`` without checking it, so a typo (``swe_step_limt: 30``)
would silently leave the default in place: `unknown_settings` lists every ``swe_*`` attribute of
``args`` the plugin does not read, and every ``SWE_*`` variable that looks like the plugin's (the
``SWE_PRM_`` / ``SWE_PIVOT_`` groups, or close to one of its names) but is not one, each with the
nearest valid name; `from_args` logs each once per process. Variables of the fleet (every name, old
ones included, of `swe_rl.fleet.catalogue.fleet_env_vars`: ``SWE_POOL_*``, ``SWE_EXEC_*``, ``SWE_CLIENT_*``,
``SWE_FLEET_SANDBOX_*``) are not the plugin's and are left alone (the fleet warns about its old names).

    config = PluginConfig.from_args(args)
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swe_rl.agent.monitor import MonitorConfig
from swe_rl.configs import config_path, resolve_config
from swe_rl.fleet.catalogue import fleet_env_vars
from swe_rl.fleet.settings import EnvVar, field_types, prefixed, read_env
from swe_rl.grading.integrity import IntegrityConfig
from swe_rl.rewards.pivot import PivotRewardConfig
from swe_rl.rewards.prm import PRMConfig

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "PluginConfig",
    "known_names",
    "unknown_settings",
    "warn_unknown_settings",
]

log = logging.getLogger(__name__)
DEFAULT_CHAT_TEMPLATE = config_path("chat_template_qwen3_thinking.jinja")


class PluginConfig(BaseModel):
    """Everything the end-to-end rollout needs besides slime's own arguments."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    # agent
    step_limit: int = 50
    """Policy turns per episode at most."""
    command_timeout: float = 180.0
    """Seconds one command may run in the container."""
    episode_deadline: float | None = 3600.0
    """Seconds the agent loop may take (the patch so far is graded when it runs out)."""
    harness_config: str | None = None
    """YAML of the bash-block harness (prompts, limits); None for the shipped configs/harness_bash_block.yaml."""
    harness_mix: dict[str, Any] = Field(default_factory=dict)
    """Training rollouts: harness name -> weight (``bash_block``, ``codeact``, ``codex``, ``opencode``), e.g.
    ``{bash_block: 0.4, codeact: 0.2, codex: 0.2, opencode: 0.2}``; each instance always gets the same one
    (a stable hash of its id and harness_seed). Empty: bash_block only."""
    harness_seed: int = 0
    """Seed of the per-instance harness choice (another seed, another assignment)."""
    eval_harness: str = "bash_block"
    """The one harness of evaluation rollouts."""
    container_options: dict[str, Any] = Field(default_factory=dict)
    """Allocate options of the agent's container (network, memory, cpus, pids_limit, env)."""
    # rollout
    rollout_timeout: float = 7200.0
    """Seconds a whole rollout may take (waiting for a container, agent, grading); beyond it the
    sample is dropped as an infrastructure failure and its containers are released."""
    max_concurrent: int = 128
    """Rollouts holding fleet containers at once, per rollout process (``SWE_MAX_CONCURRENT``)."""
    prefetch_ahead: int = 8
    """As a rollout starts, the images of the next this many rows of ``--prompt-data`` (file order) are
    pulled ahead on the nodes likely to get them (0: off)."""
    eval_timeout: float = 1800.0
    """Seconds the instance's tests may run when grading."""
    grading_network: str | None = None
    """Network of grading containers: ``none``, ``default`` or a name in the exec servers' ``SWE_EXEC_NETWORKS``;
    None: the instance row's ``network``, else none. (The agent's: ``container_options.network``.)"""
    clean_store: str | None = None
    """Directory of each task's clean-tree answers, written by ``eval/certify.py run``: a rollout process's
    first grading of a task reads them instead of asking the clean tree (docs/grading.md, "The clean-tree
    store"). None: the directory certification writes beside the ``require_certified`` ledger, when it is
    there; else none."""
    require_certified: str | None = None
    """Certification ledger (eval/certify.py): uncertified instances are not played (removed samples), and a
    grade that failed only on the ledger's flaky tests is removed instead of scored as a failure."""
    save_traj_dir: str | None = None
    """Where to write ``<instance_id>__g<group>__i<index>__<ts>/{traj.json,patch.diff,meta.json}``
    (``SWE_SAVE_TRAJ_DIR``); None to write nothing."""
    attempts_file: str | None = None
    """Attempts file (JSONL, `swe_rl.tasks.pass_rates`): one row per graded trajectory (instance, resolved,
    policy version, ``train``/``eval``) for pass rates and difficulty bands (``SWE_ATTEMPTS_FILE``); None: none."""
    policy_version: str | None = None
    """The policy version written with each attempt; None: the name of slime's ``--hf-checkpoint``."""
    # tokens
    tokenizer_path: str | None = None
    """Tokenizer directory; None for slime's ``--hf-checkpoint``."""
    chat_template: str = str(DEFAULT_CHAT_TEMPLATE)
    """Jinja chat template used to render prompts and observations (give SGLang the same one);
    a relative path missing from the working directory may name a shipped config (``configs/NAME``)."""
    enable_thinking: bool | None = None
    """Passed to the template; False makes it open each turn with an empty think block."""
    max_context_len: int | None = None
    """Context window of a turn (input + max new tokens); None for slime's ``--rollout-max-context-len``.
    Clamped to the policy server's context length minus one (asked at start; one warning)."""
    context_management: bool = True
    """Compact the history into head + tail when a turn would not fit (training: not with ``samples: last``,
    whose episode ends truncated instead)."""
    context_head_ratio: float = 0.3
    """Share of the compacted room kept from the first turns."""
    context_tail_ratio: float = 0.7
    """Share of the compacted room kept from the newest turns."""
    omission_marker: str = "[... {n} earlier turn(s) omitted to fit the context window ...]"
    """User message standing in for the omitted turns."""
    samples: Literal["segment", "turn", "last"] = "segment"
    """Training samples per rollout: ``segment`` one per context segment (the turns between two compactions,
    each sampled id trained once), ``turn`` one per policy turn on the context it saw (~n²/2 turns of tokens),
    ``last`` one sample of the last segment only (drops earlier segments; context management then off)."""
    dynamic_history: bool | None = None
    """Deprecated (use ``samples``): false means ``samples: last``, true ``samples: turn``; ``samples`` wins when set."""
    context_low_water: float = 0.3
    """Compaction target as a share of the context budget: a compacted segment starts at most this full, so
    it holds many turns before the next compaction (1.0 refills to the budget)."""
    allow_step_advantages: bool = False
    """Let a multi-sample mode run without the project's reward post-process (upstream then normalises
    samples batch-wide, a trajectory weighing by its number of samples); without it the first rollout stops."""
    generate_timeout: float = 900.0
    """Seconds one /generate call may take."""
    generate_retries: int = 3
    """Retries of a /generate call that failed to connect or got a 5xx."""
    # fork modes (docs/fork.md)
    retry_infra_failures: int = Field(default=0, ge=0)
    """Resumes from the last checkpoint after an infrastructure failure mid-episode (0: off; swe_rl.slime.fork_mode)."""
    checkpoint_every: int = Field(default=1, ge=1)
    """Steps between two checkpoints (lease snapshots) when retries are on."""
    branch_at_step: int = Field(default=0, ge=0)
    """The samples of a group branch from one shared trunk at this step (0: off; swe_rl.slime.branching)."""
    pivot_reward: Literal["match", "execute", "execute+match"] = "match"
    """How pivot samples are rewarded: by matching the expert's action, by executing it in the expert's restored
    state (same outcome), or the lower of both (swe_rl.slime.pivot_exec; docs/pivot.md)."""
    # reward
    reward_resolved: float = 1.0
    """Score of a resolved instance."""
    reward_unresolved: float = -1.0
    """Score of anything else the policy is responsible for (unresolved, no patch, patch not applying, ...)."""
    reward_removed: float = 0.0
    """Score reported for samples removed from training (infrastructure failures); their loss mask is zero."""
    # reward integrity
    git_hygiene: bool = True
    """Strip git history beyond the base commit (remote refs, tags, reflogs, stash, future objects) from the
    agent's container before the first turn (swe_rl.agent.git_hygiene)."""
    integrity: IntegrityConfig = Field(default_factory=IntegrityConfig)
    """Tamper-proof grading (swe_rl.grading.integrity): YAML ``swe_integrity: {enable: true, official_verdict: false}``
    or flat ``swe_integrity_<key>``, environment ``SWE_INTEGRITY_<KEY>`` (e.g. ``SWE_INTEGRITY_ENABLE=0``).
    Training rewards use the integrity verdict; the official one is kept in metadata."""
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    """Behaviour monitor (swe_rl.agent.monitor): YAML ``swe_monitor: {patterns: {name: regex}, disabled: [...]}``,
    flat ``swe_monitor_<key>``, environment ``SWE_MONITOR_ENABLE``."""
    drop_flagged: bool = False
    """Remove flagged rollouts (a monitor flag, or a patch that tampered with tests) from training."""
    flagged_reward: float | None = None
    """Score of a flagged rollout instead of its outcome (None: the outcome; drop_flagged wins)."""
    # process reward
    prm: PRMConfig = Field(default_factory=PRMConfig)
    """Step judge (swe_rl.rewards.prm): YAML ``swe_prm: {enable: true, url: ...}`` or flat ``swe_prm_<key>`` keys,
    environment ``SWE_PRM_<KEY>`` (e.g. ``SWE_PRM_ENABLE=1``, ``SWE_PRM_URL=http://...:30000/v1``)."""
    # pivot mode (stage 1, swe_rl.slime.pivot)
    pivot: PivotRewardConfig = Field(default_factory=PivotRewardConfig)
    """Reward of pivot samples (swe_rl.rewards.pivot): YAML ``swe_pivot: {partial_credit: 0.5, ...}`` or flat
    ``swe_pivot_<key>`` keys, environment ``SWE_PIVOT_<KEY>`` (e.g. ``SWE_PIVOT_TEXT_SIMILARITY=0.95``)."""

    @model_validator(mode="after")
    def _deprecated_dynamic_history(self) -> PluginConfig:
        """``dynamic_history`` given and ``samples`` not: false → last, true → turn (what they meant)."""
        if self.dynamic_history is not None and "samples" not in self.model_fields_set:
            self.samples = "turn" if self.dynamic_history else "last"
        return self

    @field_validator("context_low_water")
    @classmethod
    def _share(cls, value: float) -> float:
        if not 0.0 < value <= 1.0:
            raise ValueError(f"context_low_water must be in (0, 1], got {value}")
        return value

    @property
    def multi_sample(self) -> bool:
        """Training returns a list of samples per rollout (``segment`` or ``turn``)."""
        return self.samples != "last"

    @field_validator("harness_mix")
    @classmethod
    def _known_harnesses(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value:
            from swe_rl.harnesses.registry import check_weights

            return check_weights(value)
        return value

    @field_validator("eval_harness")
    @classmethod
    def _known_harness(cls, value: str) -> str:
        from swe_rl.harnesses.registry import canonical_harness_name

        return canonical_harness_name(value)  # aliases (bash-block, openhands) recorded canonically

    @field_validator("chat_template", "harness_config")
    @classmethod
    def _shipped_or_relative(cls, value: str | None) -> str | None:
        """A relative path that does not exist from the working directory may name a shipped config."""
        return resolve_config(value)

    @classmethod
    def from_sources(cls, args: Any = None, env: Mapping[str, str] | None = None) -> PluginConfig:
        """Defaults < ``SWE_<FIELD>`` environment variables < ``swe_<field>`` keys on args."""
        groups = _groups(cls)
        flat = {name: var for name, var in prefixed("SWE_", cls.model_fields).items() if name not in groups}
        values: dict[str, Any] = read_env(flat, field_types(cls), env)
        for name in cls.model_fields:
            if name in groups:
                values[name] = _nested(groups[name], name, args, env)
            elif args is not None and getattr(args, f"swe_{name}", None) is not None:
                values[name] = getattr(args, f"swe_{name}")
        return cls(**values)

    @classmethod
    def from_args(cls, args: Any, env: Mapping[str, str] | None = None) -> PluginConfig:
        """`from_sources`, then slime's own arguments where the plugin's are unset; a misspelt ``swe_*`` key or
        ``SWE_*`` variable is logged once with the nearest valid name (`warn_unknown_settings`)."""
        warn_unknown_settings(cls, args, os.environ if env is None else env)
        config = cls.from_sources(args, env)
        if config.dynamic_history is not None and "swe_dynamic_history" not in _warned:
            _warned.add("swe_dynamic_history")
            log.warning(
                "swe_dynamic_history is deprecated: it reads as swe_samples: %s; set swe_samples (segment, "
                "the default, trains each sampled token once: docs/advantages.md)",
                config.samples,
            )
        updates: dict[str, Any] = {}
        if config.max_context_len is None and getattr(args, "rollout_max_context_len", None):
            updates["max_context_len"] = int(args.rollout_max_context_len)
        if config.tokenizer_path is None and getattr(args, "hf_checkpoint", None):
            updates["tokenizer_path"] = str(args.hf_checkpoint)
        return config.model_copy(update=updates) if updates else config

    @staticmethod
    def router_url(args: Any) -> str:
        """``http://<sglang_router_ip>:<sglang_router_port>/generate``."""
        ip, port = getattr(args, "sglang_router_ip", None), getattr(args, "sglang_router_port", None)
        if not ip or not port:
            raise ValueError(
                "args.sglang_router_ip and args.sglang_router_port must be set (slime sets them)"
            )
        return f"http://{ip}:{port}/generate"


def _groups(config_class: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The nested settings groups (``prm``, ``pivot``, ``integrity``, ``monitor``): name -> model."""
    return {
        name: info.annotation
        for name, info in config_class.model_fields.items()
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
    }


def plugin_env_vars(config_class: type[BaseModel] = PluginConfig) -> dict[str, EnvVar]:
    """The variable of each plugin setting: ``SWE_<FIELD>``, and ``SWE_<GROUP>_<KEY>`` (keyed ``group.key``)
    for the keys of the nested groups."""
    out = prefixed("SWE_", config_class.model_fields)
    for group, model in _groups(config_class).items():
        out.update(
            {f"{group}.{k}": v for k, v in prefixed(f"SWE_{group.upper()}_", model.model_fields).items()}
        )
    return out


def _nested(model: type[BaseModel], name: str, args: Any, env: Mapping[str, str] | None) -> BaseModel:
    """Settings group ``name``: ``SWE_<NAME>_<KEY>`` < mapping ``swe_<name>`` < flat ``swe_<name>_<key>`` on args."""
    values: dict[str, Any] = read_env(
        prefixed(f"SWE_{name.upper()}_", model.model_fields), field_types(model), env
    )
    mapping = getattr(args, f"swe_{name}", None) if args is not None else None
    if isinstance(mapping, BaseModel):
        mapping = mapping.model_dump(exclude_unset=True)
    values.update(mapping or {})
    for key in model.model_fields:
        if args is not None and getattr(args, f"swe_{name}_{key}", None) is not None:
            values[key] = getattr(args, f"swe_{name}_{key}")
    return model(**values)


# --------------------------------------------------------------------------- unknown settings
_GROUP_PREFIXES = ("SWE_PRM_", "SWE_PIVOT_")
_warned: set[str] = set()
_checked: set[tuple[Any, ...]] = set()


def known_names(config_class: type[BaseModel]) -> set[str]:
    """Every ``swe_*`` key the plugin reads on args (lower case; the variables are the same, upper case)."""
    names: set[str] = set()
    for name, info in config_class.model_fields.items():
        names.add(f"swe_{name}")
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            names.update(f"swe_{name}_{key}" for key in info.annotation.model_fields)
    return names


def _nearest(name: str, candidates: set[str], cutoff: float = 0.6) -> str | None:
    found = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=cutoff)
    return found[0] if found else None


def unknown_settings(
    config_class: type[BaseModel], args: Any, env: Mapping[str, str]
) -> list[tuple[str, str | None]]:
    """``(unknown name, nearest valid name or None)`` for args keys and plugin-looking variables."""
    known = known_names(config_class)
    out: list[tuple[str, str | None]] = []
    for key in sorted(vars(args) if args is not None and hasattr(args, "__dict__") else ()):
        if key.startswith("swe_") and key not in known:
            out.append((key, _nearest(key, known)))
    known_env = {k.upper() for k in known}
    fleet = {name for spec in fleet_env_vars().values() for var in spec.values() for name in var.names}
    for var in sorted(env):
        if not var.startswith("SWE_") or var in known_env or var in fleet:
            continue
        near = _nearest(var, known_env, cutoff=0.85)
        if var.startswith(_GROUP_PREFIXES) or near is not None:
            out.append((var, near or _nearest(var, known_env)))
    return out


def warn_unknown_settings(config_class: type[BaseModel], args: Any, env: Mapping[str, str]) -> list[str]:
    """Log a warning per unknown setting (once per process); returns the messages logged now."""
    keys = vars(args) if hasattr(args, "__dict__") else {}
    seen = (
        config_class,
        tuple(sorted(k for k in keys if k.startswith("swe_"))),
        tuple(sorted(k for k in env if k.startswith("SWE_"))),
    )
    if seen in _checked:  # called on every rollout: look once per distinct set of names
        return []
    _checked.add(seen)
    messages = []
    for name, near in unknown_settings(config_class, args, env):
        if name in _warned:
            continue
        _warned.add(name)
        source = "environment variable" if name.isupper() else "key (from --custom-config-path or args)"
        hint = f"; did you mean {near}?" if near else ""
        messages.append(f"unknown swe-rl plugin {source} {name} is ignored{hint}")
        log.warning(messages[-1])
    return messages
