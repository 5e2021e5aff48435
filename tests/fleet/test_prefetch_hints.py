"""PrefetchHints: each image of the next K instances is hinted once, in run order, and a failing pool
never fails the run."""

from __future__ import annotations

import asyncio

from swe_rl.fleet.prefetch_hints import PrefetchHints


async def test_hints_the_next_k_once_in_order():
    sent: list[dict[str, int]] = []

    async def send(images):
        sent.append(images)

    order = [("i1", "a"), ("i2", "b"), ("i3", "b"), ("i4", "c"), ("i5", "d")]
    hints = PrefetchHints(send, order, ahead=2)
    assert hints.after(None) == {"a": 1, "b": 1}
    assert hints.after("i1") == {"b": 1}  # i2 went already
    assert hints.after("i1") == {}
    assert hints.after("i4") == {"d": 1}  # the end of the list
    assert hints.after("unknown") == {}
    await asyncio.sleep(0)
    assert sent == [{"a": 1, "b": 1}, {"b": 1}, {"d": 1}]
    assert PrefetchHints(send, order, ahead=0).after(None) == {}


async def test_a_failing_send_is_only_logged():
    async def send(images):
        raise RuntimeError("pool down")

    hints = PrefetchHints(send, [("i1", "a")], ahead=4)
    assert hints.after(None) == {"a": 1}
    await asyncio.sleep(0.01)  # the task ended without an unhandled error
