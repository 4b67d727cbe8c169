"""Delayed operations and their purgatory (Kafka's DelayedOperation, DelayedOperationPurgatory).

A delayed operation (a long-poll fetch, a produce waiting for acks) waits for a condition, or
for its timeout. The purgatory watches it under keys (partitions, groups, members): an
external event on a key calls :meth:`DelayedOperationPurgatory.check_and_complete`, which
tries every operation watched under that key. The timer expires the operation when its delay
has elapsed. Either way it completes exactly once.

An operation watched under several keys and completed through one of them stays in the other
keys' watcher lists until those keys are checked, or until a purge removes every completed
operation. A purge runs when more than ``purge_interval`` completed operations are still
watched (Kafka's reaper uses the estimate "total operations - delayed > purgeInterval"; here
the count is exact), from the completion that crosses the threshold, so there is no reaper
task and nothing runs while the purgatory is idle. A key whose list empties is dropped.

Threading: like :class:`core.server.timing_wheel.Timer`, a purgatory and its operations are
confined to the event loop's thread; "concurrent" completions are interleavings on that
thread (an event and an expiration in the same loop iteration, or an ``on_complete`` that
checks another key). Code on other threads hands over with ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

from core.server.timing_wheel import Timer, TimerTask

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class DelayedOperation(TimerTask, ABC):
    """An operation that completes when a condition holds, or when ``delay_ms`` elapses.

    Subclasses implement :meth:`try_complete`, :meth:`on_complete` and :meth:`on_expiration`.
    Completion happens exactly once, through :meth:`force_complete`.
    """

    __slots__ = ("_completed", "_in_timer", "_purgatory", "_retry", "_trying", "_watch_refs")

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False
        self._purgatory: DelayedOperationPurgatory[Any] | None = None
        self._watch_refs = 0  # entries in the purgatory's watcher lists
        self._in_timer = False  # counted in the purgatory's num_delayed()
        self._trying = False
        self._retry = False

    @property
    def is_completed(self) -> bool:
        return self._completed

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; if it holds, return ``self.force_complete()``, else False."""

    @abstractmethod
    def on_complete(self) -> None:
        """The completion: called exactly once, by :meth:`force_complete`."""

    @abstractmethod
    def on_expiration(self) -> None:
        """Called once if the timer expired the operation, after :meth:`on_complete`."""

    def force_complete(self) -> bool:
        """Complete now: True only for the one call that completes the operation.

        Cancels the timeout, then calls :meth:`on_complete`; an exception from it propagates
        to the caller, with the operation already completed.
        """
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        purgatory = self._purgatory
        if purgatory is not None and self._watch_refs:
            purgatory._completed_watched += 1
        self.on_complete()
        if purgatory is not None:
            purgatory._maybe_purge()
        return True

    def cancel(self) -> None:
        """Cancel the timeout (without completing the operation)."""
        super().cancel()
        if self._in_timer:
            self._in_timer = False
            assert self._purgatory is not None
            self._purgatory._delayed -= 1

    def run(self) -> None:
        """Timer expiration: complete, then report the expiration (Kafka's order)."""
        if self.force_complete():
            self.on_expiration()

    def maybe_try_complete(self) -> bool:
        """:meth:`try_complete` guarded against re-entry (Kafka's safeTryComplete).

        A call made while ``try_complete`` is already running for this operation (from a
        callback it triggered) returns False at once and makes the running call try again,
        so that the trigger is not lost.
        """
        if self._completed:
            return False
        if self._trying:
            self._retry = True
            return False
        self._trying = True
        try:
            while True:
                self._retry = False
                if self.try_complete():
                    return True
                if not self._retry or self._completed:
                    return False
        finally:
            self._trying = False


class DelayedOperationPurgatory(Generic[K]):
    """Watches delayed operations by key and times them out with a shared :class:`Timer`.

    Args:
        name: for logs ("Fetch", "Produce", ...).
        timer: the timer that expires the operations; it may be shared by several
            purgatories and is not shut down by :meth:`shutdown`.
        purge_interval: purge the watcher lists when more than this many completed
            operations are still in them.
    """

    def __init__(self, name: str, timer: Timer, *, purge_interval: int = 1000) -> None:
        if purge_interval < 0:
            raise ValueError(f"purge_interval must be >= 0, got {purge_interval}")
        self.name = name
        self._timer = timer
        self._purge_interval = purge_interval
        # key -> {id(op): op}: insertion-ordered, O(1) removal.
        self._watchers: dict[K, dict[int, DelayedOperation]] = {}
        self._watched_entries = 0
        self._completed_watched = 0  # completed operations with watcher entries left
        self._delayed = 0
        self._shut_down = False

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[K]) -> bool:
        """Complete ``op`` now if it can, else watch it under ``keys`` and time it out.

        Kafka's algorithm: try; watch under every key (stopping if the operation completed
        meanwhile); try again, so that an event between the first try and the watch is not
        missed; if still not complete, add it to the timer.

        Returns:
            True if this call completed the operation; False if it is now watched (or was
            completed by someone else meanwhile).

        Raises:
            ValueError: ``keys`` is empty, or ``op`` belongs to another purgatory.
            RuntimeError: the purgatory or its timer is shut down.
        """
        if self._shut_down:
            raise RuntimeError(f"the {self.name} purgatory is shut down")
        keys = list(keys)
        if not keys:
            raise ValueError("an operation must be watched under at least one key")
        if op._purgatory is not None and op._purgatory is not self:
            raise ValueError(f"{op!r} is already in the {op._purgatory.name} purgatory")
        op._purgatory = self
        if op.maybe_try_complete():
            return True
        for key in keys:
            if op.is_completed:
                return False
            self._watch(key, op)
        if op.maybe_try_complete():
            return True
        if not op.is_completed:
            # Counted before add(): an expired op runs (and is uncounted) inside add().
            op._in_timer = True
            self._delayed += 1
            try:
                self._timer.add(op)
            except BaseException:
                if op._in_timer:
                    op._in_timer = False
                    self._delayed -= 1
                raise
            if op.is_completed:
                op.cancel()
        return False

    def check_and_complete(self, key: K) -> int:
        """Try every operation watched under ``key``; returns how many this call completed.

        Completed operations (by this call or earlier) leave the key's list, and the key is
        dropped when its list empties. An exception from an operation's callbacks
        propagates; the lists stay consistent.
        """
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops.values()):
            if op.is_completed:
                pass
            elif op.maybe_try_complete():
                completed += 1
            else:
                continue
            if ops.pop(id(op), None) is not None:
                self._unwatched(op)
        if not ops and self._watchers.get(key) is ops:
            del self._watchers[key]
        return completed

    def watched(self) -> int:
        """Watcher entries across keys (an op counts once per key; may include completed)."""
        return self._watched_entries

    def num_keys(self) -> int:
        """Keys with a watcher list (a list is dropped when it empties)."""
        return len(self._watchers)

    def num_delayed(self) -> int:
        """Operations of this purgatory waiting in the timer."""
        return self._delayed

    def cancel_for_key(self, key: K) -> list[DelayedOperation]:
        """Stop watching ``key``: its operations lose their timeout and are returned.

        As in Kafka, the operations are not completed, and the list returned includes any
        completed but not yet purged.
        """
        ops = self._watchers.pop(key, None)
        if ops is None:
            return []
        cancelled = list(ops.values())
        for op in cancelled:
            self._unwatched(op)
            op.cancel()
        return cancelled

    def shutdown(self) -> None:
        """Drop every watched operation and cancel its timeout, without completing it.

        Kafka does the same (its reaper and timer stop); callers that wait on an operation
        must be torn down by their own shutdown. The shared timer is left running.
        """
        self._shut_down = True
        watchers, self._watchers = self._watchers, {}
        for ops in watchers.values():
            for op in ops.values():
                op._watch_refs = 0
                op.cancel()
        self._watched_entries = 0
        self._completed_watched = 0

    # -- internals -------------------------------------------------------------------------
    def _watch(self, key: K, op: DelayedOperation) -> None:
        ops = self._watchers.get(key)
        if ops is None:
            ops = self._watchers[key] = {}
        elif id(op) in ops:
            return  # the same key twice
        ops[id(op)] = op
        op._watch_refs += 1
        self._watched_entries += 1

    def _unwatched(self, op: DelayedOperation) -> None:
        """Account for one watcher entry of ``op`` just removed from a list."""
        self._watched_entries -= 1
        op._watch_refs -= 1
        if op._watch_refs == 0 and op.is_completed:
            self._completed_watched -= 1

    def _maybe_purge(self) -> None:
        if self._completed_watched > self._purge_interval:
            self.purge_completed()

    def purge_completed(self) -> int:
        """Remove completed operations from every list and drop emptied keys; returns count."""
        purged = 0
        for key, ops in list(self._watchers.items()):
            done = [op for op in ops.values() if op.is_completed]
            for op in done:
                del ops[id(op)]
                self._unwatched(op)
            purged += len(done)
            if not ops:
                del self._watchers[key]
        log.debug("%s purgatory: purged %d completed operations", self.name, purged)
        return purged
