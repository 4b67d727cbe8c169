"""A background scheduler for log housekeeping (Kafka's KafkaScheduler), on threads.

Flushes, checkpoints, retention and delayed file deletion do blocking disk I/O, so they run
here and never on the broker's event loop.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


class SchedulerStoppedError(RuntimeError):
    """A task was scheduled after ``shutdown`` (the broker is stopping)."""


@dataclass(order=True)
class _Task:
    due: float
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False)
    period_s: float | None = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class Scheduler:
    """Runs named tasks once after a delay or periodically, on a small thread pool.

    A periodic task is rescheduled after it finishes, so one task never runs twice at once.
    Exceptions are logged with the task name and do not stop the schedule.
    """

    def __init__(self, threads: int = 2, name: str = "tierlog-scheduler") -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._heap: list[_Task] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(
        self, name: str, fn: Callable[[], object], delay_ms: float = 0, period_ms: float = -1
    ) -> _Task:
        """Run ``fn`` after ``delay_ms``, then every ``period_ms`` if positive.

        Raises:
            SchedulerStoppedError: after ``shutdown``.
        """
        with self._cond:
            if self._stopped:
                raise SchedulerStoppedError(f"scheduler stopped; cannot schedule {name}")
            task = _Task(
                time.monotonic() + delay_ms / 1000,
                next(self._seq),
                name,
                fn,
                period_ms / 1000 if period_ms > 0 else None,
            )
            heapq.heappush(self._heap, task)
            self._cond.notify()
            return task

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: float = 0) -> _Task:
        return self.schedule(name, fn, delay_ms)

    def cancel(self, task: _Task) -> None:
        task.cancelled = True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (
                    not self._heap or self._heap[0].due > time.monotonic()
                ):
                    timeout = self._heap[0].due - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._stopped:
                    return
                task = heapq.heappop(self._heap)
            if not task.cancelled:
                self._pool.submit(self._execute, task)

    def _execute(self, task: _Task) -> None:
        try:
            task.fn()
        except Exception:
            log.exception("scheduled task %s failed", task.name)
        if task.period_s is not None and not task.cancelled:
            with self._cond:
                if self._stopped:
                    return
                task.due = time.monotonic() + task.period_s
                task.seq = next(self._seq)
                heapq.heappush(self._heap, task)
                self._cond.notify()

    def shutdown(self) -> None:
        """Stop scheduling; waits for tasks already running to finish."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()
        self._pool.shutdown(wait=True)
