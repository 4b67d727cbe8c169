"""A log segment: the ``.log`` file with its offset, time and transaction indexes."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from core.errors import CoreError, CorruptRecordError
from core.log.config import LogConfig
from core.log.file_records import SCAN_CHUNK_BYTES, FileRecords, FileSlice
from core.log.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from core.log.offset_index import OffsetIndex
from core.log.recovery_walk import new_walk
from core.log.time_index import TimeIndex, TimestampOffset
from core.log.txn_index import AbortedTxn, TransactionIndex
from core.records.batch import LENGTH_POS, LOG_OVERHEAD, NO_TIMESTAMP, RecordBatchHeader
from core.records.record import decode_records

log = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1
_TIME_ENTRY = struct.Struct(">qi")  # the time index's entry: timestamp, relative offset
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset and, when known, where it is: segment base offset and byte position."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position: int = -1

    @property
    def on_segment(self) -> bool:
        return self.segment_base_offset >= 0


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """What a read returns: where it started and the bytes to send (None when empty).

    ``records`` may end with a partial batch, as in Kafka; clients drop the partial tail.
    """

    fetch_offset_metadata: LogOffsetMetadata
    records: FileSlice | None
    first_entry_incomplete: bool = False
    aborted_transactions: tuple[AbortedTxn, ...] | None = None

    @property
    def size(self) -> int:
        return 0 if self.records is None else self.records.size


class AppendedBatch(NamedTuple):
    """One batch of an append: where it lies in the appended bytes and what it holds."""

    position: int  # within the appended bytes
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


class SegmentRecovery(NamedTuple):
    """What ``LogSegment.recover`` found."""

    truncated_bytes: int  # cut from the end of the log: the first invalid batch and after
    producer_batch_positions: list[int]  # of the valid batches with a producer id, in order


class LogSegment:
    """One segment: appends batches and keeps the sparse indexes up to date.

    Index entries map a batch's last offset (or max timestamp) to the batch's byte position,
    one entry each time more than ``index.interval.bytes`` were appended since the last.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        created_ms: int,
        file_suffix: str = "",
        create: bool = True,
    ) -> None:
        self.base_offset = base_offset
        self.directory = directory
        self.index_interval_bytes = config.index_interval_bytes
        # Kafka draws each segment's jitter so that partitions do not all roll at once.
        jitter = min(config.segment_jitter_ms, config.segment_ms)
        self.rolling_jitter_ms = random.randrange(jitter) if jitter > 0 else 0
        self.created_ms = created_ms
        self.log = FileRecords(
            segment_file(directory, base_offset, LOG_SUFFIX, file_suffix), create=create
        )
        # The offset and time indexes are opened on first use (Kafka's LazyIndex): a restart
        # then costs nothing per segment behind the recovery point but opening its .log.
        # A new segment creates (preallocates) them at once.
        self._index_bytes = config.segment_index_bytes
        self._offset_index_path = segment_file(directory, base_offset, INDEX_SUFFIX, file_suffix)
        self._time_index_path = segment_file(directory, base_offset, TIME_INDEX_SUFFIX, file_suffix)
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._index_lock = threading.Lock()
        # Set by the loader for segments it does not recover: their indexes are checked
        # when first opened, and rebuilt from the log if found corrupt.
        self.verify_indexes_on_open = False
        self._indexes_closed = False  # closed or deleted: never (re)create the files
        self.txn_index = TransactionIndex(
            segment_file(directory, base_offset, TXN_INDEX_SUFFIX, file_suffix), base_offset
        )
        self._bytes_since_last_index_entry = 0
        # The largest batch max timestamp and the last offset of its batch, as a plain
        # (timestamp, offset) tuple: one attribute, so readers on other threads never see
        # half of an update, and cheap to build for the compiled append, which replaces it
        # on every append that raises it (a TimestampOffset costs far more). None: not known
        # yet, read from the time index on first use.
        self._max_ts: tuple[int, int] | None = None
        self._rolling_based_timestamp: int | None = None
        if create:
            self._open_indexes()

    # -- indexes (opened lazily) ---------------------------------------------------------
    @property
    def offset_index(self) -> OffsetIndex:
        index = self._offset_index
        return index if index is not None else self._open_indexes()[0]

    @property
    def time_index(self) -> TimeIndex:
        index = self._time_index
        return index if index is not None else self._open_indexes()[1]

    @property
    def indexes_open(self) -> bool:
        """Whether the offset and time indexes have been opened (they open on first use)."""
        return self._offset_index is not None

    def _open_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        with self._index_lock:
            if self._offset_index is not None and self._time_index is not None:
                return self._offset_index, self._time_index
            if self._indexes_closed:
                raise ValueError(f"the indexes of segment {self.base_offset} are closed")
            # An existing file keeps its (trimmed) size: only the active segment needs
            # room, and the log grows its indexes with ``resize_indexes``.
            offset_index = OffsetIndex(
                self._offset_index_path, self.base_offset, self._index_bytes, grow=False
            )
            time_index = TimeIndex(
                self._time_index_path, self.base_offset, self._index_bytes, grow=False
            )
            if self.verify_indexes_on_open:
                try:
                    offset_index.sanity_check()
                    time_index.sanity_check()
                except CoreError as e:
                    log.warning(
                        "%s: rebuilding the indexes of segment %d on first use: %s",
                        self.directory,
                        self.base_offset,
                        e,
                    )
                    self._rebuild_indexes(offset_index, time_index)
            # The time index first: a reader that sees the offset index sees both.
            self._time_index = time_index
            self._offset_index = offset_index
            return offset_index, time_index

    def _rebuild_indexes(self, offset_index: OffsetIndex, time_index: TimeIndex) -> None:
        """Rebuild both indexes from the batch headers of the log (Kafka rebuilds a corrupt
        index from its segment). The log itself is not touched: a segment behind the
        recovery point was flushed whole."""
        for index in (offset_index, time_index):
            index.reset()
        self._max_ts = (-1, self.base_offset)
        self._bytes_since_last_index_entry = 0
        batches = [
            AppendedBatch(
                position, header.base_offset, header.last_offset, header.max_timestamp, size
            )
            for position, header in self.log.batch_headers()
            if (size := header.size_in_bytes) > 0
        ]
        self._index_batches(0, batches, offset_index, time_index)
        max_ts, max_ts_offset = self._max_ts
        if max_ts >= 0:
            time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        offset_index.trim_to_valid_size()
        time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        """Give the indexes room to grow (the active segment's, after loading)."""
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # -- state ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.log.size

    @property
    def max_timestamp_so_far(self) -> TimestampOffset:
        """The largest batch max timestamp in the segment and the last offset of its batch."""
        max_ts = self._max_ts
        if max_ts is None:
            last = self.time_index.last_entry
            max_ts = self._max_ts = (last.timestamp, last.offset)
        return TimestampOffset(*max_ts)

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime when none (Kafka's rule)."""
        ts = self.max_timestamp_so_far.timestamp
        if ts >= 0:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log.path).st_mtime * 1000)

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def should_roll(
        self,
        *,
        messages_size: int,
        max_timestamp: int,
        max_offset: int,
        now_ms: int,
        config: LogConfig,
    ) -> bool:
        """Kafka's roll rule: size, age, a full index, or an offset the indexes cannot hold."""
        size = self.log.size
        # Cheapest tests first: this runs on every append.
        if (
            size > config.segment_bytes - messages_size
            or not 0 <= max_offset - self.base_offset <= INT32_MAX
            or self.offset_index.is_full()
            or self.time_index.is_full()
        ):
            return True
        return (
            size > 0
            and self.time_waited_for_roll(now_ms, max_timestamp)
            > config.segment_ms - self.rolling_jitter_ms
        )

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        self._load_rolling_based_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def _load_rolling_based_timestamp(self) -> None:
        """segment.ms counts from the first batch's max timestamp: read it once."""
        if self._rolling_based_timestamp is None and self.size > 0:
            first = next(self.log.batch_headers(0), None)
            if first is not None:
                self._rolling_based_timestamp = first[1].max_timestamp

    # -- writes --------------------------------------------------------------------------
    def load_append_state(self) -> None:
        """Open the indexes and load the max and rolling timestamps: the state the compiled
        append (core/log/_active_segment.pyx) reads but does not load (it leaves a segment
        without them to the Python path)."""
        _ = self.max_timestamp_so_far  # opens the indexes on the way
        self._load_rolling_based_timestamp()

    def append(
        self, data: bytes | bytearray | memoryview, batches: Sequence[AppendedBatch]
    ) -> None:
        """Append whole batches and index them. ``batches`` describes ``data`` in order.

        Raises:
            KafkaStorageError: the write failed; the segment then holds only whole batches
                written before the failure is reported.
        """
        if not batches:
            return
        last_offset = batches[-1][2]
        if not 0 <= last_offset - self.base_offset <= INT32_MAX:
            raise CorruptRecordError(
                f"offset {last_offset} cannot be stored in segment "
                f"{self.base_offset}: relative offset overflow"
            )
        start = self.log.append(data)
        if start == 0 and batches[0][3] != NO_TIMESTAMP:
            self._rolling_based_timestamp = batches[0][3]
        self._index_batches(start, batches)

    def _index_batches(
        self,
        start: int,
        batches: Sequence[AppendedBatch],
        offset_index: OffsetIndex | None = None,
        time_index: TimeIndex | None = None,
    ) -> None:
        """Track the max timestamp and add index entries every ``index.interval.bytes``."""
        if offset_index is None:
            offset_index = self.offset_index
        if time_index is None:
            time_index = self.time_index
        current = self.max_timestamp_so_far
        max_ts, max_ts_offset = current.timestamp, current.offset
        since = self._bytes_since_last_index_entry
        interval = self.index_interval_bytes
        for position, _, last_offset, batch_max_ts, size in batches:
            if batch_max_ts > max_ts:
                max_ts, max_ts_offset = batch_max_ts, last_offset
            if since > interval:
                offset_index.append(last_offset, start + position)
                if max_ts > time_index.last_timestamp:
                    time_index.maybe_append(max_ts, max_ts_offset)
                since = 0
            since += size
        self._bytes_since_last_index_entry = since
        if max_ts != current.timestamp:
            self._max_ts = (max_ts, max_ts_offset)

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self.txn_index.append(txn)

    def flush(self) -> None:
        self.log.flush()
        if self._offset_index is not None and self._time_index is not None:
            self._offset_index.flush()
            self._time_index.flush()
        self.txn_index.flush()

    # -- reads ---------------------------------------------------------------------------
    def translate_offset(
        self, offset: int, starting_position: int = 0
    ) -> tuple[int, int, int] | None:
        """``(position, last offset, size)`` of the first batch whose last offset >= offset.

        Starts from the offset index entry at or below ``offset``; None when the segment
        holds nothing at or above ``offset``.
        """
        entry = self.offset_index.lookup(offset)
        return self.log.search_for_offset(offset, max(entry.position, starting_position))

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchDataInfo | None:
        """A slice from the batch holding ``start_offset``; None if past the segment's end.

        Args:
            start_offset: the first offset wanted (the slice starts at its batch).
            max_size: bytes wanted; the slice may end inside a batch, as Kafka's does.
            max_position: bytes at or past this position are not returned (high watermark).
            min_one_message: return at least the first batch even if larger than max_size.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a read from segment")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, _, first_size = found
        metadata = LogOffsetMetadata(start_offset, self.base_offset, position)
        limit = self.size if max_position is None else min(max_position, self.size)
        if position >= limit:
            return FetchDataInfo(metadata, None)
        adjusted = max(max_size, first_size) if min_one_message else max_size
        if adjusted == 0:
            return FetchDataInfo(metadata, None)
        size = min(limit - position, adjusted)
        return FetchDataInfo(
            metadata, FileSlice(self.log, position, size), first_entry_incomplete=size < first_size
        )

    def read_next_offset(self) -> int:
        """The offset after the last batch in the segment (its base offset when empty)."""
        last = self.offset_index.lookup(2**63 - 1)
        next_offset = self.base_offset
        for _, header in self.log.batch_headers(last.position):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record at or after ``timestamp``.

        Only records at or after ``starting_offset`` count; None if no record qualifies.
        """
        ts_entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_entry.offset, starting_offset)).position
        for pos, header in self.log.batch_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            batch = RecordBatchHeader(self.log.read(pos, header.size_in_bytes))
            for record in decode_records(batch):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return record.timestamp, record.offset
        return None

    def max_timestamp_record(self) -> tuple[int, int, int] | None:
        """``(timestamp, offset, batch leader epoch)`` of the first record carrying the
        segment's largest timestamp; None when no batch has a timestamp.

        The segment tracks its max timestamp with the last offset of the first batch that
        reached it (the time index's format); the record's own offset needs that one batch
        decoded (Kafka since KAFKA-16310). Under LogAppendTime every record of a batch
        carries the batch's time, so the answer is the batch's first offset.
        """
        ts = self.max_timestamp_so_far
        if ts.timestamp < 0:
            return None
        position = self.offset_index.lookup(ts.offset).position
        for pos, header in self.log.batch_headers(position):
            if header.max_timestamp != ts.timestamp:
                continue
            batch = RecordBatchHeader(self.log.read(pos, header.size_in_bytes))
            for record in decode_records(batch):
                if record.timestamp == ts.timestamp:
                    return record.timestamp, record.offset, batch.partition_leader_epoch
            return None  # the header promised a record it does not hold: a corrupt batch
        return None

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int):
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # -- recovery and truncation ------------------------------------------------------------
    def sanity_check(self) -> None:
        """Raise CorruptIndexError if an index is inconsistent with the segment."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def recover(
        self,
        max_message_size: int | None,
        on_epoch: Callable[[int, int], None] | None = None,
        buffer: bytearray | None = None,
    ) -> SegmentRecovery:
        """Rebuild the indexes from the log and drop everything from the first bad batch.

        Every batch is fully validated (framing, magic, CRC, offsets within the segment) by
        the walk of ``core.log.recovery_walk``, compiled when built.
        ``on_epoch(epoch, base offset)`` sees, in order, the leader epoch of the first valid
        batch and of every valid batch whose epoch differs from the previous batch's.
        ``max_message_size`` bounds batch sizes if not None; the partition log passes None,
        as Kafka's recovery has no bound: a follower stores batches above its own
        ``max.message.bytes``, and the setting may shrink after data was written.

        ``buffer``: where to read the file's chunks (``SCAN_CHUNK_BYTES`` is enough); a
        caller recovering several segments passes one, as new memory is slow to fault in.

        Returns:
            The bytes truncated from the end of the log, and where the batches with a
            producer id are (the producer-state replay that follows reads only those).
        """
        self.verify_indexes_on_open = False  # rebuilt below: no need to check them
        # The entries are collected in memory and each index file is written once at the
        # end, at its exact size: through a fresh 10 MiB mmap, every entry written to a new
        # page of a sparse file costs a page fault and a block allocation (most of the
        # time recovery took). The rules are those of ``_index_batches``.
        with self._index_lock:
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.close()
            self._offset_index = self._time_index = None
            if self._indexes_closed:
                raise ValueError(f"the indexes of segment {self.base_offset} are closed")
        self.txn_index.reset()
        self._rolling_based_timestamp = None
        base = self.base_offset
        walk = new_walk(base, self.index_interval_bytes, max_message_size, self.log.path)
        end = self.log.size
        # One buffer for every chunk: a new 8 MiB bytes object per read costs page faults.
        chunk = buffer if buffer is not None else bytearray(min(SCAN_CHUNK_BYTES, max(end, 1)))
        position = 0
        try:
            while position < end:
                length = self.log.read_into(chunk, position, end - position)
                consumed = walk.feed(chunk, length, position, end)
                if consumed == 0:
                    # A batch larger than the buffer (its length field was read: the walk
                    # refuses a tail too short to hold one): grow the buffer to hold it.
                    chunk = bytearray(_I32.unpack_from(chunk, LENGTH_POS)[0] + LOG_OVERHEAD)
                position += consumed
        except CoreError as e:
            log.warning(
                "found invalid data in %s, truncating to %d bytes: %s",
                self.log.path,
                walk.valid_bytes,
                e,
            )
        del chunk
        truncated = self.log.truncate_to(walk.valid_bytes)
        max_ts, max_ts_offset = walk.max_timestamp, walk.max_timestamp_offset
        time_entries = walk.time_entries
        if max_ts >= 0 and max_ts > walk.last_entry_timestamp:
            time_entries += _TIME_ENTRY.pack(max_ts, max_ts_offset - base)  # as at a roll
        self._offset_index_path.write_bytes(walk.offset_entries)
        self._time_index_path.write_bytes(time_entries)
        self._max_ts = (max_ts, max_ts_offset)
        self._bytes_since_last_index_entry = walk.bytes_since_last_entry
        self._open_indexes()
        if on_epoch is not None:
            for epoch, start in walk.epochs:
                on_epoch(epoch, start)
        return SegmentRecovery(truncated, walk.producer_positions)

    def truncate_to(self, offset: int) -> int:
        """Remove the batches holding offsets >= ``offset``; returns the bytes removed.

        As in Kafka, a batch straddling ``offset`` goes whole: truncation points are batch
        boundaries in practice (leader-epoch end offsets, recovery points).

        The segment may become the active one again (a follower truncating across a roll):
        its indexes, trimmed when it rolled, get back their full size, as in Kafka, or the
        next append would find them full and roll at once.
        """
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.log.truncate_to(position)
        self._bytes_since_last_index_entry = 0
        # Recompute the max timestamp from what remains (the indexes no longer know it).
        max_ts, max_ts_offset = -1, self.base_offset
        for _, h in self.log.batch_headers(0):
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.last_offset
        self._max_ts = (max_ts, max_ts_offset)
        if self.size == 0:
            self._rolling_based_timestamp = None
        return removed

    def on_becoming_inactive(self) -> None:
        """Called at roll: write the final time-index entry and trim the indexes."""
        ts = self.max_timestamp_so_far
        if ts.timestamp >= 0:
            self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._index_lock:
            offset_index, time_index = self._offset_index, self._time_index
            self._indexes_closed = True
        if offset_index is not None and time_index is not None:
            ts = self.max_timestamp_so_far
            if ts.timestamp >= 0:
                time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
            offset_index.close()
            time_index.close()
        self.txn_index.close()
        self.log.close()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename all files of the segment, e.g. to ``.deleted`` before async removal."""

        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and name.endswith(old_suffix):
                name = name[: -len(old_suffix)]
            return path.with_name(name + new_suffix)

        self.log.rename_to(renamed(self.log.path))
        with self._index_lock:
            if self._offset_index is not None and self._time_index is not None:
                self._offset_index.rename_to(renamed(self._offset_index.path))
                self._time_index.rename_to(renamed(self._time_index.path))
            else:  # never opened: rename the files where they are
                for path in (self._offset_index_path, self._time_index_path):
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(path, renamed(path))
            self._offset_index_path = renamed(self._offset_index_path)
            self._time_index_path = renamed(self._time_index_path)
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def delete_if_exists(self) -> None:
        self.log.delete_if_exists()
        with self._index_lock:
            if self._offset_index is not None and self._time_index is not None:
                self._offset_index.delete_if_exists()
                self._time_index.delete_if_exists()
            else:
                self._offset_index_path.unlink(missing_ok=True)
                self._time_index_path.unlink(missing_ok=True)
            self._indexes_closed = True
        self.txn_index.delete_if_exists()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
