"""Delayed operations and the purgatory: exactly-once completion, watching, purging."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from core.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from core.server.timing_wheel import Timer


class FakeClock:
    def __init__(self, now: float = 0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Op(DelayedOperation):
    """Completes once ``ready`` is set; records its callbacks."""

    def __init__(self, delay_ms: int, *, ready: bool = False) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.events: list[str] = []
        self.after_complete: Callable[[], None] | None = None

    def try_complete(self) -> bool:
        return self.force_complete() if self.ready else False

    def on_complete(self) -> None:
        self.events.append("complete")
        if self.after_complete is not None:
            self.after_complete()

    def on_expiration(self) -> None:
        self.events.append("expire")


def manual(purge_interval: int = 1000) -> tuple[DelayedOperationPurgatory[str], Timer, FakeClock]:
    clock = FakeClock()
    timer = Timer(clock=clock)
    return DelayedOperationPurgatory("Test", timer, purge_interval=purge_interval), timer, clock


def expire_until(timer: Timer, clock: FakeClock, until: float) -> None:
    while (nxt := timer.next_expiration_ms()) is not None and nxt <= until:
        clock.now = max(clock.now, nxt)
        timer.advance_clock()
    clock.now = max(clock.now, until)
    timer.advance_clock()


def test_completes_at_once_when_it_can() -> None:
    purgatory, timer, _ = manual()
    op = Op(100, ready=True)
    assert purgatory.try_complete_else_watch(op, ["a", "b"]) is True
    assert op.is_completed
    assert op.events == ["complete"]
    assert purgatory.watched() == 0
    assert purgatory.num_keys() == 0
    assert purgatory.num_delayed() == 0
    assert timer.size() == 0


def test_watches_then_completes_on_an_event() -> None:
    purgatory, timer, _ = manual()
    op = Op(100)
    assert purgatory.try_complete_else_watch(op, ["a", "b"]) is False
    assert purgatory.watched() == 2
    assert purgatory.num_delayed() == 1
    assert timer.size() == 1
    assert purgatory.check_and_complete("a") == 0  # not ready yet: still watched
    assert purgatory.watched() == 2

    op.ready = True
    assert purgatory.check_and_complete("a") == 1
    assert op.events == ["complete"]
    assert purgatory.num_delayed() == 0
    assert timer.size() == 0  # the timeout is cancelled
    assert purgatory.watched() == 1  # still listed under "b" until "b" is checked or purged
    assert purgatory.num_keys() == 1  # "a" is dropped
    assert purgatory.check_and_complete("b") == 0  # completed earlier: just removed
    assert purgatory.watched() == 0
    assert purgatory.num_keys() == 0
    assert purgatory.check_and_complete("never-watched") == 0


def test_event_between_try_and_watch_is_not_missed() -> None:
    """The second try after watching catches a condition that turned true meanwhile."""
    purgatory, timer, _ = manual()

    class Flaky(Op):
        tries = 0

        def try_complete(self) -> bool:
            self.tries += 1
            if self.tries == 2:
                self.ready = True  # became true while it was being watched
            return super().try_complete()

    op = Flaky(100)
    assert purgatory.try_complete_else_watch(op, ["a"]) is True
    assert op.events == ["complete"]
    assert timer.size() == 0
    assert purgatory.num_delayed() == 0
    assert purgatory.watched() == 1  # left for check_and_complete or a purge to remove
    assert purgatory.check_and_complete("a") == 0
    assert purgatory.watched() == 0


def test_expiration_completes_once_then_reports_it() -> None:
    purgatory, timer, clock = manual()
    op = Op(100)
    assert not purgatory.try_complete_else_watch(op, ["a"])
    expire_until(timer, clock, 99)
    assert op.events == []
    expire_until(timer, clock, 100)
    assert op.events == ["complete", "expire"]  # Kafka's order: forceComplete, onExpiration
    assert purgatory.num_delayed() == 0
    op.ready = True
    assert purgatory.check_and_complete("a") == 0
    assert op.force_complete() is False
    assert op.events == ["complete", "expire"]
    assert purgatory.num_keys() == 0


def test_event_and_expiration_in_the_same_tick_complete_once() -> None:
    for event_first in (True, False):
        purgatory, timer, clock = manual()
        op = Op(10)
        purgatory.try_complete_else_watch(op, ["a", "b"])
        clock.now = 10  # due, but the timer callback has not run yet
        op.ready = True
        if event_first:
            assert purgatory.check_and_complete("b") == 1
            assert timer.advance_clock() is False  # its bucket emptied: nothing due
            assert op.events == ["complete"]
        else:
            timer.advance_clock()
            assert op.events == ["complete", "expire"]
            assert purgatory.check_and_complete("b") == 0
        assert op.events.count("complete") == 1
        assert purgatory.num_delayed() == 0
        assert timer.size() == 0


def test_expired_at_once_when_delay_is_zero() -> None:
    purgatory, timer, _ = manual()
    op = Op(0)
    assert purgatory.try_complete_else_watch(op, ["a"]) is False
    assert op.events == ["complete", "expire"]
    assert purgatory.num_delayed() == 0
    assert timer.size() == 0


def test_on_complete_may_check_the_same_key() -> None:
    """Re-entry: completing one op triggers the check that completes the others."""
    purgatory, _, _ = manual()
    first, second, third = Op(100), Op(100), Op(100)
    for op in (first, second, third):
        purgatory.try_complete_else_watch(op, ["k"])
    inner: list[int] = []

    def cascade() -> None:
        second.ready = third.ready = True
        inner.append(purgatory.check_and_complete("k"))

    first.after_complete = cascade
    first.ready = True
    assert purgatory.check_and_complete("k") == 1
    assert inner == [2]
    for op in (first, second, third):
        assert op.events == ["complete"]
    assert purgatory.watched() == 0
    assert purgatory.num_keys() == 0
    assert purgatory.num_delayed() == 0


def test_try_complete_is_not_reentered_but_retried() -> None:
    purgatory, _, _ = manual()

    class Nested(Op):
        depth = 0
        max_depth = 0
        calls = 0

        def try_complete(self) -> bool:
            self.calls += 1
            self.depth += 1
            self.max_depth = max(self.max_depth, self.depth)
            try:
                if self.calls == 2:
                    # Something it touches fires an event on its own key.
                    self.ready = True
                    assert purgatory.check_and_complete("k") == 0
                    return False  # the condition turned true after it was read
                return super().try_complete()
            finally:
                self.depth -= 1

    op = Nested(100)
    purgatory.try_complete_else_watch(op, ["k"])  # tries 1 (before watching)
    # Try 2 runs inside the watch's second try; it triggers a nested check that must not
    # re-enter, and the pending trigger makes the outer call try a third time.
    assert op.max_depth == 1
    assert op.calls == 3
    assert op.events == ["complete"]


def test_cancel_for_key_drops_the_timeout_without_completing() -> None:
    purgatory, timer, clock = manual()
    op = Op(50)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    assert purgatory.cancel_for_key("a") == [op]
    assert purgatory.cancel_for_key("a") == []
    assert not op.is_completed
    assert purgatory.num_delayed() == 0
    assert timer.size() == 0
    assert purgatory.watched() == 1
    expire_until(timer, clock, 1_000)
    assert op.events == []
    op.ready = True
    assert purgatory.check_and_complete("b") == 1
    assert op.events == ["complete"]
    assert purgatory.watched() == 0


def test_purge_removes_completed_ops_from_other_keys() -> None:
    purgatory, _, _ = manual(purge_interval=10)
    ops = [Op(1_000) for _ in range(13)]
    for i, op in enumerate(ops[:8]):
        purgatory.try_complete_else_watch(op, [f"own{i}", "common"])
    assert purgatory.watched() == 16
    for op in ops[:8]:
        op.ready = True
    assert purgatory.check_and_complete("common") == 8
    # 8 completed ops are still listed under their own keys: below the purge threshold.
    assert purgatory.watched() == 8
    assert purgatory.num_keys() == 8
    for i, op in enumerate(ops[8:], start=8):
        purgatory.try_complete_else_watch(op, [f"own{i}", "common"])
    for op in ops[8:]:
        op.ready = True
    assert purgatory.check_and_complete("common") == 5
    # The 11th completed-but-listed op crossed the threshold (10) and purged the lists;
    # the two completed after it are still listed under their own keys.
    assert purgatory.watched() == 2
    assert purgatory.num_keys() == 2
    assert purgatory.purge_completed() == 2
    assert purgatory.watched() == 0
    assert purgatory.num_keys() == 0
    assert all(op.events == ["complete"] for op in ops)


def test_expired_ops_under_many_keys_do_not_pile_up() -> None:
    purgatory, timer, clock = manual(purge_interval=100)
    for i in range(5_000):
        purgatory.try_complete_else_watch(Op(1 + i % 300), [f"key{i}"])
    assert purgatory.num_keys() == 5_000
    expire_until(timer, clock, 1_000)
    assert purgatory.num_delayed() == 0
    assert purgatory.watched() <= 100
    assert purgatory.num_keys() <= 100


def test_many_keys_completed_by_events_are_dropped() -> None:
    purgatory, timer, _ = manual()
    ops = [Op(10_000) for _ in range(2_000)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [i])  # type: ignore[list-item]
    for i, op in enumerate(ops):
        op.ready = True
        assert purgatory.check_and_complete(i) == 1  # type: ignore[arg-type]
    assert purgatory.num_keys() == 0
    assert purgatory.watched() == 0
    assert timer.size() == 0


def test_arguments_are_checked() -> None:
    purgatory, timer, _ = manual()
    with pytest.raises(ValueError, match="at least one key"):
        purgatory.try_complete_else_watch(Op(10), [])
    other: DelayedOperationPurgatory[str] = DelayedOperationPurgatory("Other", timer)
    op = Op(10)
    other.try_complete_else_watch(op, ["a"])
    with pytest.raises(ValueError, match="Other purgatory"):
        purgatory.try_complete_else_watch(op, ["a"])
    with pytest.raises(ValueError, match="purge_interval"):
        DelayedOperationPurgatory("Bad", timer, purge_interval=-1)


def test_shutdown_cancels_timeouts_and_refuses_new_ops() -> None:
    purgatory, timer, clock = manual()
    op = Op(10)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    purgatory.shutdown()
    assert timer.size() == 0
    assert purgatory.num_delayed() == 0
    assert purgatory.watched() == 0
    expire_until(timer, clock, 100)
    assert op.events == []
    assert purgatory.check_and_complete("a") == 0
    with pytest.raises(RuntimeError, match="shut down"):
        purgatory.try_complete_else_watch(Op(10), ["a"])


def test_concurrent_events_and_expirations_complete_each_op_once() -> None:
    """On a real loop: events on random keys race expirations; each op completes once."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        timer = Timer(loop)
        purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory(
            "Race", timer, purge_interval=20
        )
        rng = random.Random(3)
        keys = [f"p{i}" for i in range(8)]
        ops: list[Op] = []
        completed_now = 0
        completed_by_events = 0
        for _ in range(400):
            op = Op(rng.randrange(0, 40), ready=rng.random() < 0.05)
            ops.append(op)
            if purgatory.try_complete_else_watch(op, rng.sample(keys, rng.randrange(1, 4))):
                completed_now += 1

        async def events(seed: int) -> None:
            nonlocal completed_by_events
            r = random.Random(seed)
            while not all(op.is_completed for op in ops):
                for op in r.sample(ops, 5):
                    op.ready = op.ready or r.random() < 0.3
                completed_by_events += purgatory.check_and_complete(r.choice(keys))
                await asyncio.sleep(r.random() / 1000)

        await asyncio.wait_for(asyncio.gather(*(events(s) for s in range(4))), timeout=10)

        expired = sum(op.events.count("expire") for op in ops)
        for op in ops:
            assert op.events in (["complete"], ["complete", "expire"])
        assert completed_now + completed_by_events + expired == len(ops)
        assert expired > 0
        assert completed_by_events > 0
        assert purgatory.num_delayed() == 0
        assert timer.size() == 0
        assert timer.next_wakeup_ms is None
        purgatory.purge_completed()
        assert purgatory.watched() == 0
        assert purgatory.num_keys() == 0

    asyncio.run(main())
