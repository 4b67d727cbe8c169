"""The request memory pool: Kafka's non-strict admission, arrival order, small frames."""

from __future__ import annotations

import asyncio

import pytest

from core.server.memory_pool import RequestMemoryPool

SMALL = 100


def run(coro):
    return asyncio.run(coro)


def test_frames_are_admitted_while_reservations_are_below_the_capacity() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(1000, small_frame=SMALL)
        first = await pool.reserve(600)
        second = await pool.reserve(600)  # 600 < 1000: admitted, the pool goes past it
        assert pool.reserved == 1200
        third = asyncio.ensure_future(pool.reserve(200))
        await asyncio.sleep(0)
        assert not third.done() and pool.waiting == 1
        first.release()
        assert not third.done()  # 600 reserved: below 1000, so it is admitted now
        await asyncio.sleep(0)
        assert third.done() and pool.reserved == 800
        second.release()
        (await third).release()
        assert pool.reserved == 0

    run(scenario())


def test_waiting_frames_are_admitted_in_arrival_order() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(1000, small_frame=SMALL)
        held = await pool.reserve(1000)
        big = asyncio.ensure_future(pool.reserve(1000))
        await asyncio.sleep(0)
        later = asyncio.ensure_future(pool.reserve(200))  # queued behind big, not past it
        await asyncio.sleep(0)
        held.release()
        await asyncio.sleep(0)
        assert big.done() and not later.done()
        (await big).release()
        await asyncio.sleep(0)
        assert later.done()

    run(scenario())


def test_small_frames_are_admitted_when_the_pool_is_full_and_still_count() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(1000, small_frame=SMALL)
        await pool.reserve(1000)
        small = pool.try_reserve(SMALL)
        assert small is not None and pool.reserved == 1000 + SMALL
        assert pool.try_reserve(SMALL + 1) is None

    run(scenario())


def test_a_cancelled_wait_leaves_nothing_reserved_and_lets_the_next_in() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(1000, small_frame=SMALL)
        held = await pool.reserve(1000)
        doomed = asyncio.ensure_future(pool.reserve(500))
        after = asyncio.ensure_future(pool.reserve(500))
        await asyncio.sleep(0)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert pool.waiting == 1
        held.release()
        held.release()  # idempotent
        await asyncio.sleep(0)
        assert after.done() and pool.reserved == 500

    run(scenario())


def test_an_unbounded_pool_never_waits() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(-1, small_frame=SMALL)
        for _ in range(10):
            assert pool.try_reserve(1 << 30) is not None
        assert pool.reserved == 0

    run(scenario())
