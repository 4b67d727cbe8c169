"""The broker-wide budget for request frames (Kafka's ``queued.max.request.bytes``).

Every request frame reserves its size (the 4-byte size prefix says how big it is) before
its body is read, and gives it back when its handler has finished with it, so the bytes of
requests being received or served are counted across all connections together.

Admission follows Kafka's SimpleMemoryPool in its non-strict mode, which Kafka's socket
server uses: a frame is admitted while the reservations are below the capacity, so one
frame may go past it, and what frames over ``small_frame`` hold stays below ``capacity +
socket.request.max.bytes`` (Kafka requires ``queued.max.request.bytes >=
socket.request.max.bytes``, so every frame fits an empty pool). A frame that is not
admitted waits, in arrival order, and its connection is not read meanwhile (Kafka mutes the
channel): TCP pushes back on the client.

One difference from Kafka: a frame of at most ``small_frame`` bytes is admitted at once even
when the pool is full. Its bytes are no more than what the connection's read buffer holds
anyway, and the requests that keep clients alive (Metadata, heartbeats, offset commits,
fetches, small produce requests) must not queue behind large bodies that slow or hostile
clients have announced. Small frames still count, so they delay large ones.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field


@dataclass(slots=True)
class Reservation:
    """The bytes one frame holds in the pool; ``release`` is idempotent.

    ``frame`` keeps the frame itself until the release, so that the memory counted is the
    memory held: the frame lives exactly as long as its reservation.
    """

    pool: RequestMemoryPool | None
    size: int
    frame: bytes | bytearray | None = None
    _released: bool = field(default=False)

    def release(self, _: object = None) -> None:
        """Give the bytes back (also usable as a future's done callback)."""
        self.frame = None
        if self._released:
            return
        self._released = True
        if self.pool is not None:
            self.pool._give_back(self.size)


class RequestMemoryPool:
    """Reservations of request frames against ``capacity`` bytes (None: unbounded).

    Used from the event loop only.
    """

    def __init__(self, capacity: int | None, *, small_frame: int) -> None:
        self.capacity = capacity if capacity is not None and capacity > 0 else None
        self.small_frame = small_frame
        self.reserved = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Frames waiting for room."""
        return len(self._waiters)

    def try_reserve(self, size: int) -> Reservation | None:
        """Reserve ``size`` bytes if the frame is admitted now, else None."""
        if self.capacity is None:
            return Reservation(None, size)
        if size > self.small_frame and (self._waiters or self.reserved >= self.capacity):
            return None
        self.reserved += size
        return Reservation(self, size)

    async def reserve(self, size: int) -> Reservation:
        """Reserve ``size`` bytes, waiting in line while the pool is full (see the module
        doc). Cancelling the wait leaves nothing reserved."""
        admitted = self.try_reserve(size)
        if admitted is not None:
            return admitted
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((size, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give_back(size)  # admitted just as the wait was cancelled
            else:
                self._forget(waiter)
            raise
        return Reservation(self, size)  # counted when it was admitted

    def _give_back(self, size: int) -> None:
        self.reserved -= size
        self._admit()

    def _admit(self) -> None:
        assert self.capacity is not None
        while self._waiters and self.reserved < self.capacity:
            size, waiter = self._waiters.popleft()
            if waiter.done():  # cancelled while queued
                continue
            self.reserved += size
            waiter.set_result(None)

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        for i, (_, queued) in enumerate(self._waiters):
            if queued is waiter:
                del self._waiters[i]
                break
        self._admit()
