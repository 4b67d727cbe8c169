"""Reads from the remote tier: fetches below the local log start, and ListOffsets.

Kafka's ``RemoteLogManager.read`` / ``findOffsetByTimestamp`` and its RemoteLogReader pool.
A fetch finds the segment through the RLMM by (leader epoch of the offset, offset), the byte
position through the RemoteIndexCache, then reads ranges of the segment's log from the RSM
until the batch holding the offset and ``max_bytes`` after it are in hand. READ_COMMITTED
fetches also get the aborted transactions overlapping what was read, from the remote
transaction indexes and then the local log's (Kafka's ``collectAbortedTransactions``).

Sequential consumers are read ahead: after serving a range, the next ranges of the segment
are fetched in the background (when a pool thread is idle) and kept, keyed by the segment
and the offset a consumer will ask for next, in a small memory-bounded cache
(``tiered.read_ahead``); the next fetch starts from those bytes instead of a fresh round
trip to the remote tier. The read-ahead is a pipeline READ_AHEAD_DEPTH ranges deep: when a
range arrives, the one after it is asked for, so that a consumer that asks for its next
fetch as soon as it has the last one (librdkafka does) finds it in memory instead of
waiting for the one range read since. Each range is the fetch's ``max_bytes`` long and
starts at a batch, so a fetch served from one ends where the next range starts. A read
that ends a segment reads ahead the start of the next one, and a read from a segment's
first offset starts at byte 0: a consumer walking the remote tier from offset 0 needs no
segment's indexes.

With a plugin whose objects are files on this machine (``tiered.api.LogSegmentFiles``, the
local-directory one), none of that: a fetch is answered with a slice of the object's file
(``tiered.remote_log_file``), which the broker sends with ``sendfile`` as it sends a local
segment's; the plugin checked the whole file against its manifest before handing it out.

Every call here blocks: the broker uses ``submit_fetch`` / ``submit_offset_for_timestamp``,
which run on a bounded pool and return ``concurrent.futures.Future`` objects for
``asyncio.wrap_future``. The exceptions: ``submit_fetch`` answers at once (a done future)
when the range asked for was read ahead and is in memory (no I/O), or with a slice of a
checked file whose position it knows (an open and a few batch headers read, as a local
read does); and a fetch whose range is being read ahead is answered when it arrives, by
the thread that read it, not by a pool thread waiting for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from core.errors import CoreError, OffsetOutOfRangeError
from core.log.partition_log import MAX_TIMESTAMP, TimestampAndOffset
from core.log.txn_index import AbortedTxn, TransactionIndex
from core.records.batch import HEADER_SIZE, RecordBatchHeader, peek_batch_size
from core.records.record import decode_records
from core.server.remote_seam import RemoteFetchResult
from tiered.api import (
    LogSegmentFiles,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from tiered.events import log_event
from tiered.metrics import (
    REMOTE_FETCH_BYTES,
    REMOTE_FETCH_ERRORS,
    REMOTE_FETCH_REQUESTS,
    TieringMetrics,
)
from tiered.quota import TokenBucket
from tiered.read_ahead import READ_AHEAD_DEPTH, ReadAhead, SegmentRanges, done_future
from tiered.remote_batches import answer_in, upper_bound_offset, verify_batches, whole_batches
from tiered.remote_fetch import FetchFuture, RemoteFetchRequest
from tiered.remote_index_cache import RemoteIndexCache
from tiered.remote_log_file import FilePositions, FileRegion, RemoteLogFile, find_region
from tiered.txn_free_runs import TxnFreeRuns

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

T = TypeVar("T")

# Bytes fetched beyond ``max_bytes`` on the first range request: the index entry found for
# an offset lies up to index.interval.bytes (4096 by default) before its batch.
READ_SLACK_BYTES = 16 * 1024

# A READ_COMMITTED fetch answered on the event loop looks up at most this many remote
# segments for aborted transactions (Kafka's search goes on through later segments until a
# transaction index says it is complete); one that needs more goes to the reader pool. An
# RLMM lookup takes about 7 us here: 64 of them, 0.5 ms, about what sending the 1 MiB
# answer costs the event loop.
EVENT_LOOP_TXN_SEARCH_SEGMENTS = 64


class RemoteReadRejectedError(RemoteStorageError):
    """``remote.log.reader.max.pending.tasks`` reads are already queued or running."""


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
        self.threads = threads
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="remote-log-reader")
        self.read_ahead = ReadAhead()
        # A plugin whose log objects are local files: fetches are sent from them (no read
        # into memory, no read-ahead). None once it says it cannot (encrypted objects).
        self._files: LogSegmentFiles | None = rsm if isinstance(rsm, LogSegmentFiles) else None
        self._file_positions = FilePositions()
        self._txn_free_runs = TxnFreeRuns()

    # -- async-friendly entries --------------------------------------------------------
    def submit_fetch(
        self,
        tp: TopicIdPartition,
        plog: PartitionLog,
        fetch_offset: int,
        max_bytes: int,
        *,
        read_committed: bool = False,
    ) -> Future[RemoteFetchResult]:
        """``fetch`` on the reader pool.

        Raises:
            RemoteReadRejectedError: the pending-task bound is reached (raised at once).
        """
        request = RemoteFetchRequest(tp, plog, fetch_offset, max_bytes, read_committed)
        if self._files is not None:
            served = self._serve_file_at_once(request)
        else:
            served = self._serve_read_ahead(request, wait_in_flight=True)
        if served is not None:
            return served
        answer = FetchFuture()
        answer.task = self._submit(self._fetch_task(answer, request))
        return answer

    def _fetch_task(self, answer: FetchFuture, request: RemoteFetchRequest) -> Callable[[], None]:
        """The pool task that answers ``answer``."""

        def run() -> None:
            if not answer.set_running_or_notify_cancel():
                return
            try:
                result = self._fetch_file(request)
                if result is None:
                    result = self._fetch(request, abandoned=answer.is_abandoned)
            except BaseException as e:  # noqa: BLE001 - handed to the waiter, as the pool does
                answer.set_exception(e)
            else:
                answer.set_result(result)

        return run

    def _answer_on_arrival(
        self, request: RemoteFetchRequest, in_flight: Future[bytes]
    ) -> FetchFuture:
        """A fetch whose read-ahead range is being read: answered when the range arrives,
        in the thread that read it (``_serve_read_ahead``), instead of by a pool thread that
        would wait for it. With a sequential consumer on S3 that is most fetches: the
        consumer asks as soon as it has the answer before, while its range is still on the
        way. When the range is not the plain case (or failed), the pool serves the fetch,
        as it would have. A fetch cancelled meanwhile (its waiter gave up) takes nothing:
        the range stays in hand for the consumer's next try."""
        answer = FetchFuture()

        def arrived(_: Future[bytes]) -> None:
            if answer.cancelled() or answer.is_abandoned():
                return
            try:
                served = self._serve_read_ahead(request)
            except BaseException as e:  # noqa: BLE001 - a callback's error would be lost
                answer.fail(e)
                return
            if served is None:
                run = self._fetch_task(answer, request)
                try:
                    answer.task = self._submit(run)
                except (RemoteReadRejectedError, RuntimeError) as e:
                    answer.fail(e)
                return
            if answer.set_running_or_notify_cancel():
                answer.set_result(served.result())

        in_flight.add_done_callback(arrived)
        return answer

    def _serve_read_ahead(
        self, request: RemoteFetchRequest, *, wait_in_flight: bool = False
    ) -> Future[RemoteFetchResult] | None:
        """A fetch answered in the caller's thread from a read-ahead range already in
        memory (a done future), or None: the pool then serves it. With ``wait_in_flight``,
        a fetch whose range is being read is answered when it arrives
        (``_answer_on_arrival``). A sequential consumer's next range is usually in hand or
        on the way when it asks, and handing the fetch to a pool thread and the answer back
        cost more than the work (an RLMM lookup and a slice; the range's CRC32C was checked
        when it arrived). Never waits for I/O: a range too short
        for the answer is left for the pool, and so is a READ_COMMITTED fetch (librdkafka's
        default) whose aborted transactions need a remote transaction index not parsed in
        memory yet."""
        if self.fetch_quota is not None and self.fetch_quota.is_exceeded():
            return None
        tp, plog = request.tp, request.plog
        fetch_offset, max_bytes = request.fetch_offset, request.max_bytes
        try:
            md = self._segment_for(tp, plog, fetch_offset)
        except RemoteStorageError:
            return None  # the pool reads it again and reports the failure
        if md is None:
            return None
        key = (md.segment_id, fetch_offset)
        ahead = self.read_ahead.take_ready(key, max_bytes, md.segment_size_in_bytes)
        if ahead is None:
            held = self.read_ahead.held(key) if wait_in_flight else None
            if held is not None and not held[1].done():
                return self._answer_on_arrival(request, held[1])
            return None
        position, prefix = ahead
        data = answer_in(prefix, fetch_offset, max_bytes)
        if data is None:
            # Not the plain case (a batch larger than the range, or a range that does not
            # start at the batch asked for): the pool serves it, starting from these bytes.
            self.read_ahead.put(key, position, done_future(prefix))
            return None
        aborted = None
        if request.read_committed:
            upper = upper_bound_offset(data, fetch_offset)
            txns = self._collect_aborted_txns(
                tp,
                plog,
                fetch_offset,
                upper,
                self.index_cache.txn_index_in_memory,
                max_segments=EVENT_LOOP_TXN_SEARCH_SEGMENTS,
                first_md=md,
            )
            if txns is None:
                self.read_ahead.put(key, position, done_future(prefix))
                return None
            aborted = tuple((t.producer_id, t.first_offset) for t in txns)
        # No CRC32C pass here: every range in hand was checked when it arrived (in the
        # thread that read it), and ``data`` starts where its range does, so its whole
        # batches are among those checked.
        self.metrics.inc(REMOTE_FETCH_REQUESTS, tp)
        answer: Future[RemoteFetchResult] = Future()
        self._count_served(tp, len(data))
        if len(data) < len(prefix):
            self._keep_rest(md, position, prefix, data)
        self._read_ahead(tp, plog, md, position, data, max_bytes)
        answer.set_result(RemoteFetchResult(data, aborted))
        return answer

    def _serve_file_at_once(self, request: RemoteFetchRequest) -> Future[RemoteFetchResult] | None:
        """A fetch answered in the caller's thread with a slice of the segment's log file
        (a done future), or None: the pool then serves it. Only when it needs no more I/O
        than an open and a few batch headers: the file was checked already, and the fetch
        starts at the segment's first offset or where the fetch before it ended; and, for
        READ_COMMITTED, when the remote transaction indexes it needs are in memory (as
        ``_serve_read_ahead``)."""
        files = self._files
        assert files is not None
        if self.fetch_quota is not None and self.fetch_quota.is_exceeded():
            return None
        tp, plog, fetch_offset = request.tp, request.plog, request.fetch_offset
        try:
            md = self._segment_for(tp, plog, fetch_offset)
        except RemoteStorageError:
            return None  # the pool looks it up again and reports the failure
        if md is None:
            return None
        if fetch_offset <= md.start_offset:
            position: int | None = 0
        else:
            position = self._file_positions.get((md.segment_id, fetch_offset))
        if position is None:
            return None
        try:
            fd = files.open_log_segment_file(md, only_if_verified=True)
            if fd is None:
                return None
            file = RemoteLogFile(fd, md.remote_log_segment_id)
            region = find_region(file, position, fetch_offset, request.max_bytes)
        except (RemoteStorageError, CoreError, OSError):
            return None  # the pool reads it again and reports the failure
        if region is None:
            return None  # past the segment's last batch: the pool goes on to the next
        aborted = None
        if request.read_committed:
            txns = self._collect_aborted_txns(
                tp,
                plog,
                fetch_offset,
                region.upper_bound,
                self.index_cache.txn_index_in_memory,
                max_segments=EVENT_LOOP_TXN_SEARCH_SEGMENTS,
                first_md=md,
            )
            if txns is None:
                return None
            aborted = tuple((t.producer_id, t.first_offset) for t in txns)
        self.metrics.inc(REMOTE_FETCH_REQUESTS, tp)
        self._served_file(tp, plog, md, region)
        answer: Future[RemoteFetchResult] = Future()
        answer.set_result(RemoteFetchResult(region.records, aborted))
        return answer

    def _fetch_file(self, request: RemoteFetchRequest) -> RemoteFetchResult | None:
        """``fetch`` with the records as a slice of the segment's log file (sent from the
        file), or None when this plugin hands out no files or the plain case does not hold
        (no segment for the offset, the fetch quota exhausted): ``fetch`` then answers,
        errors included.

        Raises:
            RemoteStorageError: the remote tier failed, or the object does not match its
                manifest (a corrupt object is never served).
        """
        files = self._files
        if files is None or (self.fetch_quota is not None and self.fetch_quota.is_exceeded()):
            return None
        tp, plog, fetch_offset = request.tp, request.plog, request.fetch_offset
        try:
            md = self._segment_for(tp, plog, fetch_offset)
            while md is not None:
                fd = files.open_log_segment_file(md)
                if fd is None:
                    self._files = None  # the plugin's answer for every segment
                    return None
                file = RemoteLogFile(fd, md.remote_log_segment_id)
                position = 0
                if fetch_offset > md.start_offset:
                    known = self._file_positions.get((md.segment_id, fetch_offset))
                    position = (
                        known
                        if known is not None
                        else self.index_cache.lookup_position(md, fetch_offset)
                    )
                region = find_region(file, position, fetch_offset, request.max_bytes)
                if region is not None:
                    break
                file.close()
                md = self._segment_for(tp, plog, md.end_offset + 1)
            if md is None:
                return None
        except (RemoteStorageError, OSError, CoreError) as e:
            self._count_failed(tp, fetch_offset, e)
            raise
        self.metrics.inc(REMOTE_FETCH_REQUESTS, tp)
        self._served_file(tp, plog, md, region)
        if not request.read_committed:
            return RemoteFetchResult(region.records)
        txns = self.collect_aborted_txns(tp, plog, fetch_offset, region.upper_bound)
        return RemoteFetchResult(
            region.records, tuple((t.producer_id, t.first_offset) for t in txns)
        )

    def _served_file(
        self,
        tp: TopicIdPartition,
        plog: PartitionLog,
        md: RemoteLogSegmentMetadata,
        region: FileRegion,
    ) -> None:
        """A fetch is answered with ``region``: count it, remember where the next one
        starts, and when the next fetch will reach the end of the segment, check the
        following segment's file on the pool (if a thread is idle) so that the consumer's
        first fetch there is answered at once instead of waiting for the check (a pass
        over the whole file): the file-path twin of reading ahead the next segment's
        start."""
        self._count_served(tp, len(region.records))
        if region.next_offset is not None and region.next_position < md.segment_size_in_bytes:
            self._file_positions.put((md.segment_id, region.next_offset), region.next_position)
        end = region.records.position + region.records.size
        following = md.end_offset + 1
        if end + region.records.size < md.segment_size_in_bytes:
            return
        if following >= plog.local_log_start_offset:
            return
        with self._pending_lock:
            if min(self.threads, self.max_pending_tasks) - self._pending <= 0:
                return
        files = self._files

        def check() -> None:
            md = self._segment_for(tp, plog, following)
            fd = None if md is None or files is None else files.open_log_segment_file(md)
            if fd is not None:
                os.close(fd)

        # A failure is left for the consumer's fetch of that segment to report.
        with contextlib.suppress(RemoteReadRejectedError, RuntimeError):
            self._submit(check)

    def _keep_rest(
        self, md: RemoteLogSegmentMetadata, position: int, prefix: bytes, data: bytes
    ) -> None:
        """A fetch asked for less than a read-ahead range held (a smaller ``max_bytes``
        than the fetch before): keep the rest, from the first batch not wholly served, for
        the next fetch, when it holds a whole batch (without one, the next range of the
        pipeline is keyed by the same offset and has these bytes)."""
        at, next_offset = whole_batches(data)
        if next_offset is None:
            return
        if whole_batches(prefix, at)[1] is None:
            return
        key = (md.segment_id, next_offset)
        if key not in self.read_ahead:
            self.read_ahead.put(key, position + at, done_future(prefix[at:]))

    def submit_offset_for_timestamp(
        self, tp: TopicIdPartition, plog: PartitionLog, timestamp: int
    ) -> Future[TimestampAndOffset | None]:
        """``find_offset_by_timestamp`` (``find_max_timestamp`` for MAX_TIMESTAMP) on the
        reader pool (same rejection as submit_read)."""
        if timestamp == MAX_TIMESTAMP:
            return self._submit(lambda: self.find_max_timestamp(tp, plog))
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
    def fetch(
        self,
        tp: TopicIdPartition,
        plog: PartitionLog,
        fetch_offset: int,
        max_bytes: int,
        *,
        read_committed: bool = False,
        abandoned: Callable[[], bool] | None = None,
    ) -> RemoteFetchResult:
        """``read``, plus for READ_COMMITTED the aborted transactions overlapping the
        records read (see ``collect_aborted_txns``). ``abandoned`` tells whether the
        fetch's waiter has gone (``read``).

        Raises:
            As ``read`` and ``collect_aborted_txns``.
        """
        request = RemoteFetchRequest(tp, plog, fetch_offset, max_bytes, read_committed)
        return self._fetch(request, abandoned=abandoned)

    def _fetch(
        self, request: RemoteFetchRequest, *, abandoned: Callable[[], bool] | None = None
    ) -> RemoteFetchResult:
        """``fetch`` of ``request``."""
        data = self._read(request, abandoned=abandoned)
        if not request.read_committed:
            return RemoteFetchResult(data)
        upper = upper_bound_offset(data, request.fetch_offset)
        txns = self.collect_aborted_txns(request.tp, request.plog, request.fetch_offset, upper)
        return RemoteFetchResult(data, tuple((t.producer_id, t.first_offset) for t in txns))

    def collect_aborted_txns(
        self, tp: TopicIdPartition, plog: PartitionLog, start_offset: int, upper_bound: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound)``.

        Kafka's ``RemoteLogManager.collectAbortedTransactions``: the transaction indexes of
        the remote segments of the current lineage from the one holding ``start_offset``
        on, until one says the search is complete (a transaction whose LSO reaches
        ``upper_bound``); then the local log's, when the remote segments run out first.
        Segments whose metadata says their transaction index is empty are skipped without
        a fetch (KIP-1058), so a topic without aborted transactions costs metadata lookups
        only.

        Raises:
            RemoteStorageError: a transaction index could not be fetched.
            CorruptIndexError: a transaction index is corrupt.
        """
        found = self._collect_aborted_txns(
            tp, plog, start_offset, upper_bound, self.index_cache.txn_index
        )
        assert found is not None  # txn_index fetches what it does not hold
        return found

    def _collect_aborted_txns(
        self,
        tp: TopicIdPartition,
        plog: PartitionLog,
        start_offset: int,
        upper_bound: int,
        txn_index: Callable[[RemoteLogSegmentMetadata], TransactionIndex | None],
        *,
        max_segments: int | None = None,
        first_md: RemoteLogSegmentMetadata | None = None,
    ) -> list[AbortedTxn] | None:
        """``collect_aborted_txns`` with the remote transaction indexes from ``txn_index``;
        None as soon as it gives None for one (not in memory), or when more than
        ``max_segments`` remote segments would be searched. ``first_md``: the segment
        holding ``start_offset``, when the caller has looked it up.

        A search that went from a segment to the local log through segments without
        aborts only (KIP-1058's ``txn_index_empty``) is remembered for that segment
        (``TxnFreeRuns``), and the next search from it starts where that one ended: a
        sequential READ_COMMITTED consumer (librdkafka's default) otherwise looked up every
        remote segment after its own in the RLMM on every fetch."""
        out: list[AbortedTxn] = []
        offset = start_offset
        searched = 0
        first: uuid.UUID | None = None
        txn_free = True
        while offset < plog.local_log_start_offset:
            searched += 1
            if max_segments is not None and searched > max_segments:
                return None
            if first is None and first_md is not None:
                md: RemoteLogSegmentMetadata | None = first_md  # the caller's lookup
            else:
                md = self._segment_for(tp, plog, offset)
            if md is None:
                break
            if first is None:
                first = md.segment_id
                reached = self._txn_free_runs.get(first)
                if reached is not None and reached > offset:
                    offset = reached
                    continue
            if not md.txn_index_empty:  # KIP-1058: no fetch for a segment without aborts
                txn_free = False
                index = txn_index(md)
                if index is None:
                    return None
                txns, complete = index.collect_aborted_txns(start_offset, upper_bound)
                out.extend(txns)
                if complete:
                    return out
            offset = md.end_offset + 1
        else:
            if first is not None and txn_free:
                self._txn_free_runs.put(first, offset)
        out.extend(plog.collect_aborted_txns(max(offset, start_offset), upper_bound))
        return out

    def read(
        self,
        tp: TopicIdPartition,
        plog: PartitionLog,
        fetch_offset: int,
        max_bytes: int,
        *,
        abandoned: Callable[[], bool] | None = None,
    ) -> bytes:
        """Batches from the remote tier, starting at the batch holding ``fetch_offset``.

        At least one whole batch is returned even when larger than ``max_bytes``; the data
        may end inside a batch (clients drop the partial tail). Reads stay within one remote
        segment. Empty bytes when the fetch quota is exhausted. Nothing is read ahead when
        ``abandoned()`` says the fetch's waiter has gone (``remote.fetch.max.wait.ms``
        expired, or the client left): the client asks for this offset again, and that fetch
        reads ahead; ranges read ahead from here could arrive after the client has passed
        them, and stay in memory unused.

        Raises:
            OffsetOutOfRangeError: no remote segment of the current lineage holds the offset.
            RemoteStorageError: the remote tier failed.
        """
        return self._read(
            RemoteFetchRequest(tp, plog, fetch_offset, max_bytes), abandoned=abandoned
        )

    def _read(
        self, request: RemoteFetchRequest, *, abandoned: Callable[[], bool] | None = None
    ) -> bytes:
        """``read`` of ``request`` (its ``read_committed`` is ``fetch``'s to act on)."""
        tp, plog, fetch_offset = request.tp, request.plog, request.fetch_offset
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
                data = self._read_segment(request, md, abandoned)
                if data is not None:
                    self._count_served(tp, len(data))
                    return data
                md = self._segment_for(tp, plog, md.end_offset + 1)
            return b""
        except (RemoteStorageError, OSError) as e:
            self._count_failed(tp, fetch_offset, e)
            raise

    def _count_served(self, tp: TopicIdPartition, size: int) -> None:
        """A remote read answered ``size`` bytes: the metric and the fetch quota."""
        self.metrics.inc(REMOTE_FETCH_BYTES, tp, size)
        if self.fetch_quota is not None:
            self.fetch_quota.record(size)

    def _count_failed(self, tp: TopicIdPartition, offset: int, error: Exception) -> None:
        """A remote read failed: the error metric and one WARNING event."""
        self.metrics.inc(REMOTE_FETCH_ERRORS, tp)
        log_event(
            log,
            logging.WARNING,
            "remote_read_failed",
            tp,
            offset=offset,
            error=f"{type(error).__name__}: {error}",
        )

    def _segment_for(
        self, tp: TopicIdPartition, plog: PartitionLog, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        epoch = plog.leader_epoch_cache.epoch_for_offset(offset)
        if epoch is None:
            return None
        return self.rlmm.remote_log_segment_metadata(tp, epoch, offset)

    def _read_segment(
        self,
        request: RemoteFetchRequest,
        md: RemoteLogSegmentMetadata,
        abandoned: Callable[[], bool] | None = None,
    ) -> bytes | None:
        """The bytes from the batch holding the request's fetch offset, or None when the
        segment ``md`` has no batch at or after it. Starts from a read-ahead range when one
        is there, and reads the next range ahead when the segment goes on (unless
        ``abandoned()``)."""
        tp, plog = request.tp, request.plog
        fetch_offset, max_bytes = request.fetch_offset, request.max_bytes
        chunk = max_bytes + READ_SLACK_BYTES
        ahead = self.read_ahead.take((md.segment_id, fetch_offset))
        if ahead is not None:
            position, prefix = ahead
            rest_of_segment = md.segment_size_in_bytes - position
            if len(prefix) >= min(max_bytes, rest_of_segment):
                data = answer_in(prefix, fetch_offset, max_bytes)
                if data is not None:
                    # The plain case, as ``_serve_read_ahead``: a slice of a range checked
                    # when it arrived (no copy, no second CRC32C pass).
                    if len(data) < len(prefix):
                        self._keep_rest(md, position, prefix, data)
                    if abandoned is None or not abandoned():
                        self._read_ahead(tp, plog, md, position, data, max_bytes)
                    return data
            ranges = SegmentRanges(self.rsm, md, position, chunk, prefix)
        else:
            # A read from the segment's first offset starts at byte 0 without its indexes.
            position = (
                0
                if fetch_offset <= md.start_offset
                else self.index_cache.lookup_position(md, fetch_offset)
            )
            ranges = SegmentRanges(self.rsm, md, position, chunk)
        at = 0
        while True:
            if ranges.ensure(at + HEADER_SIZE) < at + HEADER_SIZE:
                return None  # the end of the segment
            size = peek_batch_size(ranges.buf, at)
            assert size is not None
            if RecordBatchHeader(ranges.buf, at).last_offset >= fetch_offset:
                end = at + max(max_bytes, size)
                held = ranges.ensure(end)
                data = bytes(ranges.buf[at : min(end, held)])
                verify_batches(md, ranges.start + at, data)
                if abandoned is None or not abandoned():
                    self._read_ahead(tp, plog, md, ranges.start + at, data, max_bytes)
                return data
            at += size

    def _read_ahead(
        self,
        tp: TopicIdPartition,
        plog: PartitionLog,
        md: RemoteLogSegmentMetadata,
        position: int,
        data: bytes,
        chunk: int,
        depth: int = READ_AHEAD_DEPTH,
        after: tuple[tuple[uuid.UUID, int], Future[bytes]] | None = None,
    ) -> None:
        """Fetch the ranges a sequential consumer asks for next, ``depth`` of them, each
        ``chunk`` bytes, if a pool thread is idle: the first from the first batch not
        wholly in ``data`` (its offset is the next fetch offset), each following one from
        the first batch not wholly in the range before it, asked for when that range
        arrives. When a range ends the segment, the next is the start of the segment
        holding the next offset: byte 0 is at or before any of its batches, so neither its
        indexes nor a round trip for them are needed (with small segments, a cold index
        fetch per segment, four requests, used to set the pace of a consumer reading from
        offset 0). Nothing is read ahead from the local log start on: the local log serves
        it. ``after`` is the (key, range) that ``data`` is, when this extends the pipeline
        from a range that arrived rather than from a fetch served: nothing is read once a
        fetch has taken that range (see ``ReadAhead.put``)."""
        at, next_offset = whole_batches(data)
        if next_offset is None or next_offset >= plog.local_log_start_offset:
            return
        start = position + at
        if start >= md.segment_size_in_bytes:
            try:
                following = self._segment_for(tp, plog, next_offset)
            except RemoteStorageError:
                return  # a lookup failure is the next fetch's to report
            if following is None or following.segment_id == md.segment_id:
                return
            md, start = following, 0
        key = (md.segment_id, next_offset)
        held = self.read_ahead.held(key)
        if held is not None:
            start, future = held
        else:
            # The next range of a consumer when a pool thread is idle; the ones after it
            # only while half the pool is idle and the cache half empty, so that with many
            # consumers they neither delay reads asked for nor evict others' next ranges.
            further = depth < READ_AHEAD_DEPTH
            with self._pending_lock:
                idle = min(self.threads, self.max_pending_tasks) - self._pending
            if idle <= 0 or (
                further and (idle <= self.threads // 2 or not self.read_ahead.roomy())
            ):
                return
            end = min(start + chunk, md.segment_size_in_bytes)
            if after is not None and not self.read_ahead.still_held(*after):
                return
            try:
                future = self._submit(lambda: self._fetch_range(md, start, end))
            except (RemoteReadRejectedError, RuntimeError):
                return
            if not self.read_ahead.put(key, start, future, after=after):
                future.cancel()
                return
        if depth > 1:
            future.add_done_callback(
                lambda f: self._read_ahead_after(tp, plog, md, key, start, f, chunk, depth - 1)
            )

    def _read_ahead_after(
        self,
        tp: TopicIdPartition,
        plog: PartitionLog,
        md: RemoteLogSegmentMetadata,
        key: tuple[uuid.UUID, int],
        position: int,
        arrived: Future[bytes],
        chunk: int,
        depth: int,
    ) -> None:
        """A read-ahead range arrived (in the thread that read it, or in the caller's when
        it was in hand already): read ahead the ones after it. A failed range stops the
        pipeline; the next fetch reads it again and reports the failure."""
        if arrived.cancelled() or arrived.exception() is not None:
            return
        self._read_ahead(
            tp, plog, md, position, arrived.result(), chunk, depth, after=(key, arrived)
        )

    def _fetch_range(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        """A read-ahead range, its whole batches' CRC32C checked (a range that fails is
        never in hand: the fetch that wants it reads it again and reports the failure)."""
        with self.rsm.fetch_log_segment(md, start, end) as stream:
            parts = []
            got = 0
            while got < end - start:
                part = stream.read(end - start - got)
                if not part:
                    break
                parts.append(part)
                got += len(part)
        data = b"".join(parts)
        verify_batches(md, start, data)
        return data

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
        for md in self._lineage_segments(tp, plog):
            if md.max_timestamp_ms < timestamp or md.end_offset < start:
                continue
            found = self._scan_for_timestamp(md, timestamp, max(start, md.start_offset))
            if found is not None:
                epoch_for = plog.leader_epoch_cache.epoch_for_offset
                return TimestampAndOffset(found[0], found[1], epoch_for(found[1]))
        return None

    def find_max_timestamp(
        self, tp: TopicIdPartition, plog: PartitionLog
    ) -> TimestampAndOffset | None:
        """ListOffsets -3 (MAX_TIMESTAMP) over the remote segments of the current
        leader-epoch lineage that reach the log start offset: the first record carrying
        the largest timestamp, with that timestamp and its batch's leader epoch.

        The segment is chosen from the RLMM metadata (``max_timestamp_ms``; the earliest on
        ties) and only the batch holding the record is read, found through the segment's
        time and offset indexes. None when the local log holds a larger timestamp, or the
        same one with no remote-only offsets before it: the local log answers then, and the
        caller keeps the larger timestamp of the two answers (the lower offset on ties).
        As Kafka's local lookup, records below the log start offset inside a segment that
        reaches it are not excluded (excluding them would mean decoding whole segments).

        Raises:
            RemoteStorageError: the remote tier failed.
        """
        start = plog.log_start_offset
        local_max = plog.max_timestamp_so_far
        local_start = plog.local_log_start_offset
        candidates = [
            md
            for md in self._lineage_segments(tp, plog)
            if md.end_offset >= start
            and md.max_timestamp_ms >= 0
            and (
                md.max_timestamp_ms > local_max
                or (md.max_timestamp_ms == local_max and md.start_offset < local_start)
            )
        ]
        candidates.sort(key=lambda md: (-md.max_timestamp_ms, md.start_offset))
        for md in candidates:
            # No record can exceed the segment's max: the first at or after it carries it.
            found = self._scan_for_timestamp(md, md.max_timestamp_ms, md.start_offset)
            if found is not None:
                ts, offset, epoch = found
                return TimestampAndOffset(ts, offset, epoch if epoch >= 0 else None)
            # A segment whose max came from its file time (no record had a timestamp).
        return None

    def _lineage_segments(
        self, tp: TopicIdPartition, plog: PartitionLog
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """The finished remote segments of the current leader-epoch lineage, each once,
        lazily (a timestamp search stops at its first match)."""
        seen: set[object] = set()
        for entry in plog.leader_epoch_cache.entries():
            for md in self.rlmm.list_remote_log_segments(tp, entry.epoch):
                if md.segment_id in seen or md.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                    continue
                seen.add(md.segment_id)
                yield md

    def _scan_for_timestamp(
        self, md: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int
    ) -> tuple[int, int, int] | None:
        """``(timestamp, offset, batch leader epoch)`` of the first record at or after
        ``timestamp`` and ``starting_offset`` in the segment."""
        from_offset = max(self.index_cache.lookup_timestamp(md, timestamp), starting_offset)
        position = self.index_cache.lookup_position(md, from_offset)
        ranges = SegmentRanges(self.rsm, md, position, 256 * 1024)
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
                        return record.timestamp, record.offset, batch.partition_leader_epoch
            at += size
        return None
