"""PartitionLog: the local log of one partition (Kafka's UnifiedLog, local part).

Appends validate batch headers and CRCs, assign offsets and the leader epoch by patching
the header in place, and write the bytes as they came: records are decoded only where a
per-record rule can fail (core.log.record_validation).
Reads return file slices for zero-copy sends. Loading recovers from an unclean shutdown.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import NamedTuple, Protocol

import crc32c

from core.clock import now_ms
from core.errors import (
    CoreError,
    CorruptIndexError,
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from core.fs import TMP_SUFFIX, atomic_write, fsync_dir
from core.log.abstract_index import PENDING_BYTES
from core.log.config import LogConfig
from core.log.divergence import (
    UNDEFINED_EPOCH_END_OFFSET,
    EpochEndOffset,
    OffsetTruncationState,
    diverging_epoch,
    follower_truncation_state,
)
from core.log.file_records import SCAN_CHUNK_BYTES, FileRecords
from core.log.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    deleted_dir_name,
    filename_prefix,
    parse_offset_file,
)
from core.log.leader_epoch import (
    UNDEFINED_EPOCH,
    EpochEntry,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
)
from core.log.producer_state import (
    OpenTxn,
    ProducerStateEntry,
    ProducerStateManager,
    delete_snapshot_files,
    read_txn_marker,
    snapshot_path,
)
from core.log.record_validation import validate_records
from core.log.replicated_batches import scan_replicated_batches
from core.log.segment import AppendedBatch, FetchDataInfo, LogOffsetMetadata, LogSegment
from core.log.txn_index import AbortedTxn
from core.records.batch import (
    F_BASE_OFFSET,
    F_EPOCH,
    F_LENGTH,
    F_MAX_TIMESTAMP,
    F_PRODUCER_ID,
    F_RECORDS_COUNT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    RecordBatchHeader,
    assign_offsets,
    scan_client_batches,
)
from core.records.native import load_compiled
from core.scheduler import Scheduler, SchedulerStoppedError

log = logging.getLogger(__name__)

# ListOffsets special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


# The files of a segment (producer snapshots share the naming but belong to no segment).
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _without(path: Path, suffix: str, replacement: str) -> Path:
    name = path.name
    if name.endswith(suffix):
        name = name[: -len(suffix)]
    return path.with_name(name + replacement)


class LogAppendInfo(NamedTuple):
    """What an append did; the fields Kafka's LogAppendInfo carries back to the producer.

    A NamedTuple rather than a frozen dataclass: one is built per produce, and a frozen
    dataclass costs five times as much to construct.
    """

    first_offset: int
    last_offset: int
    last_leader_epoch: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    valid_bytes: int
    batch_count: int
    records_count: int
    duplicate: bool = False  # an idempotent retry answered with its original offsets


class ActiveSegmentAppender(Protocol):
    """``core.log._active_segment.ActiveSegmentAppender``: the common case of
    ``append_as_leader`` in one compiled call; None when the request takes the Python path."""

    def append(self, buf: bytearray | memoryview, epoch: int) -> LogAppendInfo | None: ...


ACTIVE_SEGMENT_APPEND: ModuleType | None = load_compiled("core.log._active_segment")
"""The compiled append this process uses, or None for the Python path alone (the tests
switch it; a log takes it when constructed)."""


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int | None


class PartitionLog:
    """The segments of one partition and everything kept alongside them.

    Thread-safety: appends, rolls, truncations and retention take ``lock``; reads take it
    only to pick the segment, then read the file without it.
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        scheduler: Scheduler | None = None,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = False,
        producer_id_expiration_ms: int = 86_400_000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.dir = directory
        self.topic = topic
        self._name = f"{topic}-{partition}"  # as Kafka names the partition in messages
        self.partition = partition
        self.config = config
        self.scheduler = scheduler
        self.clock = clock
        self.lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        # An immutable copy of (segments, base offsets) for lock-free readers, replaced
        # whole after every change under the lock (copy-on-write: segments change rarely).
        self._view: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        # The tiering seam (KIP-405): highest offset known to be in remote storage, -1 if none.
        self.highest_offset_in_remote_storage = -1
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._truncations = 0  # truncations so far: a flush racing one must not count
        # With inline_flush, an append that reaches flush.messages fsyncs before returning.
        # The broker turns it off and runs the fsync on a thread instead, still before it
        # answers the producer, so the event loop never waits on the disk.
        self.inline_flush = True
        self._closed = False
        directory.mkdir(parents=True, exist_ok=True)
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
        )
        self.producer_state = ProducerStateManager(directory, producer_id_expiration_ms)
        # The cache's latest epoch as last seen by an append (None: look it up), so that the
        # append path does not take the cache's lock for every batch.
        self._latest_epoch: int | None = None
        self._load(had_clean_shutdown)
        # The compiled common case of append_as_leader (None: the Python path alone).
        self._appender: ActiveSegmentAppender | None = (
            None
            if ACTIVE_SEGMENT_APPEND is None
            else ACTIVE_SEGMENT_APPEND.ActiveSegmentAppender(
                self, crc32c.crc32c, LogAppendInfo, now_ms, PENDING_BYTES
            )
        )
        self.high_watermark = self._clamp(
            high_watermark if high_watermark is not None else self.log_end_offset
        )
        # Completed transactions below the high watermark no longer hold the LSO back.
        self.producer_state.on_high_watermark_updated(self.high_watermark)

    # -- loading ---------------------------------------------------------------------------
    def _load(self, had_clean_shutdown: bool) -> None:
        self._complete_swaps()
        self._remove_temporary_files()
        names = set(os.listdir(self.dir))
        for name in sorted(n for n in names if n.endswith(LOG_SUFFIX)):
            parsed = parse_offset_file(name)
            if parsed is None or parsed[2]:
                continue
            base = parsed[0]
            segment = LogSegment(self.dir, base, self.config, created_ms=self.clock(), create=False)
            # Kafka's loader (since KAFKA-7283) only checks that the index files exist and
            # opens them on first use: a segment costs nothing more here. Its indexes are
            # checked when first opened and rebuilt then if corrupt; those of the segments
            # recovery will rebuild anyway are not checked at all.
            prefix = filename_prefix(base)
            try:
                if not all(
                    prefix + suffix in names for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                ):
                    raise CorruptIndexError(f"index files of {self.dir / name} are missing")
                if prefix + TXN_INDEX_SUFFIX in names:
                    segment.txn_index.sanity_check()
            except CoreError as e:
                log.warning("%s: rebuilding indexes of segment %d: %s", self.dir, base, e)
                segment.recover(None)
            else:
                segment.verify_indexes_on_open = True
            self._segments.append(segment)
        self._segments.sort(key=lambda s: s.base_offset)
        self._bases = [s.base_offset for s in self._segments]
        self._publish()
        self._delete_orphan_indexes()

        recovered: dict[int, list[int]] = {}
        if self._segments and not had_clean_shutdown:
            recovered = self._recover_from(self.recovery_point)
        if not self._segments:
            start = max(self.log_start_offset, self.recovery_point)
            self._add_segment(LogSegment(self.dir, start, self.config, created_ms=self.clock()))
        # Only the active segment's indexes need room to grow (Kafka's resizeIndexes).
        self.active_segment.resize_indexes(self.config.segment_index_bytes)
        self._log_end_offset = self.active_segment.read_next_offset()
        if not self.config.remote_storage_enable:
            self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self.log_start_offset = min(self.log_start_offset, self._log_end_offset)
        self.recovery_point = min(max(self.recovery_point, 0), self._log_end_offset)
        if had_clean_shutdown:
            self.recovery_point = self._log_end_offset
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._rebuild_producer_state(recovered)

    def _complete_swaps(self) -> None:
        """Finish the cleaner's segment swaps that a crash interrupted (Kafka's rule).

        ``replace_segments`` renames the cleaned segment's files to ``.swap`` (indexes first,
        the ``.log`` last) only once they are complete and fsynced; so a ``.log.swap`` is a
        whole cleaned segment, and every plain segment inside its offset range is replaced.
        """
        completed = False
        for swap in sorted(self.dir.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
            parsed = parse_offset_file(swap.name)
            if parsed is None:
                continue
            completed = True
            base = parsed[0]
            last = base
            records = FileRecords(swap, create=False, writable=False)
            try:
                for _, header in records.batch_headers():
                    last = max(last, header.last_offset)
            finally:
                records.close()
            log.info("%s: completing the interrupted swap of cleaned segment %d", self.dir, base)
            for path in self.dir.iterdir():
                other = parse_offset_file(path.name)
                if (
                    other is not None
                    and not other[2]
                    and other[1] in SEGMENT_SUFFIXES
                    and base <= other[0] <= last
                ):
                    path.unlink(missing_ok=True)
            for path in self.dir.glob(f"{filename_prefix(base)}.*{SWAP_SUFFIX}"):
                path.rename(path.with_name(path.name[: -len(SWAP_SUFFIX)]))
        if completed:  # only then has the directory changed
            fsync_dir(self.dir)

    def _remove_temporary_files(self) -> None:
        for path in self.dir.iterdir():
            name = path.name
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX)):
                # .swap files left here belong to no complete swap (an index without its log).
                log.info("%s: removing leftover file %s", self.dir, name)
                path.unlink(missing_ok=True)

    def _delete_orphan_indexes(self) -> None:
        bases = set(self._bases)
        for path in self.dir.iterdir():
            parsed = parse_offset_file(path.name)
            if (
                parsed
                and parsed[1] in (".index", ".timeindex", ".txnindex")
                and (parsed[0] not in bases)
            ):
                log.warning("%s: deleting index %s without a log file", self.dir, path.name)
                path.unlink(missing_ok=True)

    def _recover_from(self, recovery_point: int) -> dict[int, list[int]]:
        """Validate every batch from the segment holding the recovery point to the end.

        Returns:
            For each recovered segment (by base offset), the positions of its batches with
            a producer id, for ``_rebuild_producer_state``.
        """
        recovered: dict[int, list[int]] = {}
        first = max(0, bisect.bisect_right(self._bases, recovery_point) - 1)
        # Recovery empties the transaction indexes of the segments it recovers; the replay
        # that rebuilds producer state afterwards refills them, but only from the snapshot
        # it starts at. Kafka replays each recovered segment from its base offset, so no
        # snapshot above the first recovered segment may be used.
        self.producer_state.delete_snapshots_above(self._segments[first].base_offset)
        # One read buffer for all the segments, no larger than the largest needs.
        largest = max(s.size for s in self._segments[first:])
        buffer = bytearray(max(1, min(SCAN_CHUNK_BYTES, largest)))
        for i in range(first, len(self._segments)):
            segment = self._segments[i]
            # No size bound: a batch above max.message.bytes may be legitimately stored (a
            # follower's copy of the leader's, or written before the setting shrank), and a
            # torn length cannot run past the file anyway.
            truncated, producer_positions = segment.recover(None, self._maybe_assign_epoch, buffer)
            recovered[segment.base_offset] = producer_positions
            if truncated > 0:
                log.warning(
                    "%s: recovery truncated %d invalid bytes from segment %d; deleting %d "
                    "later segments",
                    self.dir,
                    truncated,
                    segment.base_offset,
                    len(self._segments) - i - 1,
                )
                for later in self._segments[i + 1 :]:
                    later.delete_if_exists()
                    recovered.pop(later.base_offset, None)
                del self._segments[i + 1 :]
                self._bases = [s.base_offset for s in self._segments]
                self._publish()
                break
        return recovered

    def _maybe_assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` if it is newer than the latest.

        One rule for leader appends, follower appends and recovery, so that the cache a
        replica builds while appending is the cache recovery rebuilds from the same batches.
        Only an epoch newer than the cached latest is assigned: re-assigning an older or
        equal epoch at a later batch's base offset would move that epoch's start forward and
        drop the later epochs, rewriting the lineage that remote segments and followers were
        validated against. (Kafka's assign for every batch has the same effect on a log
        whose epochs never decrease, which is what leaders write.)
        """
        if epoch in (NO_PARTITION_LEADER_EPOCH, self._latest_epoch):
            return
        latest = self.leader_epoch_cache.latest_epoch
        if latest is None or epoch > latest:
            self.leader_epoch_cache.assign(epoch, start_offset)
        self._latest_epoch = self.leader_epoch_cache.latest_epoch

    def _rebuild_producer_state(self, recovered: dict[int, list[int]] | None = None) -> None:
        """Load the newest usable snapshot and replay the batches after it.

        ``recovered``: the producer batch positions of segments recovery just walked
        (``_recover_from``); only those batches of them are read again.
        """
        recovered = recovered or {}
        replay_from = self.producer_state.load(self.log_start_offset, self._log_end_offset)
        first = max(0, bisect.bisect_right(self._bases, replay_from) - 1)
        # Kafka's rebuildProducerState: snapshots at the base offsets of the last two
        # segments, so that the next load (after another crash) replays only from there,
        # whatever snapshots recovery had to delete.
        snapshot_at = {s.base_offset for s in self._segments[-2:]}
        for i in range(first, len(self._segments)):
            segment = self._segments[i]
            if (
                segment.base_offset in snapshot_at
                and segment.base_offset > replay_from
                and segment.base_offset >= self.producer_state.map_end_offset
            ):
                self.producer_state.take_snapshot(segment.base_offset)
            start = segment.offset_index.lookup(replay_from).position
            positions = recovered.get(segment.base_offset)
            if positions is None:
                headers = segment.log.batch_headers(start)
            else:
                # Recovery just walked this segment: only the batches with a producer id
                # change the state (the others move the map end offset, set below).
                headers = (
                    (p, RecordBatchHeader(segment.log.read(p, HEADER_SIZE)))
                    for p in positions
                    if p >= start
                )
            for position, view in headers:
                if view.last_offset < replay_from:
                    continue
                header = view
                if view.is_control and view.has_producer_id:
                    # The view holds the header only; a marker's record follows it.
                    header = RecordBatchHeader(segment.log.read(position, view.size_in_bytes))
                # The batch's own time, not now: replay must rebuild the state as it was.
                self._update_producer_state(segment, header, header.max_timestamp, replay=True)
            if positions is not None and i + 1 < len(self._segments):
                # As far as the skipped batches would have moved it: the next segment's start.
                following = self._segments[i + 1].base_offset
                if following > self.producer_state.map_end_offset:
                    self.producer_state.update_map_end_offset(following)
        self.producer_state.update_map_end_offset(self._log_end_offset)

    def _update_producer_state(
        self, segment: LogSegment, header: RecordBatchHeader, append_time_ms: int, *, replay: bool
    ) -> None:
        """Apply one written batch to the producer state; an abort marker also goes to the
        transaction index of ``segment``, the segment holding the marker (Kafka's
        updateTxnIndex). Appends and replays share it so both build the same state.

        ``replay``: the batch was written before and its abort may already be indexed (the
        segment's index survived, or was truncated above it): add it only if it is not.
        """
        completed = self.producer_state.update(header, append_time_ms=append_time_ms)
        if completed is None or not completed.is_aborted:
            return
        if replay:
            indexed = segment.txn_index.all_aborted_txns()
            if indexed and indexed[-1].last_offset >= completed.last_offset:
                return  # entries are in marker order: this one is already there
        segment.append_aborted_txn(
            AbortedTxn(
                completed.producer_id,
                completed.first_offset,
                completed.last_offset,
                completed.last_stable_offset,
            )
        )

    # -- segment bookkeeping ---------------------------------------------------------------
    def _add_segment(self, segment: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, segment.base_offset)
        if i < len(self._bases) and self._bases[i] == segment.base_offset:
            raise KafkaStorageError(
                f"{self.dir}: segment with base offset {segment.base_offset} already exists"
            )
        self._segments.insert(i, segment)
        self._bases.insert(i, segment.base_offset)
        self._publish()

    def _publish(self) -> None:
        self._view = (tuple(self._segments), tuple(self._bases))

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def segments(self) -> list[LogSegment]:
        """A snapshot of the segment list, oldest first."""
        return list(self._view[0])

    def segment_for(self, offset: int) -> LogSegment | None:
        """The segment whose range holds ``offset`` (the floor by base offset)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[i] if i >= 0 else None

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def local_log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments())

    def _clamp(self, offset: int) -> int:
        return min(max(offset, self.log_start_offset), self._log_end_offset)

    # -- leader epochs (KIP-101, KIP-279) ----------------------------------------------------
    @property
    def latest_epoch(self) -> int | None:
        """The latest leader epoch of the log (Kafka's UnifiedLog.latestEpoch); None when the
        cache is empty, in which case a follower truncates to its high watermark instead of
        asking the leader (it has no epoch to ask about)."""
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """Answer OffsetsForLeaderEpoch for ``epoch`` (Kafka's LeaderEpochFileCache.endOffsetFor).

        Returns:
            ``(largest cached epoch <= epoch, its end offset)``: the end offset is the start
            of the next cached epoch, or the log end offset for the latest epoch. For an
            epoch below every cached one: ``(epoch, start of the earliest entry)``.
            ``(-1, -1)`` (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) for epoch -1, an empty
            cache, or an epoch above the latest.
        """
        with self.lock:  # the log end offset and the cache seen at the same instant
            return EpochEndOffset(
                *self.leader_epoch_cache.end_offset_for(epoch, self._log_end_offset)
            )

    def truncation_state_for(
        self, leader: EpochEndOffset, fallback_offset: int | None = None
    ) -> OffsetTruncationState:
        """Where this follower truncates given the leader's answer (KIP-101, KIP-279).

        ``leader`` is the leader's OffsetsForLeaderEpoch answer for ``latest_epoch`` or a
        Fetch response's ``diverging_epoch``; see ``divergence.follower_truncation_state``
        for the rules. The caller truncates with ``truncate_to(state.offset)`` and, while
        ``truncation_completed`` is False, asks the leader again for its new latest epoch.

        Args:
            leader: the leader's ``(epoch, end offset)``.
            fallback_offset: where to truncate if the leader's answer is undefined; default
                the high watermark (Kafka's initial fetch offset for a follower).

        Returns:
            The truncation offset (never above the log end offset) and whether it is final.
        """
        with self.lock:
            if leader.epoch == UNDEFINED_EPOCH:
                local = UNDEFINED_EPOCH_END_OFFSET
            else:
                local = self.end_offset_for_epoch(leader.epoch)
            fallback = self.high_watermark if fallback_offset is None else fallback_offset
            return follower_truncation_state(leader, local, self._log_end_offset, fallback)

    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """A new leader's epoch starts at ``start_offset`` (its log end offset when it
        became leader), recorded before any batch of the epoch is written (Kafka's
        maybeAssignEpochStartOffset in makeLeader): OffsetsForLeaderEpoch then answers for
        the new epoch at once, and a follower holding later epochs of a deposed leader
        truncates to the right offset.

        The rule is the append path's (only an epoch newer than the cached latest is
        assigned), so calling it after the epoch's first append is a no-op. Writes the
        leader-epoch checkpoint when it changes (blocking).

        Raises:
            KafkaStorageError: the checkpoint could not be written.
        """
        with self.lock:
            self._maybe_assign_epoch(epoch, start_offset)

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> EpochEndOffset | None:
        """The leader's check of a follower's Fetch (v12+) naming its last fetched epoch.

        Kafka's Partition.readRecords: the leader looks up ``last_fetched_epoch`` in its own
        cache; if that epoch ends before ``fetch_offset``, or the leader only knows an older
        epoch, the follower's log diverges and it must truncate before fetching.

        Args:
            fetch_offset: the follower's fetch offset.
            last_fetched_epoch: from the request; negative (-1, absent) checks nothing.

        Returns:
            None if the follower may fetch from ``fetch_offset``; otherwise the
            ``(epoch, end offset)`` to answer as ``diverging_epoch`` (with no records).

        Raises:
            OffsetOutOfRangeError: ``last_fetched_epoch`` cannot be placed (the leader's
                answer is undefined) or ``fetch_offset`` is below the log start offset.
        """
        if last_fetched_epoch < 0:
            return None
        with self.lock:
            answer = self.end_offset_for_epoch(last_fetched_epoch)
            return diverging_epoch(answer, last_fetched_epoch, fetch_offset, self.log_start_offset)

    # -- append ----------------------------------------------------------------------------
    def append_as_leader(self, records: bytearray | memoryview, leader_epoch: int) -> LogAppendInfo:
        """Validate, assign offsets and the leader epoch, and append client batches.

        ``records`` is patched in place (base offsets, leader epoch, LogAppendTime).
        Nothing is appended unless every batch is valid.

        Raises:
            CorruptRecordError: torn framing or a CRC mismatch (CORRUPT_MESSAGE).
            InvalidRecordError: a batch breaking a rule for client batches (INVALID_RECORD);
                ``RecordValidationError`` (``InvalidTimestampError``) when the rule concerns
                single records, which it names (core.log.record_validation).
            UnsupportedVersionError: a magic other than 2.
            RecordTooLargeError: a batch above ``max.message.bytes``.
            RecordBatchTooLargeError: the records together larger than ``segment.bytes``.
            OutOfOrderSequenceError, InvalidProducerEpochError: idempotence violations.
            KafkaStorageError: the disk write failed.
        """
        appender = self._appender
        if appender is not None:
            # The common case in one compiled call, under the lock; None: the Python path.
            info = appender.append(records, leader_epoch)
            if info is not None:
                return info
        return self._append_as_leader_python(records, leader_epoch)

    def _append_as_leader_python(
        self, records: bytearray | memoryview, leader_epoch: int
    ) -> LogAppendInfo:
        """``append_as_leader`` in Python: every case, and the reference the compiled
        common case is tested against (the same results, errors and files)."""
        # A writable view (a produce request's records inside its frame) is patched in place.
        writable = isinstance(records, bytearray) or not memoryview(records).readonly
        buf = records if writable else bytearray(records)
        batches = scan_client_batches(buf, self.config.max_message_bytes)
        validate_records(buf, batches, self.config, self._name, self.clock())
        if len(buf) > self.config.segment_bytes:
            # Kafka's rule (UnifiedLog.append): the whole append must fit in one segment.
            raise RecordBatchTooLargeError(
                f"message batch size is {len(buf)} bytes in append to partition "
                f"{self.topic}-{self.partition}, which exceeds the maximum configured segment "
                f"size of {self.config.segment_bytes}"
            )
        with self.lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir} is closed")
            idempotent = [
                RecordBatchHeader(buf, pos)
                for pos, fields in batches
                if fields[F_PRODUCER_ID] > NO_PRODUCER_ID
            ]
            if idempotent:
                duplicate = self._check_producer_state(idempotent)
                if duplicate is not None:
                    return duplicate
            return self._append_validated(buf, batches, idempotent, leader_epoch)

    def append_as_coordinator(self, records: bytearray, leader_epoch: int) -> LogAppendInfo:
        """Append batches built by this broker's coordinators (Kafka's COORDINATOR origin):
        transaction markers (control batches) and transactional offset commits.

        Only producer epochs and coordinator epochs are checked (``ProducerStateManager.
        check_coordinator_append``); the batches come from the broker itself.

        Raises:
            InvalidProducerEpochError, TransactionCoordinatorFencedError: as above.
            KafkaStorageError: the log is closed, or the disk write failed.
        """
        batches: list[tuple[int, tuple[int, ...]]] = []
        position = 0
        while position < len(records):
            fields = HEADER.unpack_from(records, position)
            batches.append((position, fields))
            position += fields[F_LENGTH] + LOG_OVERHEAD
        headers = [
            RecordBatchHeader(records, pos)
            for pos, fields in batches
            if fields[F_PRODUCER_ID] > NO_PRODUCER_ID
        ]
        with self.lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir} is closed")
            for header in headers:
                self.producer_state.check_coordinator_append(header)
            return self._append_validated(records, batches, headers, leader_epoch)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the earliest transaction still open (or whose
        marker is not yet below the high watermark), else the high watermark."""
        first_unstable = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        return hw if first_unstable is None else min(first_unstable, hw)

    def open_transactions(self) -> list[OpenTxn]:
        """The transactions open in this partition, oldest first (under the log's lock)."""
        with self.lock:
            return self.producer_state.open_transactions()

    def _check_producer_state(self, headers: list[RecordBatchHeader]) -> LogAppendInfo | None:
        seen: dict[int, RecordBatchHeader] = {}
        for header in headers:
            previous = seen.get(header.producer_id)
            if previous is None:
                dup = self.producer_state.check_append(header)
                if dup is not None:
                    return LogAppendInfo(
                        first_offset=dup.first_offset,
                        last_offset=dup.last_offset,
                        last_leader_epoch=self.leader_epoch_cache.latest_epoch or -1,
                        max_timestamp=dup.timestamp,
                        offset_of_max_timestamp=dup.last_offset,
                        log_append_time=-1,
                        log_start_offset=self.log_start_offset,
                        valid_bytes=0,
                        batch_count=0,
                        records_count=0,
                        duplicate=True,
                    )
            elif header.base_sequence != (previous.last_sequence + 1) % (1 << 31):
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id}: sequence {header.base_sequence} does not "
                    f"follow {previous.last_sequence} within one request"
                )
            seen[header.producer_id] = header
        return None

    def _append_validated(
        self,
        buf: bytearray,
        batches: list[tuple[int, tuple[int, ...]]],
        idempotent: list[RecordBatchHeader],
        leader_epoch: int,
    ) -> LogAppendInfo:
        # The hot path of every produce: one compiled step patches every batch.
        now = self.clock()
        log_append_time = self.config.log_append_time
        first_offset = self._log_end_offset
        appended, last_offset, max_ts, offset_of_max_ts, records_count = assign_offsets(
            buf, batches, first_offset, leader_epoch, now if log_append_time else -1, AppendedBatch
        )

        self._write(buf, appended, max_ts, now, ((leader_epoch, first_offset),), idempotent, now)
        self._unflushed_messages += records_count
        if self.inline_flush and self.flush_due:
            self.flush()
        return LogAppendInfo(
            first_offset,
            last_offset,
            leader_epoch,
            max_ts,
            offset_of_max_ts,
            now if log_append_time else -1,
            self.log_start_offset,
            len(buf),
            len(batches),
            records_count,
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches fetched from the leader, exactly as the leader wrote them.

        Kafka's UnifiedLog.appendAsFollower: offsets and partition leader epochs are the
        leader's and are not patched; batches may be compressed, transactional, control
        batches, or empty batches left by the log cleaner; the follower's
        ``max.message.bytes`` does not apply (the leader accepted them), nor do client rules
        or idempotent sequence checks. The leader-epoch cache takes each batch's epoch that is
        newer than its latest (``assign(epoch, base offset)``); producer state follows the
        batches (epochs, sequences, open transactions; a COMMIT or ABORT marker completes its
        transaction and an ABORT is written to the transaction index, as recovery would).
        Rolls, index entries and the flush policy are those of ``append_as_leader``. The high
        watermark does not move: the fetcher sets it from the leader's.

        Nothing is appended unless every whole batch is valid.

        Args:
            records: the records of one partition of a fetch response: whole batches,
                possibly ended by a partial one (a size-bounded read), which is ignored.

        Returns:
            What was appended. Without a whole batch nothing is: ``batch_count`` and
            ``valid_bytes`` are 0, ``first_offset`` is the log end offset and
            ``last_offset`` one below it. ``last_leader_epoch`` is the epoch of the last
            batch (the fetcher's next ``last_fetched_epoch``).

        Raises:
            CorruptRecordError: a batch with an impossible length or a CRC mismatch, or a
                control batch whose marker cannot be read (CORRUPT_MESSAGE).
            UnsupportedVersionError: a batch with a magic other than 2.
            OffsetsOutOfOrderError: batches whose offsets do not increase.
            UnexpectedAppendOffsetError: the first batch starts below the log end offset
                (the fetch overlaps the log). A first batch above the log end offset is
                accepted, as in Kafka: a compacted leader log has gaps. Kafka's Partition
                recovers from one case: an empty log (log end == log start) and a batch
                straddling the log end offset (the leader's log start moved inside a batch by
                DeleteRecords), by ``truncate_fully_and_start_at(first_offset)`` and
                appending again; any other case means the fetch position is wrong.
            KafkaStorageError: the log is closed, or the disk write failed.
        """
        batches, valid_bytes = scan_replicated_batches(records)
        headers = [RecordBatchHeader(records, pos) for pos, _ in batches]
        producer_headers = [h for h in headers if h.has_producer_id]
        for header in producer_headers:
            if header.is_control:
                # Read the marker now: a marker failing after the write would leave the
                # batches in the log and the producer state without them.
                try:
                    read_txn_marker(header)
                except InvalidRecordError as e:
                    raise CorruptRecordError(
                        f"replicated control batch at offset {header.base_offset} of "
                        f"{self.topic}-{self.partition} is malformed: {e}"
                    ) from e
        with self.lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.dir} is closed")
            if not batches:
                return LogAppendInfo(
                    self._log_end_offset,
                    self._log_end_offset - 1,
                    NO_PARTITION_LEADER_EPOCH,
                    -1,
                    -1,
                    -1,
                    self.log_start_offset,
                    0,
                    0,
                    0,
                )
            first_offset = batches[0][1][F_BASE_OFFSET]
            last_offset = headers[-1].last_offset
            if first_offset < self._log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"unexpected offset in append to {self.topic}-{self.partition}: first "
                    f"offset {first_offset} is below the log end offset "
                    f"{self._log_end_offset} (append ends at {last_offset}, log start "
                    f"{self.log_start_offset})",
                    first_offset,
                    last_offset,
                    self._log_end_offset,
                )
            max_ts, offset_of_max_ts, records_count = -1, first_offset, 0
            appended: list[AppendedBatch] = []
            epoch_starts: list[tuple[int, int]] = []
            epoch = NO_PARTITION_LEADER_EPOCH
            for (pos, fields), header in zip(batches, headers, strict=True):
                base, last = fields[F_BASE_OFFSET], header.last_offset
                batch_max_ts = fields[F_MAX_TIMESTAMP]
                if batch_max_ts > max_ts:
                    max_ts, offset_of_max_ts = batch_max_ts, last
                appended.append(
                    AppendedBatch(pos, base, last, batch_max_ts, fields[F_LENGTH] + LOG_OVERHEAD)
                )
                records_count += fields[F_RECORDS_COUNT]
                epoch = fields[F_EPOCH]
                if not epoch_starts or epoch > epoch_starts[-1][0]:
                    epoch_starts.append((epoch, base))
            data = memoryview(records)[:valid_bytes]
            # LOG_APPEND_TIME batches carry the leader's append time as their max timestamp.
            self._write(data, appended, max_ts, self.clock(), epoch_starts, producer_headers, None)
            self._unflushed_messages += records_count
            if self.inline_flush and self.flush_due:
                self.flush()
            return LogAppendInfo(
                first_offset,
                last_offset,
                epoch,
                max_ts,
                offset_of_max_ts,
                -1,
                self.log_start_offset,
                valid_bytes,
                len(batches),
                records_count,
            )

    def _write(
        self,
        data: bytes | bytearray | memoryview,
        appended: list[AppendedBatch],
        max_timestamp: int,
        now: int,
        epoch_starts: Iterable[tuple[int, int]],
        producer_headers: list[RecordBatchHeader],
        append_time_ms: int | None,
    ) -> None:
        """Write validated batches with their final offsets: the part of an append that
        leaders and followers share. Lock held.

        Args:
            data: the batches' bytes, ``appended`` describing them in order.
            max_timestamp: the largest batch max timestamp (``segment.ms`` rolls).
            now: the broker's time of the append.
            epoch_starts: ``(epoch, first offset)`` of each epoch the batches carry.
            producer_headers: the batches with a producer id, in order.
            append_time_ms: the append time for LOG_APPEND_TIME batches' producer state;
                None to use each batch's max timestamp (the leader's append time).
        """
        first_offset, last_offset = appended[0].base_offset, appended[-1].last_offset
        segment = self._maybe_roll(len(data), max_timestamp, last_offset, now, first_offset)
        segment.append(data, appended)
        for epoch, start in epoch_starts:
            if epoch != self._latest_epoch:  # the common case returns at once: skip the call
                self._maybe_assign_epoch(epoch, start)
        for header in producer_headers:
            self._update_producer_state(
                segment,
                header,
                header.max_timestamp if append_time_ms is None else append_time_ms,
                replay=False,
            )
        self._log_end_offset = last_offset + 1
        self.producer_state.update_map_end_offset(self._log_end_offset)

    # -- roll ------------------------------------------------------------------------------
    def _maybe_roll(
        self,
        messages_size: int,
        max_timestamp: int,
        max_offset: int,
        now: int,
        first_offset: int | None = None,
    ) -> LogSegment:
        segment = self.active_segment
        if segment.should_roll(
            messages_size=messages_size,
            max_timestamp=max_timestamp,
            max_offset=max_offset,
            now_ms=now,
            config=self.config,
        ):
            return self._roll(first_offset)
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active is empty)."""
        with self.lock:
            return self._roll()

    def _roll(self, expected_next_offset: int | None = None) -> LogSegment:
        # A follower's append may start above the log end offset (a compacted leader log has
        # gaps); the new segment then starts at the append, as in Kafka, so that its offsets
        # fit the segment's relative offsets.
        new_offset = max(self._log_end_offset, expected_next_offset or 0)
        previous = self.active_segment
        if previous.base_offset == new_offset:
            if previous.size == 0:
                return previous
            raise KafkaStorageError(f"{self.dir}: cannot roll to existing offset {new_offset}")
        previous.on_becoming_inactive()
        segment = LogSegment(self.dir, new_offset, self.config, created_ms=self.clock())
        self._add_segment(segment)
        # A snapshot at the new base offset lets recovery start exactly at a segment start.
        # As in Kafka, it is synced by the flush scheduled below, not here: the roll runs on
        # the append path and two fsyncs would stall it.
        self.producer_state.update_map_end_offset(new_offset)
        snapshot = self.producer_state.take_snapshot(durable=False)

        def flush_rolled() -> None:
            if snapshot is not None:
                self.producer_state.sync_snapshot(snapshot)
            self.flush(new_offset)

        if self.scheduler is not None:
            self.scheduler.schedule_once("flush-log", flush_rolled)
        else:
            flush_rolled()
        log.info("%s: rolled new segment at offset %d", self.dir, new_offset)
        return segment

    # -- flush -----------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: the log end)."""
        with self.lock:
            if self._closed:
                return
            target = min(self._log_end_offset if offset is None else offset, self._log_end_offset)
            if target <= self.recovery_point:
                return
            segments = [
                s
                for s in self._segments
                if s.base_offset < target and s.base_offset >= self._floor(self.recovery_point)
            ]
            truncations = self._truncations
        for segment in segments:
            segment.flush()
        with self.lock:
            # A truncation while the files were synced may have replaced what they held
            # below ``target`` (the flush a roll scheduled runs late): the recovery point
            # only moves over offsets this flush surely made durable.
            if self._truncations == truncations:
                self.recovery_point = max(self.recovery_point, target)
            self._unflushed_messages = 0
            self._last_flush_ms = self.clock()

    def sync_data(self) -> None:
        """fsync the record files written since the recovery point, not their indexes
        (recovery rebuilds those): what a coordinator's write needs to survive a crash,
        at a quarter of ``flush``'s fsyncs. The recovery point does not move."""
        with self.lock:
            if self._closed:
                return
            floor = self._floor(self.recovery_point)
            segments = [s for s in self._segments if s.base_offset >= floor]
        for segment in segments:
            segment.log.flush()

    def _floor(self, offset: int) -> int:
        seg = self.segment_for(offset)
        return seg.base_offset if seg is not None else 0

    @property
    def flush_due(self) -> bool:
        """True when ``flush.messages`` appended messages wait for an fsync."""
        return self._unflushed_messages >= self.config.flush_messages

    def flush_if_due(self) -> None:
        """The ``flush.ms`` policy; called periodically by the LogManager."""
        if self.clock() - self._last_flush_ms >= self.config.flush_ms:
            self.flush()

    # -- read ------------------------------------------------------------------------------
    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Batches from ``start_offset`` as a file slice from one segment.

        Args:
            start_offset: first offset wanted; local_log_start_offset <= it <= log end.
            max_bytes: size bound; see ``min_one_message``.
            max_offset: exclusive upper bound (the high watermark for consumers).
            min_one_message: return the first batch even if it exceeds ``max_bytes``.

        Raises:
            OffsetOutOfRangeError: ``start_offset`` below the local log start or above the
                log end offset.
        """
        segments, bases = self._view
        end = self._log_end_offset
        # Below the log start offset (retention, DeleteRecords) nothing may be read, even
        # while the segment holding it is still on disk.
        first_readable = max(self.log_start_offset, bases[0])
        if start_offset > end or start_offset < first_readable:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.topic}-{self.partition}: "
                f"the local log serves {first_readable}..{end}"
            )
        limit = end if max_offset is None else min(max_offset, end)
        if start_offset >= limit:
            return FetchDataInfo(LogOffsetMetadata(start_offset), None)
        i = bisect.bisect_right(bases, start_offset) - 1
        while i < len(segments):
            segment = segments[i]
            max_position = None
            if limit < end:
                limit_seg_index = bisect.bisect_right(bases, limit) - 1
                if limit_seg_index == i:
                    found = segment.translate_offset(limit)
                    max_position = found[0] if found is not None else segment.size
            info = segment.read(start_offset, max_bytes, max_position, min_one_message)
            if info is not None:
                return info
            i += 1  # the offset lies past this segment's data: try the next one
        return FetchDataInfo(LogOffsetMetadata(start_offset), None)

    def collect_aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        out: list[AbortedTxn] = []
        for segment in self.segments():
            if segment.base_offset >= upper_bound_offset:
                break
            txns, _ = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            out.extend(txns)
        return out

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets over the local log; special values as in Kafka's ListOffsetsRequest.

        -1 latest, -2 earliest (log start), -3 max timestamp, -4 earliest local,
        -5 latest tiered; other values find the first record with timestamp >= it.
        """
        epoch_for = self.leader_epoch_cache.epoch_for_offset
        if timestamp == LATEST_TIMESTAMP:
            end = self._log_end_offset
            return TimestampAndOffset(-1, end, self.leader_epoch_cache.latest_epoch)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset, epoch_for(self.log_start_offset))
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            start = self.local_log_start_offset
            return TimestampAndOffset(-1, start, epoch_for(start))
        if timestamp == LATEST_TIERED_TIMESTAMP:
            off = self.highest_offset_in_remote_storage
            return TimestampAndOffset(-1, off, epoch_for(off) if off >= 0 else None)
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_record()
        if timestamp < 0:
            return None  # a special value this log does not answer (e.g. -6, remote tier)
        for segment in self.segments():
            if segment.largest_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return TimestampAndOffset(found[0], found[1], epoch_for(found[1]))
        return None

    @property
    def max_timestamp_so_far(self) -> int:
        """The largest batch max timestamp of the local segments, -1 when none has one.

        Read from each segment's tracked maximum: no I/O once the segments are loaded.
        """
        return max((s.max_timestamp_so_far.timestamp for s in self.segments()), default=-1)

    def _max_timestamp_record(self) -> TimestampAndOffset | None:
        """ListOffsets -3 (KIP-734, as Kafka answers it since KAFKA-16310): the first record
        carrying the largest timestamp of the local log, with that timestamp and its batch's
        leader epoch. The segment holding it is found from each segment's tracked maximum
        (the earliest on ties); only the one batch holding the record is decoded.
        """
        best = None
        for segment in self.segments():
            ts = segment.max_timestamp_so_far.timestamp
            if ts >= 0 and (best is None or ts > best.max_timestamp_so_far.timestamp):
                best = segment
        found = best.max_timestamp_record() if best is not None else None
        if found is None:
            return None
        ts, offset, epoch = found
        return TimestampAndOffset(ts, offset, epoch if epoch >= 0 else None)

    # -- log start, truncation, retention ---------------------------------------------------
    def update_high_watermark(self, offset: int) -> int:
        with self.lock:
            self.high_watermark = self._clamp(offset)
            self.producer_state.on_high_watermark_updated(self.high_watermark)
            return self.high_watermark

    def maybe_increment_log_start_offset(self, new_start: int, reason: str) -> bool:
        """Move the log start offset forward (DeleteRecords, retention); never backward.

        Raises:
            OffsetOutOfRangeError: ``new_start`` above the high watermark.
        """
        with self.lock:
            if new_start > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move log start offset of {self.topic}-{self.partition} to "
                    f"{new_start}: above the high watermark {self.high_watermark}"
                )
            if new_start <= self.log_start_offset:
                return False
            log.info(
                "%s: log start offset %d -> %d (%s)",
                self.dir,
                self.log_start_offset,
                new_start,
                reason,
            )
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self.producer_state.on_log_start_offset_incremented(new_start)
            self.recovery_point = max(self.recovery_point, min(new_start, self._log_end_offset))
            return True

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every offset >= ``target_offset`` (a follower after a leader change).

        Kafka's UnifiedLog.truncateTo. Everything kept alongside the segments follows: the
        leader-epoch cache loses the epochs starting at or after the new log end offset
        (``truncate_from_end``), producer state is rebuilt from the newest snapshot at or
        below it plus a replay (later snapshots are deleted), the transaction, offset and
        time indexes drop their entries at or above it, and the high watermark, recovery
        point and log start offset are lowered to it if above. A target below the first
        segment's base offset empties the log and restarts it there
        (``truncate_fully_and_start_at``).

        Truncation works on whole batches. A target inside a batch removes that whole batch,
        so the log end offset becomes the batch's base offset, below the target (Kafka would
        set the log end offset to the target itself, which no batch ends at). Followers
        truncate to offsets that are batch boundaries on the leader's lineage (epoch end
        offsets, log end offsets, high watermarks), so this is defensive only.

        With ``target_offset`` at or above the log end offset no data is removed, but, as
        in Kafka, the epoch cache still drops entries starting at or after the log end
        offset: a replica that became leader (assigning its epoch at its log end offset) and
        lost leadership before appending keeps no claim on offsets it never wrote.

        Args:
            target_offset: the new log end offset, >= 0.

        Returns:
            True if any batch was removed.

        Raises:
            ValueError: a negative ``target_offset``.
            KafkaStorageError: a file could not be truncated, deleted or written.
        """
        if target_offset < 0:
            raise ValueError(f"cannot truncate to negative offset {target_offset}")
        with self.lock:
            if target_offset >= self._log_end_offset:
                self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
                self._latest_epoch = None
                return False
            if target_offset < self.local_log_start_offset:
                # A tiered log keeps what it knows of the remote history below the target:
                # its log start offset and the epochs there (the lineage a leader serves
                # remote reads and copies by). The producer state restarts empty, as in
                # any full truncation.
                keep_start = self.config.remote_storage_enable and (
                    self.log_start_offset <= target_offset
                )
                start, epochs = self.log_start_offset, self.leader_epoch_cache.entries()
                self._truncate_fully_and_start_at(target_offset)
                if keep_start:
                    self.log_start_offset = start
                    for entry in epochs:
                        if entry.start_offset < target_offset:
                            self.leader_epoch_cache.assign(entry.epoch, entry.start_offset)
                return True
            log.info("%s: truncating to offset %d", self.dir, target_offset)
            self._truncations += 1
            doomed = [s for s in self._segments[1:] if s.base_offset >= target_offset]
            for segment in doomed:
                self._remove_segment(segment, asynchronous=True)
            active = self.active_segment
            active.truncate_to(target_offset)
            if active.size == 0:
                active.created_ms = self.clock()  # segment.ms counts from now again
            self._log_end_offset = active.read_next_offset()
            self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
            self._latest_epoch = None  # re-read from the cache at the next append
            self.log_start_offset = min(self.log_start_offset, self._log_end_offset)
            self.recovery_point = min(self.recovery_point, self._log_end_offset)
            self.high_watermark = min(self.high_watermark, self._log_end_offset)
            self._rebuild_producer_state()
            # Replay re-opened the bound of every transaction it completed; those whose
            # marker is below the high watermark must not hold the LSO back.
            self.producer_state.on_high_watermark_updated(self.high_watermark)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log empty at ``new_offset``.

        Kafka's truncateFullyAndStartAt (a follower whose fetch offset is out of the
        leader's range): the log start offset, log end offset, high watermark and recovery
        point all become ``new_offset``; the leader-epoch cache and producer state (and
        every producer snapshot) are cleared.

        Raises:
            ValueError: a negative ``new_offset``.
            KafkaStorageError: a file could not be deleted or created.
        """
        if new_offset < 0:
            raise ValueError(f"cannot restart the log at negative offset {new_offset}")
        with self.lock:
            self._truncate_fully_and_start_at(new_offset)

    def restore_from_remote(
        self,
        next_offset: int,
        log_start_offset: int,
        epochs: Iterable[EpochEntry],
        producer_snapshot: bytes,
    ) -> None:
        """Restart a follower's log empty at ``next_offset`` with the state the remote tier
        holds for the offsets below it (Kafka's BuildingRemoteLogAux state of a tiered
        partition): the log start offset becomes the leader's (``log_start_offset``, the
        earlier offsets are served from the remote tier), the leader-epoch cache the remote
        segment's checkpoint, and the producer state the remote segment's snapshot, written
        as this log's snapshot at ``next_offset``. No record is copied.

        Raises:
            ValueError: a negative offset, or ``log_start_offset`` above ``next_offset``.
            KafkaStorageError: a file could not be deleted or written.
            CorruptSnapshotError: the producer snapshot cannot be decoded.
        """
        if next_offset < 0 or not 0 <= log_start_offset <= next_offset:
            raise ValueError(
                f"cannot restore the log at {next_offset} with log start {log_start_offset}"
            )
        with self.lock:
            self._truncate_fully_and_start_at(next_offset)
            self.log_start_offset = log_start_offset
            for entry in epochs:
                if entry.start_offset < next_offset:
                    self.leader_epoch_cache.assign(entry.epoch, entry.start_offset)
            self.leader_epoch_cache.truncate_from_start(log_start_offset)
            self._latest_epoch = self.leader_epoch_cache.latest_epoch
            try:
                atomic_write(snapshot_path(self.dir, next_offset), producer_snapshot)
            except OSError as e:
                raise KafkaStorageError(f"{self.dir}: cannot write the producer snapshot") from e
            # Loading keeps only snapshots above the log start: pass the offset just below
            # the snapshot, whatever the log start, so that it is the one loaded.
            self.producer_state.load(next_offset - 1, next_offset, now_ms=self.clock())
            self.producer_state.update_map_end_offset(next_offset)

    def _truncate_fully_and_start_at(self, new_offset: int) -> None:
        log.info("%s: truncating fully and starting at offset %d", self.dir, new_offset)
        self._truncations += 1
        for segment in list(self._segments):
            self._remove_segment(segment, asynchronous=True)
        self._add_segment(LogSegment(self.dir, new_offset, self.config, created_ms=self.clock()))
        self._log_end_offset = new_offset
        self.log_start_offset = new_offset
        self.recovery_point = new_offset
        self.high_watermark = new_offset
        self.leader_epoch_cache.clear_and_flush()
        self._latest_epoch = None
        self.producer_state.truncate_fully_and_start_at(new_offset)

    def _remove_segment(self, segment: LogSegment, *, asynchronous: bool) -> None:
        i = self._segments.index(segment)
        del self._segments[i]
        del self._bases[i]
        self._publish()
        segment.change_file_suffixes("", DELETED_SUFFIX)
        if asynchronous:
            self._delete_later(segment)
        else:
            segment.delete_if_exists()

    def _delete_later(self, segment: LogSegment) -> None:
        """Delete a segment's ``.deleted`` files after ``file.delete.delay.ms`` (Kafka's
        asynchronous delete, so readers holding the segment finish first); at once when
        there is no scheduler, or when it has stopped (retention running into the broker's
        shutdown: a crash before the deletion leaves only ``.deleted`` files, which
        start-up removes)."""
        if self.scheduler is not None:
            try:
                self.scheduler.schedule_once(
                    "delete-file", segment.delete_if_exists, self.config.file_delete_delay_ms
                )
                return
            except SchedulerStoppedError:
                pass
        segment.delete_if_exists()

    def deletable_segments(self, now: int | None = None) -> list[LogSegment]:
        """Segments retention may delete now, oldest first; never the active segment.

        With tiering on, local retention applies (``local.retention.*``) and only segments
        wholly in remote storage qualify; otherwise ``retention.*`` and the log start offset.
        A compacted topic without ``delete`` in its cleanup.policy has no time or size
        retention (Kafka's rule): only the log start offset (DeleteRecords) deletes.
        """
        now = self.clock() if now is None else now
        cfg = self.config
        tiered = cfg.remote_storage_enable
        retention_ms = cfg.effective_local_retention_ms if tiered else cfg.retention_ms
        retention_bytes = cfg.effective_local_retention_bytes if tiered else cfg.retention_bytes
        if not cfg.delete:
            retention_ms = retention_bytes = -1
        with self.lock:
            segments = list(self._segments)
            high_watermark = self.high_watermark
        out: list[LogSegment] = []
        excess = sum(s.size for s in segments) - retention_bytes if retention_bytes >= 0 else 0
        for segment, nxt in itertools.pairwise(segments):
            if nxt.base_offset > high_watermark:
                break  # never delete what consumers cannot read yet
            if tiered and nxt.base_offset - 1 > self.highest_offset_in_remote_storage:
                break  # not yet wholly in remote storage: local data is the only copy
            by_start = not tiered and nxt.base_offset <= self.log_start_offset
            by_time = retention_ms >= 0 and now - segment.largest_timestamp > retention_ms
            by_size = retention_bytes >= 0 and excess >= segment.size
            if not (by_start or by_time or by_size):
                break
            excess -= segment.size
            out.append(segment)
        return out

    def active_producers(self) -> list[ProducerStateEntry]:
        """The state of every producer the partition remembers, by producer id (Kafka's
        activeProducers, for DescribeProducers); under the log's lock, as expiration
        changes it from the scheduler's threads."""
        with self.lock:
            producers = self.producer_state.active_producers
        return [producers[pid] for pid in sorted(producers)]

    def remove_expired_producers(self, now: int | None = None) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` without an open
        transaction (Kafka's removeExpiredProducers); returns how many were dropped."""
        with self.lock:
            now_ms = self.clock() if now is None else now
            return len(self.producer_state.remove_expired_producers(now_ms))

    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention; returns the number of segments deleted (renamed, then removed)."""
        stale_snapshots: list[Path] = []
        with self.lock:
            doomed = self.deletable_segments(now)
            for segment in doomed:
                self._remove_segment(segment, asynchronous=True)
            if doomed:
                new_start = self._segments[0].base_offset
                if not self.config.remote_storage_enable:
                    self.log_start_offset = max(self.log_start_offset, new_start)
                    self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
                    self.producer_state.on_log_start_offset_incremented(self.log_start_offset)
                stale_snapshots = self.producer_state.forget_snapshots_below(new_start)
                log.info(
                    "%s: retention deleted %d segments; local log starts at %d",
                    self.dir,
                    len(doomed),
                    new_start,
                )
        # Outside the lock: appends need not wait for the unlinks (retention may run on the
        # tiering copier's thread right after a copy, while producers append).
        delete_snapshot_files(stale_snapshots)
        return len(doomed)

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment]) -> bool:
        """Swap the cleaner's ``cleaned`` segment (files suffixed ``.cleaned``, complete and
        fsynced) in for the adjacent segments ``old`` (Kafka's replaceSegments).

        Crash-safe: the cleaned files become ``.swap`` (indexes first, then the log), the old
        ones ``.deleted``, then the swap files take their final names; a restart completes a
        swap from any point (``_complete_swaps``). The old segments' files are removed after
        ``file.delete.delay.ms`` so that reads in flight finish.

        Returns:
            False, changing nothing, if ``old`` are no longer all in the log (retention,
            truncation or deletion got there first) or the active segment is among them.
        """
        with self.lock:
            if self._closed or not old:
                return False
            try:
                first = self._segments.index(old[0])
            except ValueError:
                return False
            if self._segments[first : first + len(old)] != old or first + len(old) >= len(
                self._segments
            ):
                return False
            for index in (cleaned.offset_index, cleaned.time_index, cleaned.txn_index):
                index.rename_to(_without(index.path, CLEANED_SUFFIX, SWAP_SUFFIX))
            cleaned.log.rename_to(_without(cleaned.log.path, CLEANED_SUFFIX, SWAP_SUFFIX))
            fsync_dir(self.dir)
            for segment in old:
                segment.change_file_suffixes("", DELETED_SUFFIX)
            cleaned.change_file_suffixes(SWAP_SUFFIX, "")
            fsync_dir(self.dir)
            self._segments[first : first + len(old)] = [cleaned]
            self._bases = [s.base_offset for s in self._segments]
            self._publish()
        for segment in old:
            self._delete_later(segment)
        return True

    def update_config(self, config: LogConfig) -> None:
        with self.lock:
            self.config = config

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Flush, snapshot producer state at the log end and close every file."""
        with self.lock:
            if self._closed:
                return
            self.flush()
            self.producer_state.take_snapshot()
            for segment in self._segments:
                segment.close()
            self._closed = True

    def delete(self) -> None:
        """Close and remove the partition: the directory is renamed, then deleted."""
        with self.lock:
            for segment in self._segments:
                segment.close()
            self._closed = True
            doomed = self.dir.with_name(deleted_dir_name(self.dir.name, uuid.uuid4().hex))
            self.dir.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )
