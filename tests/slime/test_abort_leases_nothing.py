"""Aborts lease nothing: an episode that has not leased when slime aborts returns at once, ABORTED, without
asking the fleet for anything (issue 47, item 5).

The fleet is a recording pool on loopback: every request it gets is kept with its time, and every lease is
refused (404: no such image, a fleet failure the plugin removes at once), so the control episode (slime not aborting) shows that a lease request would be seen.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from swe_rl.slime import e2e, runtime
from swe_rl.slime.config import PluginConfig
from swe_rl.slime.samples import CompatSample as Sample
from swe_rl.testing.fake_sglang import FakeSGLang
from swe_rl.testing.loopback_server import LoopbackServer

TOOLZ = "pytoolz__toolz-9001"


@dataclass
class RecordingPool(LoopbackServer):
    """Answers every request 404 (for ``/allocate``: the image is missing) and records (time, method, path)."""

    seen: list[tuple[float, str, str]] = field(default_factory=list)

    async def _any(self, request: Request) -> JSONResponse:
        self.seen.append((time.monotonic(), request.method, request.url.path))
        return JSONResponse({"error": "recording pool: no such image"}, 404)

    def routes(self) -> list[Route]:
        return [Route("/{path:path}", self._any, methods=["GET", "POST", "DELETE", "PUT"])]


@pytest.fixture
async def fleet_args(qwen_tokenizer, qwen_tokenizer_dir, monkeypatch):
    from test_e2e import new_sample  # the fixture rows

    with RecordingPool() as pool, FakeSGLang(qwen_tokenizer, []) as sglang:
        monkeypatch.setenv("SWE_POOL_URL", f"http://127.0.0.1:{pool.port}")
        monkeypatch.setenv("SWE_POOL_TOKEN", "t")
        monkeypatch.setenv("SWE_CLIENT_RETRIES", "0")
        monkeypatch.setenv("SWE_MAX_CONCURRENT", "1")
        args = SimpleNamespace(
            sglang_router_ip="127.0.0.1",
            sglang_router_port=sglang.port,
            hf_checkpoint=str(qwen_tokenizer_dir),
            reward_key="score",
            custom_reward_post_process_path=runtime.POST_PROCESS_PATH,
        )
        yield args, pool, sglang, new_sample
        await e2e.shutdown()


async def test_episodes_queued_when_slime_aborts_lease_nothing(fleet_args, monkeypatch):
    args, pool, sglang, new_sample = fleet_args
    aborting = False
    monkeypatch.setattr(runtime, "slime_aborting", lambda a: aborting)  # GenerateState(args).aborted
    state = runtime.state(PluginConfig.from_args(args))
    await state.semaphore.acquire()  # an episode in flight holds the one slot: the next ones queue
    queued = [asyncio.create_task(e2e.generate(args, new_sample(index=i), {})) for i in (1, 2)]
    await asyncio.sleep(0.5)
    assert not any(t.done() for t in queued)
    aborting, aborted_at = True, time.monotonic()
    state.semaphore.release()
    out = await asyncio.wait_for(asyncio.gather(*queued), 60)
    for (sample,) in out:
        assert sample.status is Sample.Status.ABORTED and sample.reward is None
        assert sample.metadata["swe"]["aborted"] and sample.loss_mask == [0]
    after = [s for s in pool.seen if s[0] >= aborted_at]
    assert after == [], after  # zero requests to the fleet after the abort: no lease
    assert not sglang.requests  # nor to the policy server


async def test_an_episode_started_after_the_abort_asks_nobody(fleet_args, monkeypatch):
    args, pool, sglang, new_sample = fleet_args
    monkeypatch.setattr(runtime, "slime_aborting", lambda a: True)
    (sample,) = await e2e.generate(args, new_sample(), {})
    assert sample.status is Sample.Status.ABORTED and sample.remove_sample
    assert pool.seen == [] and sglang.info_requests == [] and not sglang.requests


async def test_without_an_abort_the_recorder_sees_the_lease(fleet_args, monkeypatch):
    """The control: the same episode, slime not aborting, asks the pool for a lease (refused: removed)."""
    args, pool, sglang, new_sample = fleet_args
    monkeypatch.setattr(runtime, "slime_aborting", lambda a: False)
    (sample,) = await e2e.generate(args, new_sample(), {})
    assert sample.remove_sample and sample.metadata["swe"]["removed_reason"].startswith("env_error")
    assert ("POST", "/allocate") in [(method, path) for _, method, path in pool.seen], pool.seen
