"""swe_rl.fleet.retry: the one retry loop of the HTTP clients, driven by a fake call (no network)."""

from __future__ import annotations

import asyncio

import pytest

from swe_rl.fleet.retry import RetryPolicy, TryAgain, retry_after_seconds, retry_async


class Fake:
    """A call failing with the given exceptions in turn, then returning "ok"; records the sleeps."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0
        self.now = 0.0
        self.sleeps: list[float] = []

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def run(fake: Fake, policy: RetryPolicy, **kw) -> str:
    return asyncio.run(retry_async(fake, policy, sleep=fake.sleep, clock=fake.clock, **kw))


def test_retries_then_returns_with_growing_delays():
    fake = Fake(*(TryAgain(RuntimeError(str(i))) for i in range(4)))
    assert run(fake, RetryPolicy(retries=4, backoff=1.0, backoff_max=5.0)) == "ok"
    assert fake.calls == 5 and fake.sleeps == [1.0, 2.0, 4.0, 5.0]


def test_gives_up_after_the_retries_with_the_wrapped_error():
    fake = Fake(*(TryAgain(KeyError(f"e{i}")) for i in range(10)))
    with pytest.raises(KeyError, match="e2"):
        run(fake, RetryPolicy(retries=2, backoff=0.5))
    assert fake.calls == 3 and fake.sleeps == [0.5, 1.0]  # no sleep after the last attempt


def test_other_errors_end_the_loop_at_once_unless_retryable():
    fake = Fake(ValueError("bad request"))
    with pytest.raises(ValueError):
        run(fake, RetryPolicy(retries=5))
    assert fake.calls == 1 and fake.sleeps == []
    fake = Fake(ConnectionError("reset"), ConnectionError("reset"))
    assert (
        run(fake, RetryPolicy(retries=5, backoff=0.1), retryable=lambda e: isinstance(e, ConnectionError))
        == "ok"
    )
    assert fake.calls == 3
    fake = Fake(*(ConnectionError(str(i)) for i in range(5)))
    with pytest.raises(ConnectionError, match="1"):  # the plain exception itself when giving up
        run(fake, RetryPolicy(retries=1), retryable=lambda e: isinstance(e, ConnectionError))


def test_retry_after_replaces_the_backoff_delay():
    fake = Fake(TryAgain(RuntimeError("full"), retry_after=3.0), TryAgain(RuntimeError("x")))
    assert run(fake, RetryPolicy(retries=3, backoff=0.25)) == "ok"
    assert fake.sleeps == [3.0, 0.5]  # the second delay is still the second of the backoff


def test_jitter_stays_within_half_and_full_delay():
    policy = RetryPolicy(backoff=2.0, backoff_max=10.0, jitter=True)
    for retry, full in enumerate([2.0, 4.0, 8.0, 10.0, 10.0]):
        for _ in range(50):
            assert full / 2 <= policy.delay(retry) <= full


def test_a_deadline_bounds_the_retries_and_cuts_the_last_sleep():
    fake = Fake(*(TryAgain(TimeoutError(str(i)), retry_after=4.0) for i in range(100)))
    with pytest.raises(TimeoutError):
        run(fake, RetryPolicy(retries=None, deadline=10.0))
    assert fake.sleeps == [4.0, 4.0, 2.0] and fake.calls == 4
    with pytest.raises(ValueError, match="deadline"):
        run(Fake(), RetryPolicy(retries=None))


def test_cancellation_is_never_retried():
    fake = Fake(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        run(fake, RetryPolicy(retries=5), retryable=lambda e: True)
    assert fake.calls == 1


def test_retry_after_header():
    assert 2.0 <= retry_after_seconds("2") <= 2.4
    assert 0.1 <= retry_after_seconds("0") <= 0.12
    assert 1.0 <= retry_after_seconds(None) <= 1.2
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 1.0
