"""Call replay (swe_rl/fleet/pool/call_replay.py): a named call sent again gets its first answer, runs once,
and a pool that cannot know whether it ran says so instead of running it twice."""

from __future__ import annotations

import asyncio

import pytest
from starlette.responses import JSONResponse

from swe_rl.fleet.pool.call_replay import CallReplay
from swe_rl.fleet.protocol import ApiError

KEY = ("exec", "lease-1")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counting(status: int = 200, size: int = 10):
    runs: list[int] = []

    async def produce():
        runs.append(1)
        await asyncio.sleep(0)
        return JSONResponse({"output": "x" * size, "run": len(runs)}, status), "ok"

    return runs, produce


def test_the_same_call_id_runs_once_and_gets_the_first_answer():
    async def go():
        replay = CallReplay()
        runs, produce = counting()
        first, _ = await replay.run("c1", KEY, None, produce)
        again, outcome = await replay.run("c1", KEY, replay.boot, produce)
        return runs, first, again, outcome, replay.replayed

    runs, first, again, outcome, replayed = asyncio.run(go())
    assert runs == [1] and again is first and outcome == "replayed" and replayed == 1


def test_a_call_sent_again_while_the_first_runs_waits_for_it():
    async def go():
        replay = CallReplay()
        gate = asyncio.Event()
        runs: list[int] = []

        async def slow():
            runs.append(1)
            await gate.wait()
            return JSONResponse({"ok": True}), "ok"

        first = asyncio.create_task(replay.run("c1", KEY, None, slow))
        await asyncio.sleep(0)
        second = asyncio.create_task(replay.run("c1", KEY, replay.boot, slow))
        await asyncio.sleep(0)
        assert not second.done()
        gate.set()
        a, b = await first, await second
        return runs, a[0] is b[0]

    runs, same = asyncio.run(go())
    assert runs == [1] and same


def test_a_resend_the_same_pool_never_saw_runs_once():
    async def go():
        replay = CallReplay()
        runs, produce = counting()
        await replay.run("c1", KEY, replay.boot, produce)  # the first send never arrived
        await replay.run("c1", KEY, replay.boot, produce)
        return runs

    assert asyncio.run(go()) == [1]


@pytest.mark.parametrize("why", ["restarted", "expired", "over budget"])
def test_a_resend_whose_fate_is_unknown_is_refused_not_run_again(why):
    async def go():
        clock = Clock()
        replay = CallReplay(keep_seconds=60, max_bytes=100, clock=clock)
        runs, produce = counting(size=10)
        if why == "restarted":
            boot = "an-earlier-pool"
        else:
            boot = replay.boot
            await replay.run("c1", KEY, None, produce)
            if why == "expired":
                clock.now += 61
            else:
                _, big = counting(size=500)
                await replay.run("c2", KEY, None, big)  # pushes c1 (and itself) out of the budget
        with pytest.raises(ApiError) as err:
            await replay.run("c1", KEY, boot, produce)
        return runs, err.value

    runs, err = asyncio.run(go())
    assert err.status == 503 and err.extra["may_have_run"] is True
    assert len(runs) == (0 if why == "restarted" else 1)


def test_answers_are_dropped_by_age_then_by_bytes_oldest_first():
    async def go(max_bytes):
        clock = Clock()
        replay = CallReplay(keep_seconds=60, max_bytes=max_bytes, clock=clock)
        for i in range(5):  # finished at 0, 20, 40, 60, 80 s
            await replay.run(f"c{i}", KEY, None, counting(size=100)[1])
            clock.now += 20
        return (
            list(replay.done),
            replay.bytes,
            list(replay.forgotten),
            sum(c.size for c in replay.done.values()),
        )

    kept, size, forgotten, counted = asyncio.run(go(10_000))
    assert kept == ["c1", "c2", "c3", "c4"] and forgotten == ["c0"] and size == counted  # c0 is over 60 s old
    kept, size, forgotten, counted = asyncio.run(go(250))  # two answers of ~120 bytes fit
    assert kept == ["c3", "c4"] and forgotten == ["c0", "c1", "c2"] and size == counted <= 250


def test_a_call_id_is_not_reused_for_another_call():
    async def go():
        replay = CallReplay()
        await replay.run("c1", KEY, None, counting()[1])
        with pytest.raises(ApiError) as err:
            await replay.run("c1", ("exec", "lease-2"), None, counting()[1])
        return err.value

    assert asyncio.run(go()).status == 400


@pytest.mark.parametrize("status", [401, 499])
def test_a_call_refused_or_never_read_is_not_kept(status):
    async def go():
        replay = CallReplay()
        runs, produce = counting(status=status)
        await replay.run("c1", KEY, None, produce)
        await replay.run("c1", KEY, replay.boot, produce)
        return runs

    assert asyncio.run(go()) == [1, 1]


def test_a_call_cut_short_in_the_pool_fails_its_waiters_and_is_not_run_again():
    async def go():
        replay = CallReplay()

        async def hangs():
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

        first = asyncio.create_task(replay.run("c1", KEY, None, hangs))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(replay.run("c1", KEY, replay.boot, hangs))
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        with pytest.raises(ApiError) as waited:
            await waiter
        with pytest.raises(ApiError) as resent:
            await replay.run("c1", KEY, replay.boot, counting()[1])
        return waited.value, resent.value

    waited, resent = asyncio.run(go())
    assert waited.extra["may_have_run"] and resent.status == 503 and resent.extra["may_have_run"]
