"""Hierarchical timing wheels (Kafka's TimingWheel) and a timer driven by an asyncio loop.

A wheel of ``wheel_size`` buckets, each ``tick_ms`` wide, holds the tasks that expire within
``[current_time, current_time + tick_ms * wheel_size)``; a bucket is keyed by the expiration of
its slot (``expiration // tick_ms * tick_ms``), so after a full turn the same slot serves the
next round. A task too far in the future goes to an overflow wheel whose tick is the whole
interval of the wheel below it, created on first use. With tick 1 ms and 20 slots the levels
span 20 ms, 400 ms, 8 s, 160 s, 53 min, 17.8 h, ... Insert and cancel are O(1).

Example (tick 1, 20 slots, time 0): tasks expiring at 8, 8, 25, 30 and 35 go to bucket 8 of
the first wheel (two) and to bucket 1 of the second wheel (three; that bucket expires at 20).
At time 20 the second wheel's bucket is flushed and its tasks are demoted to the first wheel,
into buckets 5, 10 and 15 (25 % 20, 30 % 20, 35 % 20), where they expire at 25, 30 and 35.

Kafka's SystemTimer keeps the non-empty buckets in a DelayQueue polled by a reaper thread.
:class:`Timer` keeps them in a heap instead and arms one ``loop.call_at`` handle for the
earliest bucket expiration (re-armed when an earlier bucket appears, or when the earliest
bucket empties); when it fires, the wheel clock advances and the expired buckets are flushed:
their tasks are re-inserted, landing in lower wheels or, if expired, running. With no task
pending no handle is armed at all, so an idle timer costs nothing.

Threading: a Timer and its tasks are confined to the event loop's thread, like everything
else on the loop; nothing here takes a lock. Code on other threads hands work over with
``loop.call_soon_threadsafe(timer.add, task)`` (and likewise for ``task.cancel``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


class TimerTask(ABC):
    """A task that runs once when its delay has elapsed, unless cancelled first.

    ``delay_ms`` counts from :meth:`Timer.add`; ``expiration_ms`` (on the timer's clock) is
    set there. Subclasses implement :meth:`run`; it runs on the loop thread and must not
    block. A cancelled task never runs, and adding it again is a no-op.
    """

    __slots__ = ("_bucket", "cancelled", "delay_ms", "expiration_ms")

    def __init__(self, delay_ms: int) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        self.delay_ms = delay_ms
        self.cancelled = False
        self.expiration_ms: int | None = None
        self._bucket: TimerTaskList | None = None

    def cancel(self) -> None:
        """Remove the task from its timer, in O(1); idempotent. It will never run."""
        self.cancelled = True
        bucket = self._bucket
        if bucket is not None:
            bucket.remove(self)

    @abstractmethod
    def run(self) -> None:
        """Called once, on the loop thread, when the task expires."""


class _TaskCounter:
    """The number of tasks in the buckets of one timer (Kafka's shared taskCounter)."""

    __slots__ = ("count", "on_emptied")

    def __init__(self, on_emptied: Callable[[TimerTaskList], None]) -> None:
        self.count = 0
        # Called when a cancel leaves a bucket empty (not on flush).
        self.on_emptied = on_emptied


class TimerTaskList:
    """One bucket: the tasks of one slot of one wheel, with the slot's expiration.

    Tasks are kept in a dict keyed by ``id(task)`` (insertion-ordered, O(1) removal, and
    independent of any ``__eq__``/``__hash__`` a subclass defines). ``expiration_ms`` is -1
    while the bucket is not scheduled.
    """

    __slots__ = ("_counter", "_tasks", "expiration_ms")

    def __init__(self, counter: _TaskCounter) -> None:
        self._counter = counter
        self._tasks: dict[int, TimerTask] = {}
        self.expiration_ms = -1

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[TimerTask]:
        """Iterate over a snapshot of the tasks."""
        return iter(list(self._tasks.values()))

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the slot's expiration; True if it changed (the bucket must be scheduled)."""
        changed = expiration_ms != self.expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def add(self, task: TimerTask) -> None:
        """Add ``task``, first taking it out of any bucket it is in."""
        if task._bucket is not None:
            task._bucket.remove(task)
        self._tasks[id(task)] = task
        task._bucket = self
        self._counter.count += 1

    def remove(self, task: TimerTask) -> None:
        """Remove ``task`` if it is in this bucket (O(1))."""
        if task._bucket is not self:
            return
        del self._tasks[id(task)]
        task._bucket = None
        self._counter.count -= 1
        if not self._tasks:
            self._counter.on_emptied(self)

    def flush(self) -> list[TimerTask]:
        """Take every task out and unschedule the bucket; returns the tasks."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task._bucket = None
        self._counter.count -= len(tasks)
        self.expiration_ms = -1
        return tasks


class TimingWheel:
    """One level of the hierarchy; the overflow wheel above it is created on first use.

    ``schedule(bucket)`` is called whenever a bucket gets a new expiration, so that the owner
    can expire it in time (Kafka offers the bucket to its DelayQueue).
    """

    __slots__ = (
        "_counter",
        "_schedule",
        "buckets",
        "current_time_ms",
        "interval_ms",
        "overflow",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        counter: _TaskCounter,
        schedule: Callable[[TimerTaskList], None],
    ) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self._counter = counter
        self._schedule = schedule
        self.buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        # Always a multiple of tick_ms.
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.overflow: TimingWheel | None = None

    def add(self, task: TimerTask) -> bool:
        """Put ``task`` in its bucket; False if it is cancelled or already expired.

        Expired means it expires before the end of the current tick: the caller runs it.
        """
        if task.cancelled:
            return False
        expiration = task.expiration_ms
        assert expiration is not None
        if expiration < self.current_time_ms + self.tick_ms:
            return False
        if expiration < self.current_time_ms + self.interval_ms:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(task)
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self._schedule(bucket)
            return True
        if self.overflow is None:
            self.overflow = TimingWheel(
                self.interval_ms,
                self.wheel_size,
                self.current_time_ms,
                self._counter,
                self._schedule,
            )
        return self.overflow.add(task)

    def advance_clock(self, time_ms: int) -> None:
        """Move the current time to ``time_ms`` (truncated to the tick), in every level."""
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self.overflow is not None:
                self.overflow.advance_clock(self.current_time_ms)


class Timer:
    """Kafka's SystemTimer on an asyncio event loop instead of a reaper thread.

    Args:
        loop: the loop that runs the expirations. None means the loop running when a wake-up
            is armed; with no loop running (unit tests with an injected clock) nothing is
            armed and the caller drives the timer with :meth:`advance_clock`.
        tick_ms: the tick of the lowest wheel; a task runs within one tick after it expires.
        wheel_size: slots per wheel.
        clock: the current time in milliseconds (a float is fine). Defaults to the loop's
            clock (``loop.time()``), or ``time.monotonic()`` with no loop given.

    Tasks expire at ``ceil(now + delay_ms)``; with the default 1 ms tick a task never runs
    before that instant. An expired task runs synchronously inside :meth:`add` or inside the
    loop callback; an exception from ``run()`` is logged and does not disturb the timer.
    Confined to the loop thread (see the module docstring).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        tick_ms: int = 1,
        wheel_size: int = 20,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self._loop = loop
        # With the loop's own clock a wake-up can be armed with call_at exactly.
        self._loop_clock = clock is None and loop is not None
        if clock is None:
            clock = (lambda: loop.time() * 1000.0) if loop is not None else _monotonic_ms
        self._clock = clock
        self._counter = _TaskCounter(self._on_bucket_emptied)
        # (expiration, seq, bucket); an entry is stale once the bucket's expiration differs.
        self._queue: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self._wheel = TimingWheel(
            tick_ms, wheel_size, math.floor(clock()), self._counter, self._schedule
        )
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ms: int | None = None
        self._advancing = False
        self._shut_down = False

    # -- public ----------------------------------------------------------------------------
    @property
    def wheel(self) -> TimingWheel:
        """The lowest wheel (for inspection)."""
        return self._wheel

    @property
    def next_wakeup_ms(self) -> int | None:
        """The bucket expiration the armed loop handle is for; None when nothing is armed."""
        return self._armed_ms

    def next_expiration_ms(self) -> int | None:
        """The earliest expiration of a non-empty bucket, or None."""
        self._drop_dead_heads()
        return self._queue[0][0] if self._queue else None

    def size(self) -> int:
        """The number of pending tasks."""
        return self._counter.count

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now (runs it now if expired).

        Adding a task that is already pending reschedules it; adding a cancelled task does
        nothing.

        Raises:
            RuntimeError: the timer is shut down.
        """
        if self._shut_down:
            raise RuntimeError("the timer is shut down")
        if task._bucket is not None:
            task._bucket.remove(task)
        now = self._clock()
        self._catch_up(now)
        task.expiration_ms = math.ceil(now + task.delay_ms)
        self._insert(task)
        if not self._advancing:
            self._rearm()

    def advance_clock(self, now_ms: float | None = None) -> bool:
        """Expire the buckets due at ``now_ms`` (default: the clock); True if any was.

        The loop callback calls this; tests with an injected clock call it directly.
        Re-entrant calls (from a task's ``run``) do nothing and return False.
        """
        if self._advancing or self._shut_down:
            return False
        now = self._clock() if now_ms is None else now_ms
        flushed = False
        self._advancing = True
        try:
            queue = self._queue
            while queue and queue[0][0] <= now:
                expiration, _, bucket = heapq.heappop(queue)
                if bucket.expiration_ms != expiration:
                    continue  # stale entry
                flushed = True
                self._wheel.advance_clock(expiration)
                for task in bucket.flush():
                    self._insert(task)
            # Every non-empty bucket now expires after `now`: moving the clock up is safe.
            self._wheel.advance_clock(math.floor(now))
        finally:
            self._advancing = False
        self._rearm()
        return flushed

    def shutdown(self) -> None:
        """Disarm and drop every pending task without running it (as Kafka does)."""
        self._shut_down = True
        self._disarm()
        for _, _, bucket in self._queue:
            bucket.flush()
        self._queue.clear()

    # -- internals -------------------------------------------------------------------------
    def _insert(self, task: TimerTask) -> None:
        if not self._wheel.add(task) and not task.cancelled:
            try:
                task.run()
            except Exception:
                log.exception("timer task %r failed", task)

    def _schedule(self, bucket: TimerTaskList) -> None:
        heapq.heappush(self._queue, (bucket.expiration_ms, next(self._seq), bucket))

    def _catch_up(self, now: float) -> None:
        """Move the wheel clock up to ``now`` if no bucket is due yet (so fewer overflows)."""
        self._drop_dead_heads()
        if not self._queue or self._queue[0][0] > now:
            self._wheel.advance_clock(math.floor(now))

    def _drop_dead_heads(self) -> None:
        """Pop stale entries and empty buckets off the top of the heap."""
        queue = self._queue
        while queue:
            expiration, _, bucket = queue[0]
            if bucket.expiration_ms == expiration:
                if bucket:
                    return
                bucket.expiration_ms = -1  # empty: unschedule, a later add reschedules it
            heapq.heappop(queue)

    def _on_bucket_emptied(self, bucket: TimerTaskList) -> None:
        if self._advancing:
            return  # advance_clock re-arms when it is done
        if self._counter.count == 0 or (self._queue and self._queue[0][2] is bucket):
            self._rearm()

    def _rearm(self) -> None:
        if self._counter.count == 0:
            # Idle: unschedule all (empty) buckets so that no wake-up is ever armed.
            for expiration, _, bucket in self._queue:
                if bucket.expiration_ms == expiration:
                    bucket.expiration_ms = -1
            self._queue.clear()
        self._drop_dead_heads()
        if not self._queue:
            self._disarm()
            return
        expiration = self._queue[0][0]
        if self._handle is not None and self._armed_ms == expiration:
            return
        loop = self._loop
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # driven by advance_clock() alone
        self._disarm()
        if self._loop_clock:
            self._handle = loop.call_at(expiration / 1000.0, self._on_wakeup)
        else:
            delay_s = max(0.0, (expiration - self._clock()) / 1000.0)
            self._handle = loop.call_later(delay_s, self._on_wakeup)
        self._armed_ms = expiration

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._armed_ms = None

    def _on_wakeup(self) -> None:
        self._handle = None
        self._armed_ms = None
        # asyncio may run a handle up to its clock resolution early; advance_clock then
        # expires nothing and re-arms for the same instant.
        self.advance_clock()


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0
