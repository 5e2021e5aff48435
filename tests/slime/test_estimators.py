"""Every advantage estimator slime offers at the pin, on the plugin's samples: exact where the plugin lets
it run, refused where it would not be, and never crashed by a removed sample (docs/advantages.md).

Two trajectories (rewards +1 and -1 after our post-process's broadcast) are laid out twice: each as **one**
slime sample (its turns and observations, observations masked) and cut into **one sample per policy turn**
(the finest cut the plugin makes: a segment is a run of turns). Per-token log-probs, reference log-probs
and critic values depend only on the token's absolute position (attention is causal: a token sees the
same context in both layouts). For each estimator and setting (``--kl-coef``, ``--gamma``, ``--lambd``),
the advantage of every sampled token is compared between the layouts; `check_estimator` must refuse
exactly the settings where they differ. Through the restatement (tests/upstream_estimators.py, always)
and through the pinned slime's own ``compute_advantages_and_returns`` (`upstream_slime`, when here), which
must give the restatement's numbers.
"""

from __future__ import annotations

import itertools
import socket
import sys
import types
from argparse import Namespace
from types import SimpleNamespace
from typing import Any

import pytest

from swe_rl.slime.config import PluginConfig
from swe_rl.slime.estimators import REINFORCE_PLUS_PLUS_PATH, check_estimator
from swe_rl.slime.runtime import check_options

torch = pytest.importorskip("torch")
upstream_estimators = pytest.importorskip("upstream_estimators")

PROMPT = 5
TURNS = [(3, 2), (2, 3), (4, 0)]
"""(sampled ids, observation ids after them) per turn."""
REWARDS = (1.0, -1.0)
ESTIMATORS = ("grpo", "gspo", "cispo", "ppo", "reinforce_plus_plus", "reinforce_plus_plus_baseline")


def logp(j: int) -> float:
    return -0.1 * (j % 7) - 0.05


def ref(j: int) -> float:
    return -0.12 * (j % 5) - 0.03


def value(j: int) -> float:
    return 0.01 * j - 0.2


def layout(per_turn: bool) -> tuple[dict[str, Any], list[list[int]]]:
    """Rollout data of both trajectories, and the absolute position of each response token per sample
    (``-1``: an observation)."""
    rows: list[tuple[float, list[int], list[int]]] = []  # reward, response positions, mask
    for reward in REWARDS:
        pos, positions, mask = PROMPT, [], []
        for sampled, observed in TURNS:
            turn = list(range(pos, pos + sampled))
            if per_turn:
                rows.append((reward, turn, [1] * sampled))
            positions += turn + list(range(pos + sampled, pos + sampled + observed))
            mask += [1] * sampled + [0] * observed
            pos += sampled + observed
        if not per_turn:
            rows.append((reward, positions, mask))
    data: dict[str, Any] = {
        "rewards": [r for r, _, _ in rows],
        "response_lengths": [len(p) for _, p, _ in rows],
        "total_lengths": [p[-1] + 1 for _, p, _ in rows],
        "loss_masks": [torch.tensor(m, dtype=torch.int32) for _, _, m in rows],
    }
    for key, f in (("log_probs", logp), ("ref_log_probs", ref), ("values", value)):
        data[key] = [torch.tensor([f(j) for j in p]) for _, p, _ in rows]
    data["rollout_log_probs"] = data["log_probs"]
    return data, [[j if m else -1 for j, m in zip(p, mask)] for _, p, mask in rows]


def args_for(estimator: str, kl_coef: float, gamma: float, lambd: float, normalize: bool) -> Namespace:
    return Namespace(
        advantage_estimator=estimator,
        kl_coef=kl_coef,
        gamma=gamma,
        lambd=lambd,
        kl_loss_type="k1",
        use_rollout_logprobs=False,
        normalize_advantages=normalize,
        use_opd=False,
        custom_advantage_function_path=REINFORCE_PLUS_PLUS_PATH
        if estimator == "reinforce_plus_plus"
        else None,
    )


def per_token(compute: Any, args: Namespace, per_turn: bool) -> dict[tuple[int, int], float]:
    """(sample's trajectory, absolute position) -> advantage of every sampled token."""
    data, positions = layout(per_turn)
    compute(args, data)
    out = {}
    for i, (adv, where) in enumerate(zip(data["advantages"], positions)):
        trajectory = i // len(TURNS) if per_turn else i
        out.update({(trajectory, j): float(a) for a, j in zip(adv, where) if j >= 0})
    return out


def config(**swe: Any) -> PluginConfig:
    return PluginConfig.from_sources(SimpleNamespace(**{f"swe_{k}": v for k, v in swe.items()}), env={})


SETTINGS = [
    (e, kl, g, lam)
    for e, kl, g, lam in itertools.product(ESTIMATORS, (0.0, 0.1), (1.0, 0.9), (1.0, 0.95))
    if e == "ppo" or lam == 1.0
]


@pytest.fixture
def restated_ppo_utils(monkeypatch):
    """`reinforce_plus_plus_returns` imports slime's helper: without slime, the restated one under its name."""
    if "slime.utils.ppo_utils" in sys.modules:
        return
    module = types.ModuleType("slime.utils.ppo_utils")
    module.get_reinforce_plus_plus_returns = upstream_estimators.reinforce_plus_plus_returns  # type: ignore[attr-defined]
    for name in ("slime", "slime.utils"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "slime.utils.ppo_utils", module)


@pytest.mark.parametrize("estimator, kl_coef, gamma, lambd", SETTINGS)
def test_an_estimator_runs_exactly_when_the_plugin_lets_it(
    restated_ppo_utils, estimator, kl_coef, gamma, lambd
):
    args = args_for(estimator, kl_coef, gamma, lambd, normalize=False)
    one = per_token(upstream_estimators.compute_advantages, args, per_turn=False)
    split = per_token(upstream_estimators.compute_advantages, args, per_turn=True)
    assert one.keys() == split.keys() and len(one) == 2 * sum(s for s, _ in TURNS)
    exact = all(abs(one[k] - split[k]) < 1e-6 for k in one)
    refused = []
    for cfg in (config(), config(samples="turn")):
        try:
            check_estimator(args, cfg)
        except ValueError as exc:
            refused.append(str(exc))
    assert bool(refused) == (not exact), (refused, one, split)
    for message in refused:  # the refusal names the settings that make it exact
        assert "--kl-coef 0 --gamma 1" in message and "swe_samples: last" in message
    check_estimator(args, config(context_management=False))  # one sample per trajectory: anything goes
    check_estimator(args, config(samples="last"))


def test_the_reference_is_not_trivially_equal(restated_ppo_utils):
    """A discount really changes the split samples' advantages (so the test above can fail)."""
    args = args_for("reinforce_plus_plus", 0.0, 0.9, 1.0, normalize=False)
    one = per_token(upstream_estimators.compute_advantages, args, per_turn=False)
    split = per_token(upstream_estimators.compute_advantages, args, per_turn=True)
    assert max(abs(one[k] - split[k]) for k in one) > 0.1


def removed_layout() -> tuple[dict[str, Any], list[list[int]]]:
    """`layout(per_turn=True)` plus a removed trajectory's one sample: slime zeroed its mask (remove_sample)."""
    data, positions = layout(per_turn=True)
    data["rewards"].append(0.0)
    data["response_lengths"].append(1)
    data["total_lengths"].append(PROMPT + 1)
    data["loss_masks"].append(torch.tensor([0], dtype=torch.int32))
    for key in ("log_probs", "ref_log_probs", "values"):
        data[key].append(torch.tensor([-0.5]))
    data["rollout_log_probs"] = data["log_probs"]
    return data, positions + [[-1]]


def removed_sample_check(compute: Any) -> None:
    """A removed sample crashes upstream's REINFORCE++ unless the plugin's returns are given; with them (and
    with every other estimator) it gets zero advantage and the others get what they get without it."""
    crash = args_for("reinforce_plus_plus", 0.0, 1.0, 1.0, normalize=True)
    crash.custom_advantage_function_path = None
    with pytest.raises(AssertionError, match="Sequence at index 6 is fully masked"):
        compute(crash, removed_layout()[0])
    with pytest.raises(ValueError, match=REINFORCE_PLUS_PLUS_PATH):
        check_options(crash, config(samples="last"), evaluation=False)  # refused in every mode
    for estimator in ESTIMATORS:
        args = args_for(estimator, 0.0, 1.0, 1.0, normalize=True)
        with_removed, _ = removed_layout()
        compute(args, with_removed)
        without, _ = layout(per_turn=True)
        compute(args, without)
        assert float(with_removed["advantages"][-1].abs().sum()) == 0.0 or estimator == "ppo", estimator
        for got, want in zip(with_removed["advantages"], without["advantages"]):
            assert torch.allclose(got, want, atol=1e-6), estimator


def test_a_removed_sample_crashes_no_estimator(restated_ppo_utils):
    removed_sample_check(upstream_estimators.compute_advantages)


@pytest.fixture
def one_rank():
    """A gloo group of one: slime's whitening all-reduces its statistics."""
    dist = torch.distributed
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_slime_computes_what_the_restatement_says(upstream_slime, one_rank):
    """The pinned slime's own compute_advantages_and_returns (and get_reinforce_plus_plus_returns, through
    our custom advantage function): the restatement's numbers, the removed sample's crash and its fix."""
    loss = upstream_slime("slime.backends.megatron_utils.loss")
    for estimator, kl_coef, gamma, lambd in SETTINGS:
        for normalize in (False, True):
            args = args_for(estimator, kl_coef, gamma, lambd, normalize)
            for per_turn in (False, True):
                assert per_token(loss.compute_advantages_and_returns, args, per_turn) == pytest.approx(
                    per_token(upstream_estimators.compute_advantages, args, per_turn), abs=1e-5
                ), (estimator, kl_coef, gamma, lambd, normalize, per_turn)
    removed_sample_check(loss.compute_advantages_and_returns)
