"""Log compaction: the cleaner keeps the latest record of every key of a compacted log.

As Kafka's LogCleaner does for topics with ``cleanup.policy=compact`` (``__consumer_offsets``
among them), in two passes over the inactive part of the log:

1. Build an :class:`OffsetMap` over the *dirty* section, ``[first dirty offset, first
   uncleanable offset)``: for every key, the offset of its latest record there. The first
   dirty offset comes from ``cleaner-offset-checkpoint`` (one per log dir, Kafka's file and
   format); the first uncleanable offset is the lowest of the active segment's base offset
   (the active segment is never touched), the last stable offset and the first segment
   younger than ``min.compaction.lag.ms``.
2. Rewrite the segments from the log start up to where the map ends, a group of adjacent
   segments at a time (a group fits in ``segment.bytes``), into a ``.cleaned`` segment that
   keeps a record only if no later record of its key is in the map. The cleaned segment
   replaces the group through Kafka's ``.swap`` protocol (``PartitionLog.replace_segments``)
   so that a crash at any point leaves either the old or the new files.

Tombstones (null values) and delete horizons follow KIP-534: the first cleaning that keeps a
tombstone writes its batch with ``delete horizon = now + delete.retention.ms`` (the batch's
base timestamp, attribute bit 6); a later cleaning after that horizon drops the tombstone.
Consumers that read the log at least every ``delete.retention.ms`` therefore see every
delete. Records of aborted transactions are dropped; control batches are kept. Batch offset
ranges, producer ids, epochs and sequence numbers are kept, so a batch whose records were
all removed is kept empty when it is its producer's last batch (producer state survives).
Records without a key cannot be compacted and are dropped, as Kafka does.

A log is cleaned when its dirty ratio (dirty bytes / cleanable bytes) reaches
``min.cleanable.dirty.ratio``, when its oldest dirty record is older than
``max.compaction.lag.ms``, or when a delete horizon it wrote has passed. Reads and writes of
the cleaner are throttled to ``log.cleaner.io.max.bytes.per.second``.

Threading: ``log.cleaner.threads`` daemon threads each clean one log at a time; a log is
never cleaned by two threads at once, and ``pause``/``resume`` let the log manager delete or
truncate a log while no cleaning runs on it.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from core.clock import now_ms
from core.errors import CoreError
from core.log.checkpoints import OffsetCheckpointFile
from core.log.files import CLEANED_SUFFIX
from core.log.partition_log import PartitionLog
from core.log.segment import AppendedBatch, LogSegment
from core.log.txn_index import AbortedTxn
from core.records.batch import RecordBatchHeader, TimestampType
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
DOUBLE_MAX = 1.7976931348623157e308
# Memory one map entry costs in CPython (16-byte digest object, int, dict slot); Kafka counts
# 24 bytes per entry in its off-heap map. log.cleaner.dedupe.buffer.size bounds real memory.
MAP_ENTRY_BYTES = 120
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-level cleaner settings (Kafka's ``log.cleaner.*`` keys and defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    io_max_bytes_per_second: float = DOUBLE_MAX
    backoff_ms: int = 15_000


class CleanerAbortedError(CoreError):
    """A cleaning was aborted (the log is being deleted, truncated or shut down)."""


@dataclass(slots=True)
class CleanerStats:
    """What one cleaning did; logged, and returned to tests."""

    topic: str = ""
    partition: int = -1
    first_dirty_offset: int = 0
    end_offset: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_dropped: int = 0
    segments_cleaned: int = 0
    segments_written: int = 0
    elapsed_s: float = 0.0


class OffsetMap:
    """Key -> offset of its latest record, bounded in memory (Kafka's SkimpyOffsetMap).

    Keys are kept as their MD5 digest, as in Kafka, so a long key costs no more than a short
    one. ``capacity`` entries at most; :attr:`full` tells when to stop adding.
    """

    def __init__(self, memory_bytes: int) -> None:
        self.capacity = max(1, memory_bytes // MAP_ENTRY_BYTES)
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    @staticmethod
    def _digest(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def put(self, key: bytes, offset: int) -> None:
        self._map[self._digest(key)] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 when the map does not hold it."""
        return self._map.get(self._digest(key), -1)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.capacity

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1


class Throttler:
    """Keeps a byte rate under ``max_per_second`` by waiting (on ``stop``, so shutdown is
    prompt). Thread-safe: the cleaner threads share one budget, as Kafka's do."""

    def __init__(self, max_per_second: float, stop: threading.Event) -> None:
        self.max_per_second = max_per_second
        self._stop = stop
        self._lock = threading.Lock()
        self._period_start = time.monotonic()
        self._observed = 0.0

    def maybe_throttle(self, amount: int) -> None:
        if self.max_per_second >= DOUBLE_MAX:
            return
        with self._lock:
            self._observed += amount
            now = time.monotonic()
            elapsed = now - self._period_start
            wait = self._observed / self.max_per_second - elapsed
            if elapsed > 1.0 and wait <= 0:
                self._period_start, self._observed = now, 0.0
        if wait > 0:
            self._stop.wait(wait)


@dataclass(slots=True)
class _LogState:
    """In-memory cleaner bookkeeping of one log."""

    in_progress: bool = False
    paused: int = 0
    abort: bool = False
    # The earliest delete horizon this cleaner wrote and that has not passed at the last
    # cleaning: when it passes, the log is worth cleaning whatever its dirty ratio.
    next_delete_horizon_ms: int | None = None
    done: threading.Condition = field(default_factory=threading.Condition)


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """The cleanable part of a log at one moment."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


class LogCleaner:
    """Compacts the broker's compacted logs in the background.

    Args:
        config: the ``log.cleaner.*`` settings.
        logs: every log of the broker, called at each pass (the log manager's ``all_logs``).
        clock: milliseconds since the epoch.
    """

    def __init__(
        self,
        config: CleanerConfig,
        logs: Callable[[], list[PartitionLog]],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self._logs = logs
        self.clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._states: dict[TopicPartition, _LogState] = {}
        self._checkpoint_lock = threading.Lock()
        self.throttler = Throttler(config.io_max_bytes_per_second, self._stop)
        self._threads: list[threading.Thread] = []
        self._map_bytes = config.dedupe_buffer_size // max(1, config.threads)
        self.last_stats: CleanerStats | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def startup(self) -> None:
        if not self.config.enable:
            return
        for i in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"log-cleaner-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def shutdown(self) -> None:
        """Stop the threads; a cleaning in progress is aborted (its ``.cleaned`` files are
        removed at the next start)."""
        self._stop.set()
        with self._lock:
            for state in self._states.values():
                state.abort = True
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_once()
            except Exception:  # a bug must not kill the thread: log it and back off
                log.exception("log cleaner pass failed")
                cleaned = None
            if cleaned is None:
                self._stop.wait(self.config.backoff_ms / 1000)

    # -- pause / abort (log deletion, truncation) ------------------------------------------
    def _state(self, tp: TopicPartition) -> _LogState:
        with self._lock:
            return self._states.setdefault(tp, _LogState())

    @contextmanager
    def paused(self, topic: str, partition: int) -> Iterator[None]:
        """Abort any cleaning of the log, wait for it to stop, and keep the cleaner off the
        log inside the block (Kafka's abortAndPauseCleaning / resumeCleaning)."""
        state = self._state((topic, partition))
        with state.done:
            state.paused += 1
            state.abort = True
            while state.in_progress:
                state.done.wait()
        try:
            yield
        finally:
            with state.done:
                state.paused -= 1
                state.abort = False

    def forget(self, topic: str, partition: int, log_dir: Path) -> None:
        """Drop the log's state and its entry in ``log_dir``'s checkpoint (the log was
        deleted: a new log of the same name must be cleaned from its start)."""
        with self._lock:
            self._states.pop((topic, partition), None)
        with self._checkpoint_lock:
            checkpoint = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT)
            offsets = _read_checkpoint(checkpoint)
            if offsets.pop((topic, partition), None) is not None:
                checkpoint.write(offsets)

    def maybe_truncate_checkpoint(
        self, topic: str, partition: int, log_dir: Path, offset: int
    ) -> None:
        """Lower the log's cleaner checkpoint to ``offset`` if it is above (Kafka's
        maybeTruncateCheckpoint): after a truncation, offsets from there on hold new data that
        was never cleaned."""
        with self._checkpoint_lock:
            checkpoint = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT)
            offsets = _read_checkpoint(checkpoint)
            if offsets.get((topic, partition), 0) > offset:
                offsets[(topic, partition)] = offset
                checkpoint.write(offsets)

    # -- choosing a log --------------------------------------------------------------------
    def cleanable_range(self, plog: PartitionLog, now: int | None = None) -> CleanableRange:
        """The dirty section of ``plog`` and the sizes behind its dirty ratio."""
        now = self.clock() if now is None else now
        checkpoint = self._checkpoint_of(plog.dir.parent).get((plog.topic, plog.partition))
        start = plog.log_start_offset
        first_dirty = start if checkpoint is None or checkpoint < start else checkpoint
        if first_dirty > plog.log_end_offset:
            log.warning(
                "%s: cleaner checkpoint %d is past the log end %d; cleaning from the start",
                plog.dir,
                first_dirty,
                plog.log_end_offset,
            )
            first_dirty = start
        segments = plog.segments()
        uncleanable = min(segments[-1].base_offset, plog.high_watermark)
        unstable = plog.producer_state.first_unstable_offset()
        if unstable is not None:
            uncleanable = min(uncleanable, unstable)
        lag = plog.config.min_compaction_lag_ms
        if lag > 0:
            for segment in segments[:-1]:
                if segment.base_offset >= first_dirty and now - segment.largest_timestamp < lag:
                    uncleanable = min(uncleanable, segment.base_offset)
                    break
        uncleanable = max(uncleanable, first_dirty)
        clean_bytes = dirty_bytes = 0
        for segment, nxt in zip(segments, [*segments[1:], None], strict=True):
            end = nxt.base_offset if nxt is not None else plog.log_end_offset
            if segment.base_offset >= uncleanable:
                break
            if end <= first_dirty:
                clean_bytes += segment.size
            else:
                dirty_bytes += segment.size
        return CleanableRange(first_dirty, uncleanable, clean_bytes, dirty_bytes)

    def _needs_cleaning(self, plog: PartitionLog, rng: CleanableRange, now: int) -> bool:
        if rng.first_uncleanable_offset <= rng.first_dirty_offset:
            horizon = self._state((plog.topic, plog.partition)).next_delete_horizon_ms
            return horizon is not None and now >= horizon
        if rng.dirty_ratio >= plog.config.min_cleanable_dirty_ratio:
            return True
        horizon = self._state((plog.topic, plog.partition)).next_delete_horizon_ms
        if horizon is not None and now >= horizon:
            return True
        max_lag = plog.config.max_compaction_lag_ms
        if max_lag < (1 << 62):
            # Kafka's rule: the dirty section's first batch timestamp bounds its age.
            first = plog.segment_for(rng.first_dirty_offset)
            if first is not None:
                for _, header in first.log.batch_headers(0):
                    ts = header.max_timestamp
                    if ts >= 0 and now - ts >= max_lag:
                        return True
                    break
        return False

    def clean_once(self, now: int | None = None) -> CleanerStats | None:
        """Clean the dirtiest log that needs it; None when no log does.

        Raises nothing for a log that vanished or was aborted meanwhile (logged, None).
        """
        now = self.clock() if now is None else now
        best: tuple[float, PartitionLog, CleanableRange] | None = None
        for plog in self._logs():
            cfg = plog.config
            if not cfg.compact or cfg.remote_storage_enable:
                continue
            tp = (plog.topic, plog.partition)
            state = self._state(tp)
            with state.done:
                if state.in_progress or state.paused:
                    continue
            try:
                rng = self.cleanable_range(plog, now)
            except (CoreError, OSError, IndexError) as e:
                log.debug("%s: cannot compute the cleanable range: %s", plog.dir, e)
                continue
            if not self._needs_cleaning(plog, rng, now):
                continue
            if best is None or rng.dirty_ratio > best[0]:
                best = (rng.dirty_ratio, plog, rng)
        if best is None:
            return None
        _, plog, rng = best
        state = self._state((plog.topic, plog.partition))
        with state.done:
            if state.in_progress or state.paused:
                return None
            state.in_progress = True
            state.abort = False
        try:
            stats = self.clean(plog, rng, now)
        except CleanerAbortedError as e:
            log.info("%s: cleaning aborted: %s", plog.dir, e)
            return None
        finally:
            with state.done:
                state.in_progress = False
                state.done.notify_all()
        self.last_stats = stats
        return stats

    # -- cleaning one log ------------------------------------------------------------------
    def clean(self, plog: PartitionLog, rng: CleanableRange, now: int) -> CleanerStats:
        """Compact ``plog`` from its start up to where the offset map built over the dirty
        section ends; record that end in the checkpoint.

        Raises:
            CleanerAbortedError: the log is being paused (deleted or truncated) or the
                cleaner is shutting down; nothing was swapped in for the unfinished group.
        """
        started = time.monotonic()
        tp = (plog.topic, plog.partition)
        state = self._state(tp)
        stats = CleanerStats(plog.topic, plog.partition, rng.first_dirty_offset)
        offset_map = OffsetMap(self._map_bytes)
        end = self._build_offset_map(plog, rng, offset_map, stats, state)
        stats.end_offset = end
        horizon = now + plog.config.delete_retention_ms
        next_horizon: int | None = None
        segments = [s for s in plog.segments() if s.base_offset < end]
        all_segments = plog.segments()
        aborted = plog.collect_aborted_txns(plog.log_start_offset, end)
        for group in self._group_segments(plog, segments, all_segments):
            group_horizon = self._clean_group(
                plog, group, offset_map, aborted, now, horizon, stats, state
            )
            if group_horizon is not None:
                next_horizon = (
                    group_horizon if next_horizon is None else min(next_horizon, group_horizon)
                )
        state.next_delete_horizon_ms = next_horizon
        self._update_checkpoint(plog, end)
        stats.elapsed_s = time.monotonic() - started
        log.info(
            "%s: cleaned offsets [%d, %d): %d of %d records kept, %d tombstones dropped, "
            "%d -> %d segments, %.1f MB read, %.1f MB written in %.2f s",
            plog.dir,
            rng.first_dirty_offset,
            end,
            stats.records_retained,
            stats.records_read,
            stats.tombstones_dropped,
            stats.segments_cleaned,
            stats.segments_written,
            stats.bytes_read / 1e6,
            stats.bytes_written / 1e6,
            stats.elapsed_s,
        )
        return stats

    def _check_abort(self, state: _LogState) -> None:
        if state.abort or self._stop.is_set():
            raise CleanerAbortedError("aborted")

    def _batches(self, segment: LogSegment, state: _LogState) -> Iterator[RecordBatchHeader]:
        """Whole batches of an inactive segment, read in chunks, throttled."""
        size = segment.size
        position = 0
        for _, header in segment.log.batch_headers(0, size):
            self._check_abort(state)
            batch_size = header.size_in_bytes
            if position + batch_size > size:
                break
            data = segment.log.read(position, batch_size)
            self.throttler.maybe_throttle(batch_size)
            position += batch_size
            yield RecordBatchHeader(data)

    def _build_offset_map(
        self,
        plog: PartitionLog,
        rng: CleanableRange,
        offset_map: OffsetMap,
        stats: CleanerStats,
        state: _LogState,
    ) -> int:
        """Fill the map from the dirty section; returns the offset the map covers up to
        (exclusive)."""
        start, stop = rng.first_dirty_offset, rng.first_uncleanable_offset
        aborted = _aborted_by_producer(plog.collect_aborted_txns(start, stop))
        for segment in plog.segments():
            if segment.base_offset >= stop:
                break
            for header in self._batches(segment, state):
                if header.last_offset < start:
                    continue
                if header.base_offset >= stop:
                    return stop
                if header.is_control or _is_aborted(header, aborted):
                    continue
                for record in decode_records(header):
                    if record.offset < start or record.key is None:
                        continue
                    if offset_map.full:
                        # Kafka stops where the map is full; the rest waits for next time.
                        return max(start + 1, offset_map.latest_offset + 1)
                    offset_map.put(record.key, record.offset)
        return stop

    @staticmethod
    def _group_segments(
        plog: PartitionLog, segments: list[LogSegment], all_segments: list[LogSegment]
    ) -> list[list[LogSegment]]:
        """Adjacent segments whose cleaned union fits one segment (``segment.bytes``) and
        one index offset range (Kafka's groupSegmentsBySize)."""
        groups: list[list[LogSegment]] = []
        max_size = plog.config.segment_bytes
        i = 0
        while i < len(segments):
            group = [segments[i]]
            size = segments[i].size
            i += 1
            while i < len(segments):
                nxt = segments[i]
                following = _next_base(all_segments, nxt)
                if (
                    size + nxt.size > max_size
                    or following is None
                    or following - 1 - group[0].base_offset > plog.config.max_index_entries_span
                ):
                    break
                group.append(nxt)
                size += nxt.size
                i += 1
            groups.append(group)
        return groups

    def _clean_group(
        self,
        plog: PartitionLog,
        group: list[LogSegment],
        offset_map: OffsetMap,
        aborted: list[AbortedTxn],
        now: int,
        horizon: int,
        stats: CleanerStats,
        state: _LogState,
    ) -> int | None:
        """Write the records of ``group`` worth keeping into one ``.cleaned`` segment and
        swap it in; returns the earliest delete horizon still pending in it."""
        base = group[0].base_offset
        cleaned = LogSegment(
            plog.dir, base, plog.config, created_ms=group[-1].created_ms, file_suffix=CLEANED_SUFFIX
        )
        pending: int | None = None
        aborted_by_pid = _aborted_by_producer(aborted)
        try:
            last_batches = {
                pid: entry.last_data_offset
                for pid, entry in plog.producer_state.active_producers.items()
            }
            for segment in group:
                for header in self._batches(segment, state):
                    stats.bytes_read += header.size_in_bytes
                    out, batch_horizon = self._filter_batch(
                        header, offset_map, aborted_by_pid, last_batches, now, horizon, stats
                    )
                    # A horizon stamped at this very moment (delete.retention.ms=0) is
                    # pending too: its tombstones go at the next cleaning, which must come.
                    if batch_horizon is not None and batch_horizon >= now:
                        pending = batch_horizon if pending is None else min(pending, batch_horizon)
                    if out is None:
                        continue
                    written = RecordBatchHeader(out)
                    cleaned.append(
                        out,
                        [
                            AppendedBatch(
                                0,
                                written.base_offset,
                                written.last_offset,
                                written.max_timestamp,
                                len(out),
                            )
                        ],
                    )
                    stats.bytes_written += len(out)
                    self.throttler.maybe_throttle(len(out))
                for txn in segment.txn_index.all_aborted_txns():
                    cleaned.append_aborted_txn(txn)
            cleaned.on_becoming_inactive()
            cleaned.flush()
            self._check_abort(state)
            if not plog.replace_segments(cleaned, group):
                raise CleanerAbortedError("the log changed while it was cleaned")
        except BaseException:
            # Once the cleaned files are named .swap, old segments may already be .deleted:
            # the swap files are then the only copy, and the next start completes the swap.
            if cleaned.log.path.name.endswith(CLEANED_SUFFIX):
                cleaned.close()
                cleaned.delete_if_exists()
            raise
        stats.segments_cleaned += len(group)
        stats.segments_written += 1
        return pending

    @staticmethod
    def _filter_batch(
        header: RecordBatchHeader,
        offset_map: OffsetMap,
        aborted: dict[int, list[AbortedTxn]],
        last_batches: dict[int, int],
        now: int,
        horizon: int,
        stats: CleanerStats,
    ) -> tuple[bytes | bytearray | None, int | None]:
        """The batch as it should be after cleaning (None: drop it) and its delete horizon."""
        existing_horizon = header.delete_horizon_ms
        if header.is_control:
            return bytes(header.raw()), existing_horizon
        records = decode_records(header)
        stats.records_read += len(records)
        discard_all = header.is_transactional and _is_aborted(header, aborted)
        kept = []
        has_tombstone = False
        for record in records:
            if discard_all or record.key is None:
                continue
            latest = offset_map.get(record.key)
            if latest > record.offset:
                continue  # superseded by a later record of the same key
            if record.value is None:
                if existing_horizon is not None and now >= existing_horizon:
                    stats.tombstones_dropped += 1
                    continue
                has_tombstone = True
            kept.append(record)
        stats.records_retained += len(kept)
        new_horizon = existing_horizon
        if has_tombstone and existing_horizon is None:
            new_horizon = horizon
        if len(kept) == len(records) and new_horizon == existing_horizon:
            return bytes(header.raw()), existing_horizon
        keep_empty = header.has_producer_id and last_batches.get(header.producer_id) == (
            header.last_offset
        )
        if not kept and not keep_empty:
            return None, None
        log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
        builder = RecordBatchBuilder(
            compression=header.compression,
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
            timestamp_type=header.timestamp_type,
            log_append_time=header.max_timestamp if log_append else None,
            delete_horizon_ms=new_horizon if has_tombstone else None,
        )
        for record in kept:
            builder.append(
                record.value,
                key=record.key,
                headers=record.headers,
                timestamp=record.timestamp,
                offset=record.offset,
            )
        return builder.build(last_offset=header.last_offset), (
            new_horizon if has_tombstone else None
        )

    # -- checkpoint ------------------------------------------------------------------------
    def _checkpoint_of(self, directory: Path) -> dict[TopicPartition, int]:
        with self._checkpoint_lock:
            return _read_checkpoint(OffsetCheckpointFile(directory / CLEANER_OFFSET_CHECKPOINT))

    def _update_checkpoint(self, plog: PartitionLog, end: int) -> None:
        directory = plog.dir.parent
        with self._checkpoint_lock:
            checkpoint = OffsetCheckpointFile(directory / CLEANER_OFFSET_CHECKPOINT)
            offsets = _read_checkpoint(checkpoint)
            offsets[(plog.topic, plog.partition)] = end
            checkpoint.write(offsets)


def _read_checkpoint(checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
    try:
        return checkpoint.read()
    except FileNotFoundError:
        return {}
    except CoreError as e:
        # Kafka logs and starts over: a lost cleaner checkpoint only costs a re-cleaning.
        log.warning("%s is unreadable, cleaning from the log starts: %s", checkpoint.path, e)
        return {}


def _next_base(segments: list[LogSegment], segment: LogSegment) -> int | None:
    for a, b in itertools.pairwise(segments):
        if a is segment:
            return b.base_offset
    return None


def _aborted_by_producer(txns: list[AbortedTxn]) -> dict[int, list[AbortedTxn]]:
    out: dict[int, list[AbortedTxn]] = {}
    for txn in txns:
        out.setdefault(txn.producer_id, []).append(txn)
    return out


def _is_aborted(header: RecordBatchHeader, aborted: dict[int, list[AbortedTxn]]) -> bool:
    if not header.is_transactional:
        return False
    return any(
        t.first_offset <= header.base_offset <= t.last_offset
        for t in aborted.get(header.producer_id, ())
    )
