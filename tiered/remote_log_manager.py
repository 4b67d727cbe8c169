"""RemoteLogManager: copies rolled segments to the remote tier, expires them, serves reads.

Kafka's RemoteLogManager (RLMCopyTask, RLMExpirationTask, remote reads). For each partition
this broker leads, two tasks run every ``remote.log.manager.task.interval.ms`` on bounded
thread pools (never on the event loop), each at most once at a time per partition; a failed
run is retried after an exponential backoff with jitter.

Copy: the highest offset already remote is found along the leader-epoch lineage (newest
epoch first, RLMM ``highest_offset_for_epoch``). Candidates are the rolled segments after it
whose next segment starts at or below the last stable offset (the high watermark: no
transactions yet). Each goes COPY_SEGMENT_STARTED (fresh id) -> RSM copy ->
COPY_SEGMENT_FINISHED -> ``PartitionLog.highest_offset_in_remote_storage``, which is what
lets local retention delete the local copy. A failed copy is deleted through the usual
deletion states; copies left in COPY_SEGMENT_STARTED by a crash are deleted on the next run.

Expiration: FINISHED segments go, oldest first, when past ``retention.ms`` (by their max
timestamp), beyond ``retention.bytes`` (remote bytes plus bytes only held locally), or
wholly below the log start offset (DeleteRecords); the log start offset moves past them
first. Segments outside the current leader-epoch lineage (an unclean election's leftovers)
go too, without moving the log start offset.

The class also implements core's ``RemoteTier`` seam (``read``, ``offset_for_timestamp``,
``on_topic_created``, ``on_topic_deleted``) for the broker.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.clock import now_ms
from core.errors import CoreError, KafkaStorageError
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.partition_log import MAX_TIMESTAMP, TimestampAndOffset
from core.log.producer_state import encode_snapshot
from core.server.remote_seam import EARLIEST_PENDING_UPLOAD_TIMESTAMP, RemoteFetchResult
from tiered.api import (
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from tiered.events import log_event
from tiered.quota import (
    REMOTE_COPY_BYTES,
    REMOTE_COPY_ERRORS,
    REMOTE_COPY_LAG_BYTES,
    REMOTE_COPY_LAG_SEGMENTS,
    REMOTE_COPY_REQUESTS,
    REMOTE_DELETE_ERRORS,
    REMOTE_DELETE_LAG_BYTES,
    REMOTE_DELETE_REQUESTS,
    REMOTE_LOG_METADATA_COUNT,
    REMOTE_LOG_SIZE_BYTES,
    TieringMetrics,
    TokenBucket,
)
from tiered.remote_index_cache import RemoteIndexCache
from tiered.remote_reader import RemoteLogReader, RemoteReadRejectedError
from tiered.rlm_config import LONG_MAX, RemoteLogManagerConfig

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog
    from core.log.segment import LogSegment

log = logging.getLogger(__name__)

RLMM_WRITE_TIMEOUT_S = 60.0
_S = RemoteLogSegmentState


# -- leader-epoch lineage ------------------------------------------------------------------


def filtered_leader_epochs(epochs: Mapping[int, int]) -> dict[int, int]:
    """Kafka's buildFilteredLeaderEpochMap: drop epochs that hold no records (an epoch
    starting where the next one starts), keeping ascending order."""
    items = sorted(epochs.items())
    return {
        epoch: start
        for (epoch, start), nxt in itertools.zip_longest(items, items[1:])
        if nxt is None or nxt[1] != start
    }


def is_within_lineage(
    md: RemoteLogSegmentMetadata, log_end_offset: int, leader_epochs: Mapping[int, int]
) -> bool:
    """Kafka's isRemoteSegmentWithinLeaderEpochs.

    ``leader_epochs`` is the partition's filtered lineage (epoch -> start offset). The
    segment's epochs must all be in it, its inner epoch boundaries must be the lineage's,
    its first epoch must not start before the lineage's start of that epoch, its end must
    not pass the start of the lineage's next epoch, and it must end below the log end.
    One deviation: the lineage's earliest epoch starts at the log start offset (the cache
    is truncated when it moves), so a segment straddling the log start still belongs.
    """
    if not leader_epochs:
        return True
    seg = filtered_leader_epochs(md.segment_leader_epochs)
    seg_epochs = list(seg)
    lineage = sorted(leader_epochs.items())
    first_lineage_epoch, last_lineage_epoch = lineage[0][0], lineage[-1][0]
    if seg_epochs[0] < first_lineage_epoch or seg_epochs[-1] > last_lineage_epoch:
        return False

    def next_after(items: list[tuple[int, int]], epoch: int) -> tuple[int, int] | None:
        return next(((e, o) for e, o in items if e > epoch), None)

    seg_items = list(seg.items())
    for epoch, start in seg_items:
        if epoch not in leader_epochs:
            return False
        if epoch == seg_epochs[0] and epoch != first_lineage_epoch and start < leader_epochs[epoch]:
            return False
        if epoch == seg_epochs[-1]:
            nxt = next_after(lineage, epoch)
            if nxt is not None and md.end_offset > nxt[1] - 1:
                return False
        elif next_after(lineage, epoch) != next_after(seg_items, epoch):
            return False
    return md.end_offset < log_end_offset


def _covered(md: RemoteLogSegmentMetadata, finished: list[RemoteLogSegmentMetadata]) -> bool:
    """Whether every offset of ``md`` is in one of ``finished`` (sorted by start offset)."""
    need = md.start_offset
    for other in finished:
        if other.segment_id == md.segment_id or other.end_offset < need:
            continue
        if other.start_offset > need:
            return False
        need = other.end_offset + 1
        if need > md.end_offset:
            return True
    return False


def highest_remote_offset(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, plog: PartitionLog
) -> int:
    """Kafka's findHighestRemoteOffset: newest epoch first, the highest remote offset of the
    first epoch that has one, bounded by that epoch's end in this log; -1 if none."""
    cache = plog.leader_epoch_cache
    for entry in reversed(cache.entries()):
        highest = rlmm.highest_offset_for_epoch(tp, entry.epoch)
        if highest is None:
            continue
        _, end = cache.end_offset_for(entry.epoch, plog.log_end_offset)
        return end - 1 if 0 <= end <= highest else highest
    return -1


# -- scheduling ----------------------------------------------------------------------------


@dataclass(slots=True)
class _PartitionState:
    tp: TopicIdPartition
    plog: PartitionLog
    failures: dict[str, int]
    running: set[str]
    cancelled: bool = False


class RemoteLogManager:
    """Tiering for the partitions this broker leads, and reads from the remote tier.

    Args:
        rsm, rlmm: the configured plugins (this class does not close them unless
            ``shutdown(close_plugins=True)``).
        broker_id: written into the metadata events.
        config: a ``RemoteLogManagerConfig`` or a mapping with Kafka's keys.
        log_dir: where the remote index cache lives (``<log_dir>/remote-log-index-cache``).
        clock: wall-clock milliseconds, for retention and event timestamps.
        partition_logs: optional lookup ``(topic, partition) -> PartitionLog | None`` used
            by ``on_topic_created`` to start tiering partitions of a (re)configured topic.
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        broker_id: int,
        config: RemoteLogManagerConfig | Mapping[str, Any] | None,
        log_dir: Path,
        *,
        clock: Callable[[], int] = now_ms,
        partition_logs: Callable[[str, int], PartitionLog | None] | None = None,
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker_id = broker_id
        self.config = (
            config
            if isinstance(config, RemoteLogManagerConfig)
            else RemoteLogManagerConfig.from_props(config)
        )
        self.clock = clock
        self.partition_logs = partition_logs
        self.metrics = TieringMetrics()
        cfg = self.config
        self.copy_quota = (
            TokenBucket(cfg.remote_log_manager_copy_max_bytes_per_second)
            if cfg.remote_log_manager_copy_max_bytes_per_second < LONG_MAX
            else None
        )
        fetch_quota = (
            TokenBucket(cfg.remote_log_manager_fetch_max_bytes_per_second)
            if cfg.remote_log_manager_fetch_max_bytes_per_second < LONG_MAX
            else None
        )
        self.index_cache = RemoteIndexCache(
            Path(log_dir), rsm, cfg.remote_log_index_file_cache_total_size_bytes
        )
        self.reader = RemoteLogReader(
            rsm,
            rlmm,
            self.index_cache,
            threads=cfg.remote_log_reader_threads,
            max_pending_tasks=cfg.remote_log_reader_max_pending_tasks,
            fetch_quota=fetch_quota,
            metrics=self.metrics,
        )
        self._copier = ThreadPoolExecutor(
            cfg.remote_log_manager_copier_thread_pool_size, thread_name_prefix="rlm-copier"
        )
        self._expirer = ThreadPoolExecutor(
            cfg.remote_log_manager_expiration_thread_pool_size,
            thread_name_prefix="rlm-expiration",
        )
        self._lock = threading.Condition()
        self._partitions: dict[TopicIdPartition, _PartitionState] = {}
        self._queue: list[tuple[float, int, TopicIdPartition, str]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._random = random.Random()
        self._kept_warned: set[uuid.UUID] = set()  # segments _warn_kept already reported

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the scheduler thread; tasks of partitions already led are scheduled now."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._schedule_loop, name="rlm-scheduler", daemon=True
            )
            self._thread.start()
            for tp in self._partitions:
                self._enqueue(tp, "copy", 0)
                self._enqueue(tp, "expire", 0)

    def shutdown(self, *, close_plugins: bool = False) -> None:
        """Stop scheduling, wait for running tasks, stop the reader pool."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._copier.shutdown(wait=True, cancel_futures=True)
        self._expirer.shutdown(wait=True, cancel_futures=True)
        self.reader.shutdown()
        self.index_cache.close()
        if close_plugins:
            self.rsm.close()
            self.rlmm.close()

    # -- leadership ----------------------------------------------------------------------
    def on_leadership(self, partitions: Iterable[tuple[TopicIdPartition, PartitionLog]]) -> None:
        """This broker now leads these partitions: load their metadata, start their tasks."""
        parts = list(partitions)
        if not parts:
            return
        self.rlmm.on_partition_leadership_changes({tp for tp, _ in parts}, set())
        with self._lock:
            for tp, plog in parts:
                state = self._partitions.get(tp)
                if state is not None and state.plog is plog:
                    continue
                self._partitions[tp] = _PartitionState(tp, plog, {}, set())
                if self._thread is not None:
                    self._enqueue(tp, "copy", 0)
                    self._enqueue(tp, "expire", 0)
        for tp, _ in parts:
            log.info("remote log manager: leading %s", tp)

    def on_stop(self, partitions: Iterable[TopicIdPartition]) -> None:
        """This broker no longer leads or hosts these partitions: stop their tasks."""
        tps = set(partitions)
        self._cancel(tps)
        self.rlmm.on_stop_partitions(tps)

    def _cancel(self, tps: Iterable[TopicIdPartition]) -> list[TopicIdPartition]:
        """Stop the tasks of these partitions; returns those that had tasks. The metadata
        stays loaded (a deleted topic's remover still needs it)."""
        cancelled = []
        with self._lock:
            for tp in tps:
                state = self._partitions.pop(tp, None)
                if state is not None:
                    state.cancelled = True
                    cancelled.append(tp)
        for tp in cancelled:
            self.metrics.remove(tp)
        return cancelled

    def _enqueue(self, tp: TopicIdPartition, kind: str, delay_ms: float) -> None:
        heapq.heappush(self._queue, (time.monotonic() + delay_ms / 1000, next(self._seq), tp, kind))
        self._lock.notify_all()

    def _schedule_loop(self) -> None:
        with self._lock:
            while not self._closed:
                if not self._queue:
                    self._lock.wait()
                    continue
                due, _, tp, kind = self._queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                heapq.heappop(self._queue)
                state = self._partitions.get(tp)
                if state is None or kind in state.running:
                    continue
                state.running.add(kind)
                pool = self._copier if kind == "copy" else self._expirer
                pool.submit(self._run_scheduled, state, kind)

    def _run_scheduled(self, state: _PartitionState, kind: str) -> None:
        ok = True
        try:
            if not state.cancelled:
                self._run(state.tp, state.plog, kind)
        except Exception:  # a task must survive any failure: log it and back off
            ok = False
            log.exception("remote log manager: %s task of %s failed", kind, state.tp)
        with self._lock:
            state.running.discard(kind)
            if state.cancelled or self._closed or self._partitions.get(state.tp) is not state:
                return
            cfg = self.config
            if ok:
                state.failures[kind] = 0
                delay: float = cfg.remote_log_manager_task_interval_ms
            else:
                n = state.failures.get(kind, 0)
                state.failures[kind] = n + 1
                delay = min(
                    cfg.remote_log_manager_task_retry_backoff_ms * 2**n,
                    cfg.remote_log_manager_task_retry_backoff_max_ms,
                )
                jitter = cfg.remote_log_manager_task_retry_jitter
                delay *= 1 + self._random.uniform(-jitter, jitter)
            self._enqueue(state.tp, kind, delay)

    def _run(self, tp: TopicIdPartition, plog: PartitionLog, kind: str) -> None:
        if kind == "copy":
            self.copy_once(tp, plog)
        else:
            self.expire_once(tp, plog)

    def run_once(self, tp: TopicIdPartition) -> None:
        """Run the copy task, then the expiration task, of a led partition in this thread
        (tests, and ``tierlog`` commands). Errors propagate."""
        with self._lock:
            state = self._partitions.get(tp)
        if state is None:
            raise KeyError(f"{tp} is not led by this remote log manager")
        self.copy_once(tp, state.plog)
        self.expire_once(tp, state.plog)

    # -- copy ----------------------------------------------------------------------------
    def copy_once(self, tp: TopicIdPartition, plog: PartitionLog) -> int:
        """One run of the copy task; returns the number of segments copied.

        Raises:
            RemoteStorageError: a copy failed (it was cleaned up; the next run retries).
        """
        if not self.rlmm.is_ready(tp) or not plog.config.remote_storage_enable:
            return 0
        self._delete_dangling_copies(tp)
        highest = highest_remote_offset(self.rlmm, tp, plog)
        plog.highest_offset_in_remote_storage = max(plog.highest_offset_in_remote_storage, highest)
        candidates = self._candidates(plog, highest)
        self._update_copy_lag(tp, candidates)
        if plog.config.remote_log_copy_disable:
            return 0
        copied = 0
        for segment, next_base in candidates:
            if self.copy_quota is not None and self.copy_quota.is_exceeded():
                log.info("%s: copy quota exceeded; the next run continues", tp)
                break
            self._copy_segment(tp, plog, segment, next_base)
            copied += 1
        if copied:
            self._update_copy_lag(tp, self._candidates(plog, plog.highest_offset_in_remote_storage))
        return copied

    @staticmethod
    def _candidates(plog: PartitionLog, highest_remote: int) -> list[tuple[LogSegment, int]]:
        """Rolled segments holding offsets above ``highest_remote`` whose next segment
        starts at or below the last stable offset, with that next base offset."""
        from_offset = max(highest_remote + 1, plog.local_log_start_offset)
        lso = plog.high_watermark  # no transactions yet: the LSO is the high watermark
        out = []
        for segment, nxt in itertools.pairwise(plog.segments()):
            if nxt.base_offset > lso:
                break
            if nxt.base_offset <= from_offset:
                continue  # wholly copied already
            out.append((segment, nxt.base_offset))
        return out

    def _update_copy_lag(self, tp: TopicIdPartition, candidates: list[tuple[Any, int]]) -> None:
        self.metrics.set(REMOTE_COPY_LAG_SEGMENTS, tp, len(candidates))
        self.metrics.set(REMOTE_COPY_LAG_BYTES, tp, sum(s.size for s, _ in candidates))

    def _copy_segment(
        self, tp: TopicIdPartition, plog: PartitionLog, segment: LogSegment, next_base: int
    ) -> None:
        start, end = segment.base_offset, next_base - 1
        cache = plog.leader_epoch_cache
        epochs = cache.entries_for_range(start, end)
        if not epochs:
            raise KafkaStorageError(
                f"{tp}: segment {start}..{end} has no leader epoch; it cannot be tiered"
            )
        checkpoint = LeaderEpochCheckpointFile.encode(cache.epoch_entries_in_range(-1, next_base))
        md = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp),
            start,
            end,
            max_timestamp_ms=segment.largest_timestamp,
            broker_id=self.broker_id,
            event_timestamp_ms=self.clock(),
            segment_size_in_bytes=segment.size,
            segment_leader_epochs=epochs,
            txn_index_empty=segment.txn_index.is_empty(),
        )
        self._wait(self.rlmm.add_remote_log_segment_metadata(md))
        self.metrics.inc(REMOTE_COPY_REQUESTS, tp)
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="tierlog-copy-") as scratch:
            snapshot = plog.producer_state.snapshot_file(next_base)
            if snapshot is None or not snapshot.exists():
                # No producer state changed in the segment, so no snapshot was written at the
                # roll: ship an empty one, as Kafka does.
                snapshot = Path(scratch) / f"{next_base:020d}.snapshot"
                snapshot.write_bytes(encode_snapshot([]))
            data = LogSegmentData(
                log_segment=segment.log.path,
                offset_index=segment.offset_index.path,
                time_index=segment.time_index.path,
                transaction_index=None if md.txn_index_empty else segment.txn_index.path,
                producer_snapshot_index=snapshot,
                leader_epoch_index=checkpoint,
            )
            try:
                custom = self.rsm.copy_log_segment_data(md, data)
            except (RemoteStorageError, OSError) as e:
                self.metrics.inc(REMOTE_COPY_ERRORS, tp)
                log_event(
                    log,
                    logging.WARNING,
                    "remote_copy_failed",
                    tp,
                    segment_id=md.segment_id,
                    start_offset=start,
                    end_offset=end,
                    error=f"{type(e).__name__}: {e}",
                )
                self._delete_segment(md, reason="failed copy")
                raise RemoteStorageError(f"{tp}: copy of segment {start}..{end} failed") from e
        self._wait(
            self.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, self.clock(), custom, _S.COPY_SEGMENT_FINISHED,
                    self.broker_id,
                )
            )
        )  # fmt: skip
        with plog.lock:
            plog.highest_offset_in_remote_storage = max(plog.highest_offset_in_remote_storage, end)
        self.metrics.inc(REMOTE_COPY_BYTES, tp, md.segment_size_in_bytes)
        if self.copy_quota is not None:
            self.copy_quota.record(md.segment_size_in_bytes)
        log_event(
            log,
            logging.INFO,
            "remote_copy",
            tp,
            segment_id=md.segment_id,
            start_offset=start,
            end_offset=end,
            bytes=md.segment_size_in_bytes,
            ms=round((time.monotonic() - began) * 1000),
        )

    def _delete_dangling_copies(self, tp: TopicIdPartition) -> None:
        """Delete copies a crash (or a failed cleanup) left in COPY_SEGMENT_STARTED. Copy
        runs of a partition never overlap, so none of them is in progress now."""
        for md in list(self.rlmm.list_remote_log_segments(tp)):
            if md.state == _S.COPY_SEGMENT_STARTED:
                self._delete_segment(md, reason="dangling copy")

    # -- deletion ------------------------------------------------------------------------
    def _delete_segment(self, md: RemoteLogSegmentMetadata, *, reason: str) -> None:
        """DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED (idempotent)."""
        tp = md.topic_id_partition
        self.metrics.inc(REMOTE_DELETE_REQUESTS, tp)
        try:
            if md.state != _S.DELETE_SEGMENT_STARTED:
                self._wait(self._update(md, _S.DELETE_SEGMENT_STARTED))
            self.rsm.delete_log_segment_data(md)
            self.index_cache.remove(md.segment_id)
            self._wait(self._update(md, _S.DELETE_SEGMENT_FINISHED))
        except (RemoteStorageError, OSError):
            self.metrics.inc(REMOTE_DELETE_ERRORS, tp)
            raise
        log_event(
            log,
            logging.INFO,
            "remote_delete",
            tp,
            segment_id=md.segment_id,
            start_offset=md.start_offset,
            end_offset=md.end_offset,
            reason=reason,
        )

    def _update(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> Future[None]:
        return self.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, self.clock(), None, state, self.broker_id
            )
        )

    @staticmethod
    def _wait(future: Future[None]) -> None:
        future.result(timeout=RLMM_WRITE_TIMEOUT_S)

    # -- expiration ----------------------------------------------------------------------
    def expire_once(self, tp: TopicIdPartition, plog: PartitionLog) -> int:
        """One run of the expiration task; returns the number of segments deleted.

        Raises:
            RemoteStorageError: a deletion failed (the next run resumes it).
        """
        if not self.rlmm.is_ready(tp):
            return 0
        cfg = plog.config
        segments = list(self.rlmm.list_remote_log_segments(tp))
        deleted = 0
        if not cfg.remote_storage_enable:
            if cfg.remote_log_delete_on_disable:  # KIP-950: tiering off, remote data goes
                for md in segments:
                    if md.state != _S.DELETE_SEGMENT_FINISHED:
                        self._delete_segment(md, reason="tiering disabled")
                        deleted += 1
            return deleted
        lineage = filtered_leader_epochs(
            {e.epoch: e.start_offset for e in plog.leader_epoch_cache.entries()}
        )
        log_end = plog.log_end_offset
        finished = sorted(
            (md for md in segments if md.state == _S.COPY_SEGMENT_FINISHED),
            key=lambda m: m.start_offset,
        )
        valid = [md for md in finished if is_within_lineage(md, log_end, lineage)]
        orphans = [md for md in finished if not is_within_lineage(md, log_end, lineage)]
        # Deletions a crash or a failure interrupted. A DELETE_SEGMENT_STARTED read from the
        # metadata topic is not proof that this broker decided it (the metadata manager
        # cannot tell a forged event replayed at start-up from its own), so one is resumed
        # only when this broker's own rules delete the segment now: its offsets are all in
        # finished segments (a failed copy done again), it is outside the lineage, or,
        # counted as if still finished, retention or the log start offset expire it.
        # Anything else is kept, with a warning: its remote data is not destroyed.
        deleting = sorted(
            (md for md in segments if md.state == _S.DELETE_SEGMENT_STARTED),
            key=lambda m: m.start_offset,
        )
        redundant = [
            md
            for md in deleting
            if not is_within_lineage(md, log_end, lineage) or _covered(md, valid)
        ]
        unfinished = {md.segment_id for md in deleting} - {md.segment_id for md in redundant}
        candidates = sorted(
            valid + [md for md in deleting if md.segment_id in unfinished],
            key=lambda m: m.start_offset,
        )
        doomed, reason = self._expired(plog, candidates)
        doomed_ids = {md.segment_id for md in doomed}
        if doomed:
            new_start = min(doomed[-1].end_offset + 1, plog.high_watermark)
            plog.maybe_increment_log_start_offset(new_start, f"remote {reason}")
        for md in redundant:
            self._delete_segment(md, reason="resumed deletion")
        for md in doomed:
            resumed = md.state == _S.DELETE_SEGMENT_STARTED
            self._delete_segment(md, reason=f"resumed deletion ({reason})" if resumed else reason)
        for md in orphans:
            self._delete_segment(md, reason="outside the leader-epoch lineage")
        deleted += len(redundant) + len(doomed) + len(orphans)
        for md in deleting:
            if md.segment_id in unfinished and md.segment_id not in doomed_ids:
                self._warn_kept(md)

        kept = [md for md in valid if md.segment_id not in doomed_ids]
        self.metrics.set(REMOTE_LOG_SIZE_BYTES, tp, sum(m.segment_size_in_bytes for m in kept))
        self.metrics.set(REMOTE_LOG_METADATA_COUNT, tp, len(kept))
        self.metrics.set(REMOTE_DELETE_LAG_BYTES, tp, 0)
        return deleted

    def _warn_kept(self, md: RemoteLogSegmentMetadata) -> None:
        """A segment left DELETE_SEGMENT_STARTED that no rule of this broker deletes."""
        if md.segment_id in self._kept_warned:
            return
        self._kept_warned.add(md.segment_id)
        log_event(
            log,
            logging.WARNING,
            "remote_delete_refused",
            md.topic_id_partition,
            segment_id=md.segment_id,
            start_offset=md.start_offset,
            end_offset=md.end_offset,
            broker=md.broker_id,
            reason="DELETE_SEGMENT_STARTED in the metadata, but no rule of this broker deletes "
            "the segment: its remote data is kept (its offsets are not served)",
        )

    def _expired(
        self, plog: PartitionLog, valid: list[RemoteLogSegmentMetadata]
    ) -> tuple[list[RemoteLogSegmentMetadata], str]:
        """The oldest segments past retention, and the reason of the last one."""
        cfg = plog.config
        now = self.clock()
        log_start = plog.log_start_offset
        breach = 0
        if cfg.retention_bytes >= 0:
            remote = sum(m.segment_size_in_bytes for m in valid)
            highest = plog.highest_offset_in_remote_storage
            local_only = sum(s.size for s in plog.segments() if s.base_offset > highest)
            breach = remote + local_only - cfg.retention_bytes
        doomed: list[RemoteLogSegmentMetadata] = []
        reason = ""
        for md in valid:
            if md.end_offset < log_start:
                reason = "log start offset"
            elif cfg.retention_ms >= 0 and md.max_timestamp_ms <= now - cfg.retention_ms:
                reason = "retention.ms"
            elif cfg.retention_bytes >= 0 and breach >= md.segment_size_in_bytes:
                reason = "retention.bytes"
            else:
                break
            breach -= md.segment_size_in_bytes
            doomed.append(md)
        return doomed, reason

    # -- reads (blocking; for the reader pool and tests) ---------------------------------
    def read_remote(
        self, tp: TopicIdPartition, plog: PartitionLog, fetch_offset: int, max_bytes: int
    ) -> bytes:
        """See ``RemoteLogReader.read``; blocking."""
        return self.reader.read(tp, plog, fetch_offset, max_bytes)

    def find_offset_by_timestamp(
        self, tp: TopicIdPartition, plog: PartitionLog, timestamp: int
    ) -> TimestampAndOffset | None:
        """ListOffsets over the remote tier; blocking. ``timestamp`` >= 0, -3 or -6."""
        if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            return self.earliest_pending_upload(tp, plog)
        if timestamp == MAX_TIMESTAMP:
            return self.reader.find_max_timestamp(tp, plog)
        return self.reader.find_offset_by_timestamp(tp, plog, timestamp)

    def earliest_pending_upload(
        self, tp: TopicIdPartition, plog: PartitionLog
    ) -> TimestampAndOffset | None:
        """ListOffsets -6 (KIP-1023): the first offset not yet in the remote tier."""
        if not plog.config.remote_storage_enable:
            return None
        highest = plog.highest_offset_in_remote_storage
        if highest < 0 and self.rlmm.is_ready(tp):
            highest = highest_remote_offset(self.rlmm, tp, plog)
        offset = highest + 1 if highest >= 0 else plog.log_start_offset
        offset = min(max(offset, plog.log_start_offset), plog.log_end_offset)
        return TimestampAndOffset(-1, offset, plog.leader_epoch_cache.epoch_for_offset(offset))

    # -- core's RemoteTier seam (async; the event loop only awaits) -----------------------
    @property
    def fetch_max_wait_ms(self) -> int:
        """core's ``RemoteTier.fetch_max_wait_ms``: ``remote.fetch.max.wait.ms``."""
        return self.config.remote_fetch_max_wait_ms

    def start_read(
        self,
        topic_id: object,
        topic: str,
        partition: int,
        log: PartitionLog,
        fetch_offset: int,
        max_bytes: int,
        *,
        read_committed: bool,
    ) -> asyncio.Future[RemoteFetchResult]:
        """core's ``RemoteTier.start_read``: ``RemoteLogReader.fetch`` on the reader pool.

        Cancelling the returned future cancels the read if it has not started yet.

        Raises:
            KafkaStorageError: at once, when ``remote.log.reader.max.pending.tasks`` reads
                are already queued.
        """
        tp = TopicIdPartition(topic_id, topic, partition)  # type: ignore[arg-type]
        try:
            future = self.reader.submit_fetch(
                tp, log, fetch_offset, max_bytes, read_committed=read_committed
            )
        except RemoteReadRejectedError as e:
            raise KafkaStorageError(str(e)) from e
        return asyncio.wrap_future(future)

    async def _await(self, future: Future[Any]) -> Any:
        timeout = self.config.remote_fetch_max_wait_ms / 1000
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except CoreError:
            raise
        except (RemoteStorageError, OSError) as e:
            if isinstance(e, TimeoutError):
                raise
            raise KafkaStorageError(f"remote tier failed: {e}") from e

    async def offset_for_timestamp(
        self, topic_id: object, topic: str, partition: int, log: PartitionLog, timestamp: int
    ) -> TimestampAndOffset | None:
        """core's ``RemoteTier.offset_for_timestamp`` (timestamps >= 0, -3 and -6)."""
        tp = TopicIdPartition(topic_id, topic, partition)  # type: ignore[arg-type]
        if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            return self.earliest_pending_upload(tp, log)
        if timestamp < 0 and timestamp != MAX_TIMESTAMP:
            return None
        try:
            future = self.reader.submit_offset_for_timestamp(tp, log, timestamp)
        except RemoteReadRejectedError as e:
            raise KafkaStorageError(str(e)) from e
        return await self._await(future)

    def on_topic_created(self, topic: Any) -> None:
        """core's seam: a topic was created or reconfigured. With a ``partition_logs``
        lookup, its tiered partitions are led from now on (one broker leads them all)."""
        if self.partition_logs is None:
            return
        parts = []
        for p in range(topic.partitions):
            plog = self.partition_logs(topic.name, p)
            if plog is not None and plog.config.remote_storage_enable:
                parts.append((TopicIdPartition(topic.topic_id, topic.name, p), plog))
        self.on_leadership(parts)

    def on_topic_deleted(self, topic: Any) -> None:
        """core's seam: a topic was deleted. Its partitions stop, and each is marked
        DELETE_PARTITION_MARKED; the RLMM's partition remover deletes the remote data."""
        tps = [TopicIdPartition(topic.topic_id, topic.name, p) for p in range(topic.partitions)]
        tiered = self._cancel(tps)
        for tp in tiered:
            try:
                self._wait(
                    self.rlmm.put_remote_partition_delete_metadata(
                        RemotePartitionDeleteMetadata(
                            tp,
                            RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                            self.clock(),
                            self.broker_id,
                        )
                    )
                )
            except (RemoteStorageError, TimeoutError, OSError):
                log.exception("%s: could not mark the partition for remote deletion", tp)
