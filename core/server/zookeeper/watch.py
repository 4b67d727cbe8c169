"""Data and children watches that call back on the asyncio loop and outlive reconnections.

A ZooKeeper watch fires once; kazoo also drops every watch when the connection is lost (it
calls each watcher with a NONE event then), and ZooKeeper forgets them when the session
expires. A ``ZkWatch`` therefore re-reads the znode after every event, arming a new one-shot
watch with the read, and hands the result to its callback.

Delivery semantics:

- The callback is called on the event loop, never from a kazoo thread, and never twice at
  once for one watch: a change during a callback is delivered after it returns.
- Latest state, at least once: after a change the callback gets the znode's state as read
  *after* the change, so several changes in a row may arrive as one call with the last state,
  and the same state may be delivered twice (after a reconnection, for instance). Callbacks
  must be idempotent; they never see an older state after a newer one.
- The first call happens before ``watch_data`` / ``watch_children`` returns.
- A lost connection is not a change: the watch re-reads once the client is connected again
  (same or new session) and delivers the state then, so changes made while it was away are
  seen.
- A callback that raises is logged; the watch goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from core.server.zookeeper.errors import ZkClosedError, ZkError

log = logging.getLogger(__name__)
T = TypeVar("T")

# After a failed read (e.g. the session expired under it) the watch tries again after this.
_RETRY_BACKOFF_S = 0.2

Reader = Callable[[str, Callable[[Any], None]], Awaitable[T]]
Callback = Callable[[T], Awaitable[None] | None]


class ZkWatch(Generic[T]):
    """A standing watch on one znode; ``cancel()`` ends it (closing the client does too)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, path: str, reader: Reader[T], callback: Callback[T]
    ):
        self.path = path
        self._loop = loop
        self._reader = reader
        self._callback = callback
        self._dirty = False
        self._running = False
        self._cancelled = False
        self._task: asyncio.Task[None] | None = None
        self._cancel_hooks: list[Callable[[ZkWatch[T]], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def on_cancel(self, hook: Callable[[ZkWatch[T]], None]) -> None:
        self._cancel_hooks.append(hook)

    async def start(self) -> None:
        """Read, arm and deliver the first state in the caller's task."""
        self._dirty = True
        self._running = True
        await self._run()

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        for hook in self._cancel_hooks:
            hook(self)

    def _on_event(self, event: Any) -> None:
        # kazoo's callback thread: hand the event to the loop and nothing else.
        # A closed loop raises RuntimeError: nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._trigger)

    def _trigger(self) -> None:
        if self._cancelled:
            return
        self._dirty = True
        if not self._running:
            self._running = True
            self._task = self._loop.create_task(self._run(), name=f"zk-watch {self.path}")

    async def _run(self) -> None:
        try:
            while self._dirty and not self._cancelled:
                self._dirty = False
                try:
                    state = await self._reader(self.path, self._on_event)
                except ZkClosedError:
                    return
                except ZkError as e:
                    log.warning("watch on %s: read failed (%s); retrying", self.path, e)
                    self._dirty = True
                    await asyncio.sleep(_RETRY_BACKOFF_S)
                    continue
                if self._cancelled:
                    return
                try:
                    result = self._callback(state)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("watch callback on %s failed", self.path)
        finally:
            self._running = False
