"""slime's fully-asynchronous rollouts drive the plugin unchanged (issue 47, item 6; docs/training.md).

Through the pinned slime's own worker (`slime.rollout.fully_async_rollout.generate_rollout_fully_async`,
with slime's `generate_and_rm_group` → `generate_and_rm` calling ``--custom-generate-function-path
swe_rl.slime.e2e.generate`` and ``--custom-rm-path swe_rl.slime.reward.reward_func``): episodes play on an
in-process environment (a fresh git clone each: `swe_rl.agent.local_environment`, in place of the fleet's
lease) against the project's SGLang-protocol server, and a weight update lands mid-episode: the server
aborts the in-flight request (SGLang's ``pause_generation`` in its default ``abort`` mode, as slime's
weight updaters call it) and serves version 2 from then on. Every episode comes back trained-shaped, the
aborted turn sent again and sampled by version 2, each turn's ``weight_version`` recorded.
Skips without slime's source (``SWE_SLIME_GIT`` / ``SLIME_DIR``); the plugin's side of the same contract
(resend, per-turn versions) is `test_a_weight_update_mid_episode_keeps_the_episode`, always.
"""

from __future__ import annotations

import sys
import threading
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from upstream_slime import _InertModule

from swe_rl.agent.local_environment import init_repo, local_env_factory
from swe_rl.grading import GradeResult, GradeStatus
from swe_rl.harnesses.bash_block import SUBMIT_SENTINEL
from swe_rl.slime import e2e, runtime
from swe_rl.testing.fake_sglang import FakeSGLang, TokenReply

SUBMIT = f"echo {SUBMIT_SENTINEL} && git add -A && git diff --cached"
TURNS_PER_EPISODE = 3
ASSISTANT_HEADER = (151644, 77091)  # <|im_start|> assistant


def turn(reasoning: str, command: str) -> str:
    return f"<think>\n{reasoning}\n</think>\n\nNext.\n\n```bash\n{command}\n```"


class WeightServer:
    """Replies of the SGLang-protocol server: each episode runs ``ls`` then ``sed`` then submits; the
    ``update_after``-th request is aborted (a weight update pauses the engine) and version 2 serves from
    then on."""

    def __init__(self, update_after: int) -> None:
        self.update_after, self.served, self.version = update_after, 0, "1"
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> TokenReply:
        ids = body["input_ids"]
        done = sum(1 for a, b in zip(ids, ids[1:]) if (a, b) == ASSISTANT_HEADER) - 1  # the open header
        with self.lock:
            self.served += 1
            if self.served == self.update_after:
                self.version = "2"
                return TokenReply(finish_reason="abort", ids=[])
            version = self.version
        command = ("ls", "sed -i 's/1/2/' a.py", SUBMIT)[min(done, TURNS_PER_EPISODE - 1)]
        return TokenReply(text=turn(f"turn {done}", command), weight_version=version)


class LocalGrader:
    async def grade(self, instance: Any, patch: str) -> GradeResult:
        resolved = "+x = 2" in patch
        return GradeResult(
            instance_id=instance.instance_id,
            status=GradeStatus.RESOLVED if resolved else GradeStatus.UNRESOLVED,
            resolved=resolved,
        )


class NoPrefetch:
    def after(self, instance_id: str) -> None:
        return None


@pytest.fixture
def local_fleet(monkeypatch, tmp_path):
    """The plugin's fleet session replaced by an in-process environment and a grader of the patch."""
    repo = init_repo(tmp_path / "src", {"a.py": "x = 1\n"})
    session = SimpleNamespace(env_factory=local_env_factory(repo), client=None, grader=LocalGrader())
    monkeypatch.setattr(runtime.ProcessState, "fleet", lambda self, config: session)
    monkeypatch.setattr(runtime.ProcessState, "prefetch_hints", lambda self, args, config: NoPrefetch())
    return session


def plugin_args(sglang: FakeSGLang, tokenizer_dir: Path, **slime: Any) -> Namespace:
    return Namespace(
        sglang_router_ip="127.0.0.1",
        sglang_router_port=sglang.port,
        hf_checkpoint=str(tokenizer_dir),
        reward_key="score",
        custom_reward_post_process_path=runtime.POST_PROCESS_PATH,
        custom_generate_function_path="swe_rl.slime.e2e.generate",
        custom_rm_path="swe_rl.slime.reward.reward_func",
        swe_step_limit=TURNS_PER_EPISODE + 2,
        **slime,
    )


def rows() -> list[dict[str, Any]]:
    from test_e2e import rows as fixture_rows

    return list(fixture_rows().values())


async def test_a_weight_update_mid_episode_keeps_the_episode(
    local_fleet, qwen_tokenizer, qwen_tokenizer_dir, monkeypatch
):
    """The plugin alone (no slime): the aborted turn is sent again, the episode goes on in its environment,
    and its turns carry the versions that sampled them."""
    from test_e2e import new_sample

    monkeypatch.setattr(runtime, "slime_aborting", lambda args: False)
    server = WeightServer(update_after=2)
    with FakeSGLang(qwen_tokenizer, [server] * 10) as sglang:
        samples = await e2e.generate(plugin_args(sglang, qwen_tokenizer_dir), new_sample(), {})
    await e2e.shutdown()
    record = samples[0].metadata["swe"]
    assert not record["removed"] and record["status"] == "resolved", record
    assert record["weight_versions"] == ["1", "2", "2"]  # turn 0 by v1; turn 1 aborted, resent, v2
    assert len(sglang.requests) == TURNS_PER_EPISODE + 1
    assert sglang.requests[1]["input_ids"] == sglang.requests[2]["input_ids"]  # the same turn, resent
    assert [o.finish_reason for o in sglang.outputs].count("abort") == 1


class Buffer:
    """slime's data buffer interface (``get_samples(n)`` groups, ``add_samples(groups)``) over fixture rows."""

    def __init__(self, Sample: Any, n_per_prompt: int) -> None:
        self.Sample, self.n, self.next, self.returned = Sample, n_per_prompt, 0, []
        self.lock = threading.Lock()

    def get_samples(self, count: int) -> list[list[Any]]:
        with self.lock:
            groups = []
            for _ in range(count):
                row = rows()[0]
                i = self.next
                self.next += 1
                groups.append(
                    [
                        self.Sample(
                            group_index=i,
                            index=i * self.n + k,
                            prompt=row["problem_statement"],
                            metadata={"instance": row, "data_source": "swe-rl-fixtures"},
                        )
                        for k in range(self.n)
                    ]
                )
            return groups

    def add_samples(self, groups: list[list[Any]]) -> None:
        with self.lock:
            self.returned.extend(groups)


def import_with_stand_ins(upstream_slime: Any, name: str, monkeypatch: Any) -> Any:
    """Import slime's ``name``; a third-party package its imports need but this test never reaches (Pillow for
    images, pylatexenc for math rewards, ...) that is not installed gets an inert stand-in."""
    for _ in range(20):
        try:
            return upstream_slime(name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if not missing or missing == "slime" or missing in sys.modules:
                raise
            stand_in = _InertModule(missing)
            stand_in.__path__ = []  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, missing, stand_in)
            for loaded in [m for m in sys.modules if m.split(".")[0] == "slime"]:
                sys.modules.pop(loaded)  # re-import what failed half-way
    raise AssertionError(f"{name}: too many missing packages")


@pytest.mark.parametrize(
    "rollout_function, samples",
    [(runtime.FULLY_ASYNC_PATH, "last"), (runtime.OUR_FULLY_ASYNC_PATH, "segment")],
)
def test_slime_fully_async_worker_drives_the_plugin(
    upstream_slime, local_fleet, qwen_tokenizer, qwen_tokenizer_dir, monkeypatch, rollout_function, samples
):
    """slime's own function with one sample per trajectory; with segment samples, slime's worker under the
    project's list-reading collector (`swe_rl.slime.fully_async`)."""
    fully_async = import_with_stand_ins(upstream_slime, "slime.rollout.fully_async_rollout", monkeypatch)
    module, _, name = rollout_function.rpartition(".")
    rollout = getattr(upstream_slime(module), name)
    Sample = upstream_slime("slime.utils.types").Sample
    server = WeightServer(update_after=5)
    with FakeSGLang(qwen_tokenizer, [server] * 200) as sglang:
        args = plugin_args(
            sglang,
            qwen_tokenizer_dir,
            rollout_global_dataset=True,
            rollout_batch_size=2,
            n_samples_per_prompt=2,
            sglang_server_concurrency=2,
            rollout_num_engines=1,
            sglang_dp_size=None,
            rollout_temperature=1.0,
            rollout_top_p=1.0,
            rollout_top_k=-1,
            rollout_max_response_len=256,
            rollout_stop=None,
            rollout_stop_token_ids=None,
            rollout_skip_special_tokens=False,
            group_rm=False,
            partial_rollout=False,
            mask_offpolicy_in_partial_rollout=False,
            rollout_sample_hook_path=None,
            advantage_estimator="grpo",
            rewards_normalization=True,
            rollout_function_path=rollout_function,
            swe_samples=samples,
        )
        buffer = Buffer(Sample, 2)
        try:
            first = rollout(args, 0, buffer)
            second = rollout(args, 1, buffer)  # the worker kept going
        finally:
            fully_async._stop_global_worker()
            loop = upstream_slime("slime.utils.async_utils").get_async_loop().loop
            loop.call_soon_threadsafe(loop.stop)  # slime's background loop thread ends with the test
    assert len(first) == len(second) == 2
    episodes = [item for group in first + second for item in group]
    assert len(episodes) == 8 and all(isinstance(item, list) == (samples != "last") for item in episodes)
    versions = []
    for item in episodes:
        parts = item if isinstance(item, list) else [item]
        record = parts[0].metadata["swe"]
        assert all(s.status is Sample.Status.COMPLETED and not s.remove_sample for s in parts), record
        assert isinstance(parts[-1].reward, dict) and record["status"] == "resolved", record
        assert len(record["weight_versions"]) == record["steps"] == TURNS_PER_EPISODE
        versions.append(record["weight_versions"])
    assert ["1", "2", "2"] in versions or ["1", "1", "2"] in versions, versions  # updated mid-episode
    assert [o.finish_reason for o in sglang.outputs].count("abort") == 1 and not buffer.returned
