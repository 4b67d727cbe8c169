"""Ranges of remote segments read ahead for sequential consumers, and the ranged reads a
fetch makes of one segment (starting from a range read ahead when there is one).

A consumer reading the remote tier in order asks for the bytes that follow its last
answer. The reader fetches those ranges before they are asked for and keeps them here,
keyed by (segment id, the offset the next fetch asks for); the fetch that comes takes its
range instead of making a round trip to the remote tier. Every range starts at a batch and
had its whole batches' CRC32C checked before it was kept.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from concurrent.futures import CancelledError, Future

from core.records.batch import HEADER_SIZE
from tiered.api import RemoteLogSegmentMetadata, RemoteStorageError, RemoteStorageManager

# Read-ahead: ranges kept for sequential consumers, bounded in count and bytes.
READ_AHEAD_MAX_ENTRIES = 64
READ_AHEAD_MAX_BYTES = 64 * 1024 * 1024
# Ranges in hand or in flight ahead of a sequential consumer. One was not enough: the range
# after a fetch was asked for when that fetch was served, and the consumer's next fetch
# arrived before it (a pool hop and a wait per fetch). Two or more keep one arrived while
# the next is read (parallel ranged GETs on S3).
READ_AHEAD_DEPTH = 3


class SegmentRanges:
    """Sequential ranged reads of one segment's log, fetched from the RSM on demand.

    ``prefix`` is bytes already in hand from ``start`` on (a read-ahead range).
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        md: RemoteLogSegmentMetadata,
        start: int,
        chunk: int,
        prefix: bytes = b"",
    ) -> None:
        self.rsm = rsm
        self.md = md
        self.start = start
        self.chunk = max(chunk, HEADER_SIZE)
        self.buf = bytearray(prefix)
        self.fetched = len(prefix)  # bytes asked for, from ``start``

    @property
    def remaining_in_segment(self) -> int:
        return self.md.segment_size_in_bytes - self.start

    def ensure(self, end: int) -> int:
        """Make ``buf`` hold ``[0, end)`` (relative to ``start``) if the segment does;
        returns how many bytes it holds."""
        end = min(end, self.remaining_in_segment)
        if len(self.buf) >= end or self.fetched >= self.remaining_in_segment:
            return len(self.buf)
        want_end = min(max(end, self.fetched + self.chunk), self.remaining_in_segment)
        with self.rsm.fetch_log_segment(
            self.md, self.start + self.fetched, self.start + want_end
        ) as stream:
            while len(self.buf) < want_end:
                data = stream.read(want_end - len(self.buf))
                if not data:
                    break
                self.buf += data
        self.fetched = want_end
        return len(self.buf)


class ReadAhead:
    """Ranges fetched ahead for sequential consumers: (segment id, next fetch offset) ->
    (byte position of that offset's batch, the bytes from there). Every range starts at a
    batch and had the CRC32C of its whole batches checked before it was put here (or is
    the rest of such a range from a batch on). A range is handed out once. LRU, bounded by
    READ_AHEAD_MAX_ENTRIES and READ_AHEAD_MAX_BYTES (counted when a range arrives).
    Thread-safe; futures are never cancelled under the lock, because a cancellation runs
    the future's callbacks (``_arrived``) at once in the same thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranges: OrderedDict[tuple[uuid.UUID, int], tuple[int, Future[bytes]]] = OrderedDict()
        self._bytes = 0
        self.hits = 0

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._ranges

    def arrived(self) -> int:
        """How many ranges are in hand (read, not yet handed out)."""
        with self._lock:
            return sum(
                1
                for _, f in self._ranges.values()
                if f.done() and not f.cancelled() and f.exception() is None
            )

    def roomy(self) -> bool:
        """Less than half full (entries and bytes): room for ranges beyond the next one of
        each consumer without evicting another consumer's next range."""
        with self._lock:
            return (
                len(self._ranges) < READ_AHEAD_MAX_ENTRIES // 2
                and self._bytes < READ_AHEAD_MAX_BYTES // 2
            )

    def held(self, key: tuple[uuid.UUID, int]) -> tuple[int, Future[bytes]] | None:
        """The (position, range) kept for ``key``, left in place; None if none is."""
        with self._lock:
            return self._ranges.get(key)

    def put(
        self,
        key: tuple[uuid.UUID, int],
        position: int,
        future: Future[bytes],
        *,
        after: tuple[tuple[uuid.UUID, int], Future[bytes]] | None = None,
    ) -> bool:
        """Keep ``future``'s range for ``key``. With ``after`` (the key and range this one
        follows in a pipeline), only while that range is still held: once a fetch has taken
        it, the fetch extended the pipeline from it itself, and a range read from here could
        only be one the consumer has already passed. Returns whether it was kept (the caller
        cancels one that was not)."""
        with self._lock:
            if after is not None:
                held = self._ranges.get(after[0])
                if held is None or held[1] is not after[1]:
                    return False
            self._ranges[key] = (position, future)
            evicted = self._evict()
        _cancel(evicted)
        future.add_done_callback(lambda f: self._arrived(key, f))
        return True

    def still_held(self, key: tuple[uuid.UUID, int], future: Future[bytes]) -> bool:
        """Whether ``future``'s range is still the one kept for ``key`` (not handed out)."""
        with self._lock:
            held = self._ranges.get(key)
            return held is not None and held[1] is future

    def _arrived(self, key: tuple[uuid.UUID, int], future: Future[bytes]) -> None:
        with self._lock:
            held = self._ranges.get(key)
            if held is None or held[1] is not future:
                return
            if future.cancelled() or future.exception() is not None:
                del self._ranges[key]  # a failed range is read again on demand
                return
            self._bytes += len(future.result())
            evicted = self._evict()
        _cancel(evicted)

    def take(self, key: tuple[uuid.UUID, int]) -> tuple[int, bytes] | None:
        """The range for ``key`` if one was fetched (waiting for it if it is being fetched
        right now); None otherwise. A range still queued is cancelled instead of waited
        for, so that a reader thread never waits on a task behind it in the queue."""
        with self._lock:
            held = self._ranges.pop(key, None)
            if held is None:
                return None
            position, future = held
            if future.done() and not future.cancelled() and future.exception() is None:
                self._bytes -= len(future.result())
        if not future.done() and future.cancel():
            return None
        try:
            data = future.result()
        except (CancelledError, RemoteStorageError, OSError):
            return None
        self.hits += 1
        return position, data

    def take_ready(
        self, key: tuple[uuid.UUID, int], max_bytes: int, segment_size: int
    ) -> tuple[int, bytes] | None:
        """The range for ``key`` if it has arrived and holds ``max_bytes`` (or the rest of
        its segment); None, leaving it in place, otherwise."""
        with self._lock:
            held = self._ranges.get(key)
            if held is None:
                return None
            position, future = held
            if not future.done() or future.cancelled() or future.exception() is not None:
                return None
            data = future.result()
            if len(data) < min(max_bytes, segment_size - position):
                return None
            del self._ranges[key]
            self._bytes -= len(data)
            self.hits += 1
        return position, data

    def _evict(self) -> list[Future[bytes]]:
        """Drop the least recently added ranges beyond the bounds (lock held); returns the
        futures to cancel once the lock is released."""
        evicted = []
        while len(self._ranges) > READ_AHEAD_MAX_ENTRIES or (
            self._bytes > READ_AHEAD_MAX_BYTES and len(self._ranges) > 1
        ):
            _, (_, future) = self._ranges.popitem(last=False)
            if future.done() and not future.cancelled() and future.exception() is None:
                self._bytes -= len(future.result())
            else:
                evicted.append(future)
        return evicted


def done_future(data: bytes) -> Future[bytes]:
    """Bytes already in hand, in the shape ``ReadAhead`` keeps a range in."""
    future: Future[bytes] = Future()
    future.set_result(data)
    return future


def _cancel(futures: list[Future[bytes]]) -> None:
    for future in futures:
        future.cancel()
