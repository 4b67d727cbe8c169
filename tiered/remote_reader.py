"""Reads from the remote tier: fetches below the local log start, and ListOffsets.

Kafka's ``RemoteLogManager.read`` / ``findOffsetByTimestamp`` and its RemoteLogReader pool.
A fetch finds the segment through the RLMM by (leader epoch of the offset, offset), the byte
position through the RemoteIndexCache, then reads ranges of the segment's log from the RSM
until the batch holding the offset and ``max_bytes`` after it are in hand. Every call here
blocks: the broker uses ``submit_read`` / ``submit_offset_for_timestamp``, which run on a
bounded pool and return ``concurrent.futures.Future`` objects for ``asyncio.wrap_future``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from core.errors import OffsetOutOfRangeError
from core.log.partition_log import TimestampAndOffset
from core.records.batch import HEADER_SIZE, RecordBatchHeader, peek_batch_size
from core.records.record import decode_records
from tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from tiered.quota import (
    REMOTE_FETCH_BYTES,
    REMOTE_FETCH_ERRORS,
    REMOTE_FETCH_REQUESTS,
    TieringMetrics,
    TokenBucket,
)
from tiered.remote_index_cache import RemoteIndexCache

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

T = TypeVar("T")

# Bytes fetched beyond ``max_bytes`` on the first range request: the index entry found for
# an offset lies up to index.interval.bytes (4096 by default) before its batch.
READ_SLACK_BYTES = 16 * 1024


class RemoteReadRejectedError(RemoteStorageError):
    """``remote.log.reader.max.pending.tasks`` reads are already queued or running."""


class _SegmentRanges:
    """Sequential ranged reads of one segment's log, fetched from the RSM on demand."""

    def __init__(
        self, rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, start: int, chunk: int
    ) -> None:
        self.rsm = rsm
        self.md = md
        self.start = start
        self.chunk = max(chunk, HEADER_SIZE)
        self.buf = bytearray()
        self.fetched = 0  # bytes asked for, from ``start``

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


class RemoteLogReader:
    """Serves reads of tiered partitions from the remote tier."""

    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        index_cache: RemoteIndexCache,
        *,
        threads: int = 10,
        max_pending_tasks: int = 100,
        fetch_quota: TokenBucket | None = None,
        metrics: TieringMetrics | None = None,
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.index_cache = index_cache
        self.fetch_quota = fetch_quota
        self.metrics = metrics or TieringMetrics()
        self.max_pending_tasks = max_pending_tasks
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="remote-log-reader")

    # -- async-friendly entries --------------------------------------------------------
    def submit_read(
        self, tp: TopicIdPartition, plog: PartitionLog, fetch_offset: int, max_bytes: int
    ) -> Future[bytes]:
        """``read`` on the reader pool.

        Raises:
            RemoteReadRejectedError: the pending-task bound is reached (raised at once).
        """
        return self._submit(lambda: self.read(tp, plog, fetch_offset, max_bytes))

    def submit_offset_for_timestamp(
        self, tp: TopicIdPartition, plog: PartitionLog, timestamp: int
    ) -> Future[TimestampAndOffset | None]:
        """``find_offset_by_timestamp`` on the reader pool (same rejection as submit_read)."""
        return self._submit(lambda: self.find_offset_by_timestamp(tp, plog, timestamp))

    def _submit(self, fn: Callable[[], T]) -> Future[T]:
        with self._pending_lock:
            if self._pending >= self.max_pending_tasks:
                raise RemoteReadRejectedError(
                    f"{self._pending} remote reads pending "
                    f"(remote.log.reader.max.pending.tasks={self.max_pending_tasks})"
                )
            self._pending += 1
        try:
            future = self._pool.submit(fn)
        except RuntimeError:
            self._done(None)
            raise
        future.add_done_callback(self._done)
        return future

    def _done(self, _: object) -> None:
        with self._pending_lock:
            self._pending -= 1

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- fetch -------------------------------------------------------------------------
    def read(
        self, tp: TopicIdPartition, plog: PartitionLog, fetch_offset: int, max_bytes: int
    ) -> bytes:
        """Batches from the remote tier, starting at the batch holding ``fetch_offset``.

        At least one whole batch is returned even when larger than ``max_bytes``; the data
        may end inside a batch (clients drop the partial tail). Reads stay within one remote
        segment. Empty bytes when the fetch quota is exhausted.

        Raises:
            OffsetOutOfRangeError: no remote segment of the current lineage holds the offset.
            RemoteStorageError: the remote tier failed.
        """
        self.metrics.inc(REMOTE_FETCH_REQUESTS, tp)
        if self.fetch_quota is not None and self.fetch_quota.is_exceeded():
            log.debug("%s: remote fetch quota exceeded; answering empty", tp)
            return b""
        try:
            md = self._segment_for(tp, plog, fetch_offset)
            if md is None:
                raise OffsetOutOfRangeError(
                    f"offset {fetch_offset} of {tp} is not in the remote tier "
                    f"(leader epoch {plog.leader_epoch_cache.epoch_for_offset(fetch_offset)})"
                )
            while md is not None:
                data = self._read_segment(md, fetch_offset, max_bytes)
                if data is not None:
                    self.metrics.inc(REMOTE_FETCH_BYTES, tp, len(data))
                    if self.fetch_quota is not None:
                        self.fetch_quota.record(len(data))
                    return data
                md = self._segment_for(tp, plog, md.end_offset + 1)
            return b""
        except (RemoteStorageError, OSError) as e:
            self.metrics.inc(REMOTE_FETCH_ERRORS, tp)
            log.warning(
                "remote read failed",
                extra={"event": "remote_read_failed", "tp": str(tp), "offset": fetch_offset},
                exc_info=e,
            )
            raise

    def _segment_for(
        self, tp: TopicIdPartition, plog: PartitionLog, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        epoch = plog.leader_epoch_cache.epoch_for_offset(offset)
        if epoch is None:
            return None
        return self.rlmm.remote_log_segment_metadata(tp, epoch, offset)

    def _read_segment(
        self, md: RemoteLogSegmentMetadata, fetch_offset: int, max_bytes: int
    ) -> bytes | None:
        """The bytes from the batch holding ``fetch_offset``, or None when the segment has
        no batch at or after it."""
        position = self.index_cache.lookup_position(md, fetch_offset)
        ranges = _SegmentRanges(self.rsm, md, position, max_bytes + READ_SLACK_BYTES)
        at = 0
        while True:
            if ranges.ensure(at + HEADER_SIZE) < at + HEADER_SIZE:
                return None  # the end of the segment
            size = peek_batch_size(ranges.buf, at)
            assert size is not None
            if RecordBatchHeader(ranges.buf, at).last_offset >= fetch_offset:
                end = at + max(max_bytes, size)
                held = ranges.ensure(end)
                return bytes(ranges.buf[at : min(end, held)])
            at += size

    # -- ListOffsets ---------------------------------------------------------------------
    def find_offset_by_timestamp(
        self, tp: TopicIdPartition, plog: PartitionLog, timestamp: int
    ) -> TimestampAndOffset | None:
        """The first record at or after ``timestamp`` in the remote segments of the current
        leader-epoch lineage, at or above the log start offset; None if none qualifies.

        Segments whose max timestamp is below ``timestamp`` are skipped; in a candidate the
        time index gives where to start, then batches are scanned.

        Raises:
            RemoteStorageError: the remote tier failed.
        """
        start = plog.log_start_offset
        cache = plog.leader_epoch_cache
        seen: set[object] = set()
        for entry in cache.entries():
            for md in self.rlmm.list_remote_log_segments(tp, entry.epoch):
                if md.segment_id in seen or md.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                    continue
                seen.add(md.segment_id)
                if md.max_timestamp_ms < timestamp or md.end_offset < start:
                    continue
                found = self._scan_for_timestamp(md, timestamp, max(start, md.start_offset))
                if found is not None:
                    return TimestampAndOffset(found[0], found[1], cache.epoch_for_offset(found[1]))
        return None

    def _scan_for_timestamp(
        self, md: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        from_offset = max(self.index_cache.lookup_timestamp(md, timestamp), starting_offset)
        position = self.index_cache.lookup_position(md, from_offset)
        ranges = _SegmentRanges(self.rsm, md, position, 256 * 1024)
        at = 0
        while ranges.ensure(at + HEADER_SIZE) >= at + HEADER_SIZE:
            size = peek_batch_size(ranges.buf, at)
            assert size is not None
            header = RecordBatchHeader(ranges.buf, at)
            if header.max_timestamp >= timestamp and header.last_offset >= starting_offset:
                if ranges.ensure(at + size) < at + size:
                    return None  # a torn tail: the segment holds no more whole batches
                batch = RecordBatchHeader(bytes(ranges.buf[at : at + size]))
                for record in decode_records(batch):
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return record.timestamp, record.offset
            at += size
        return None
