"""The RemoteLogManager's tasks: one object per partition and kind (Kafka's RLMTask family).

- ``CopyTask`` (Kafka's RLMCopyTask), on a leader. The highest offset already remote is
  found along the leader-epoch lineage (newest epoch first, RLMM ``highest_offset_for_epoch``).
  Candidates are the rolled segments after it whose next segment starts at or below the
  last stable offset (the high watermark: no transactions yet). Each goes
  COPY_SEGMENT_STARTED (fresh id) -> RSM copy -> COPY_SEGMENT_FINISHED ->
  ``PartitionLog.highest_offset_in_remote_storage``, which is what lets local retention
  delete the local copy. Consecutive segments are copied in batches (one RSM call,
  ``copy_log_segments_data``, so that the plugin may sync them together), their FINISHED
  events after the batch, in one ordered RLMM write (offset order, one sync), then the
  partition's local retention at once (Kafka waits for the log manager's retention
  check). A run that copied is followed after a tenth of the task interval. A failed copy
  is deleted through the usual deletion states; copies left in COPY_SEGMENT_STARTED by a
  crash, or by
  a leader that lost its leadership during the copy (it stops there: only the leader
  finishes copies), are deleted on the next run, by whichever broker leads then.
- ``ExpirationTask`` (RLMExpirationTask), on a leader. FINISHED segments go, oldest first,
  when past ``retention.ms`` (by their max timestamp), beyond ``retention.bytes`` (remote
  bytes plus the local segments above the highest offset of those remote segments), or
  wholly below the log start offset (DeleteRecords); the log start offset moves past them
  first. Segments holding an epoch the current lineage truncated away (an unclean
  election's leftovers) go too, without moving the log start offset, once every offset
  they could still serve is in a segment of the lineage or in the local log; segments off
  the lineage without such an epoch (a deposed leader's copy past its epoch's end) are
  kept, as a later unclean election may need them (KIP-405's scenario 5), until the log
  start offset passes them.
- ``FollowerTask`` (RLMFollowerTask, Kafka 3.9), on a follower: keeps
  ``highest_offset_in_remote_storage`` up with what the leader copied, so that the
  follower's local retention may delete what is safely remote.

A task holds its partition's state between runs: the log, whether it was cancelled, and
its consecutive failures, from which ``run`` computes the delay before the next run (the
task interval, or an exponential backoff with jitter after a failure). The
RemoteLogManager schedules the runs, at most one at a time per task.
"""

from __future__ import annotations

import itertools
import logging
import random
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from core.errors import CoreError, KafkaStorageError
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.producer_state import encode_snapshot
from tiered.api import (
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from tiered.events import log_event
from tiered.lineage import (
    filtered_leader_epochs,
    has_truncated_epoch,
    highest_remote_offset,
    is_within_lineage,
    served_ranges,
    served_remote_offset,
)
from tiered.metrics import (
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
)
from tiered.quota import TokenBucket
from tiered.remote_index_cache import RemoteIndexCache
from tiered.rlm_config import RemoteLogManagerConfig

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog
    from core.log.segment import LogSegment

log = logging.getLogger(__name__)
_T = TypeVar("_T")

RLMM_WRITE_TIMEOUT_S = 60.0
# Consecutive segments of a partition copied together (one RSM call, so that a plugin may
# sync them together; their FINISHED events follow the batch): at most this many, and this
# many bytes unless one segment is larger. Small enough that local retention waits for a
# batch of small segments, not for many large ones.
COPY_BATCH_SEGMENTS = 8
COPY_BATCH_BYTES = 64 << 20
# A copy run that copied segments is followed after this fraction of the task interval
# (``CopyTask.run``): its partition is being produced, and the copy lag is what local
# retention waits for.
ACTIVE_RECHECK_FRACTION = 0.1


def copy_batches(
    items: Iterable[_T], size_of: Callable[[_T], int], most: int = COPY_BATCH_SEGMENTS
) -> Iterator[list[_T]]:
    """Consecutive runs of segments copied together: up to ``most`` segments and
    ``COPY_BATCH_BYTES`` (a segment at least), so that the RSM may make them durable with
    one round of syncs."""
    batch: list[_T] = []
    size = 0
    for item in items:
        if batch and (len(batch) >= most or size + size_of(item) > COPY_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += size_of(item)
    if batch:
        yield batch


_S = RemoteLogSegmentState


@dataclass(slots=True)
class TaskContext:
    """What the tasks of one RemoteLogManager share."""

    rsm: RemoteStorageManager
    rlmm: RemoteLogMetadataManager
    broker_id: int
    config: RemoteLogManagerConfig
    clock: Callable[[], int]
    metrics: TieringMetrics
    index_cache: RemoteIndexCache
    copy_quota: TokenBucket | None
    random: random.Random


class RLMTask(ABC):
    """One partition's periodic task. ``run_once`` does the work and raises on failure;
    ``run`` is what the scheduler calls."""

    kind: ClassVar[str]

    def __init__(self, ctx: TaskContext, tp: TopicIdPartition, plog: PartitionLog) -> None:
        self.ctx = ctx
        self.tp = tp
        self.plog = plog
        self.cancelled = False
        self.failures = 0  # consecutive failed runs: the exponent of the retry backoff

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tp})"

    def cancel(self) -> None:
        """No run starts after this; a run in progress finishes its current segment."""
        self.cancelled = True

    @abstractmethod
    def run_once(self) -> int:
        """One run in the calling thread; returns the number of segments it acted on.

        Raises:
            RemoteStorageError: a step failed (the next run resumes it).
        """

    def run(self) -> float:
        """One run as scheduled: a failure is logged, never raised. Returns the delay in ms
        before the next run: the task interval, or after a failure an exponential backoff
        (``task.retry.backoff.ms`` doubling up to ``task.retry.backoff.max.ms``) with
        ``task.retry.jitter``."""
        cfg = self.ctx.config
        if self.cancelled:
            return cfg.remote_log_manager_task_interval_ms
        try:
            self.run_once()
        except Exception:  # a task must survive any failure: log it and back off
            log.exception("remote log manager: %s task of %s failed", self.kind, self.tp)
            delay = min(
                cfg.remote_log_manager_task_retry_backoff_ms * 2**self.failures,
                cfg.remote_log_manager_task_retry_backoff_max_ms,
            )
            self.failures += 1
            jitter = cfg.remote_log_manager_task_retry_jitter
            return delay * (1 + self.ctx.random.uniform(-jitter, jitter))
        self.failures = 0
        return cfg.remote_log_manager_task_interval_ms

    # -- helpers shared by the leader's tasks ---------------------------------------------
    def delete_segment(self, md: RemoteLogSegmentMetadata, *, reason: str) -> None:
        """DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED (idempotent)."""
        ctx = self.ctx
        tp = md.topic_id_partition
        ctx.metrics.inc(REMOTE_DELETE_REQUESTS, tp)
        try:
            if md.state != _S.DELETE_SEGMENT_STARTED:
                self.wait(self.update(md, _S.DELETE_SEGMENT_STARTED))
            ctx.rsm.delete_log_segment_data(md)
            ctx.index_cache.remove(md.segment_id)
            self.wait(self.update(md, _S.DELETE_SEGMENT_FINISHED))
        except (RemoteStorageError, OSError):
            ctx.metrics.inc(REMOTE_DELETE_ERRORS, tp)
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

    def update(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> Future[None]:
        return self.ctx.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, self.ctx.clock(), None, state, self.ctx.broker_id
            )
        )

    @staticmethod
    def wait(future: Future[None]) -> None:
        future.result(timeout=RLMM_WRITE_TIMEOUT_S)


class CopyTask(RLMTask):
    """Copies the partition's rolled segments to the remote tier (see the module doc)."""

    kind = "copy"

    def __init__(self, ctx: TaskContext, tp: TopicIdPartition, plog: PartitionLog) -> None:
        super().__init__(ctx, tp, plog)
        # Whether the last run stopped at its time bound with segments left to copy.
        self.behind = False
        # Segments copied by the last run.
        self.copied = 0
        # Whether this run follows a run that copied, ``ACTIVE_RECHECK_FRACTION`` of a task
        # interval later: it skips the scan for dangling copies, which the full runs do.
        self.rechecking = False

    def run(self) -> float:
        """As ``RLMTask.run``; a run that stopped at its time bound with segments left is
        followed at once by the next (rescheduled, so that the copier threads take the
        other partitions' due runs first), not a task interval later; one that copied
        segments (the partition is being produced) is followed after
        ``ACTIVE_RECHECK_FRACTION`` of the interval, so that a segment rolled just after a
        run does not wait a whole interval to be copied (with Kafka's 30 s interval, a
        partition produced at 20 MB/s would keep 600 MB more local than
        ``local.retention.*`` asks)."""
        self.copied = 0
        delay = super().run()
        self.rechecking = False
        if self.cancelled or self.failures:
            return delay
        if self.behind:
            return 0.0
        if self.copied:
            self.rechecking = True
            return delay * ACTIVE_RECHECK_FRACTION
        return delay

    def run_once(self) -> int:
        """One run; returns the number of segments copied.

        Raises:
            RemoteStorageError: a copy failed (it was cleaned up; the next run retries).
        """
        ctx, tp, plog = self.ctx, self.tp, self.plog
        if not ctx.rlmm.is_ready(tp) or not plog.config.remote_storage_enable:
            return 0
        if not self.rechecking:
            self._delete_dangling_copies()
        highest = served_remote_offset(ctx.rlmm, tp, plog)
        unserved = highest < highest_remote_offset(ctx.rlmm, tp, plog)
        with plog.lock:
            if unserved and highest < plog.highest_offset_in_remote_storage:
                # A finished copy was deleted without being expired (a deposed leader's
                # late finish of what this leader deleted as a dangling copy): its offsets
                # are no longer remote, so local retention must keep them until copied.
                log_event(
                    log,
                    logging.WARNING,
                    "remote_offsets_recopied",
                    tp,
                    believed_highest=plog.highest_offset_in_remote_storage,
                    served_highest=highest,
                )
                plog.highest_offset_in_remote_storage = highest
            else:
                plog.highest_offset_in_remote_storage = max(
                    plog.highest_offset_in_remote_storage, highest
                )
        candidates = self.candidates(plog, highest)
        self._update_copy_lag(candidates)
        if plog.config.remote_log_copy_disable:
            return 0
        # Segments rolled while a pass copied are copied in further passes rather than a
        # task interval later (a partition produced faster than one segment per interval
        # would otherwise keep that interval's data local beyond local.retention.*). The
        # further passes stop after one task interval, so that a partition produced faster
        # than it can be copied does not hold a copier thread forever; the next run of such
        # a partition is then due at once (``run``), behind the other partitions' due runs.
        until = time.monotonic() + ctx.config.remote_log_manager_task_interval_ms / 1000
        copied = 0
        self.behind = False
        while candidates:
            done = self._copy_all(candidates)
            copied += done
            if done < len(candidates):
                break  # stopped (leadership, quota)
            candidates = self.candidates(plog, plog.highest_offset_in_remote_storage)
            if candidates and time.monotonic() >= until:
                self.behind = True  # the next run continues at once
                break
        if copied:
            self._update_copy_lag(self.candidates(plog, plog.highest_offset_in_remote_storage))
        self.copied = copied
        return copied

    def _copy_all(self, candidates: list[tuple[LogSegment, int]]) -> int:
        """Copy ``candidates`` in order, in batches (``_batches``); the number copied, fewer
        when the task was cancelled, the copy quota is exceeded or leadership was lost
        during a copy."""
        copied = 0
        for batch in self._batches(candidates):
            if self.cancelled:
                break  # no longer the leader: the next leader copies the rest
            quota = self.ctx.copy_quota
            if quota is not None and quota.is_exceeded():
                log.info("%s: copy quota exceeded; the next run continues", self.tp)
                break
            if not self._copy_segments(batch):
                break
            copied += len(batch)
        return copied

    def _batches(
        self, candidates: list[tuple[LogSegment, int]]
    ) -> Iterator[list[tuple[LogSegment, int]]]:
        """The candidates in copy batches (``copy_batches``); one at a time under a copy
        quota, which is checked between batches."""
        most = 1 if self.ctx.copy_quota is not None else COPY_BATCH_SEGMENTS
        return copy_batches(candidates, lambda candidate: candidate[0].size, most)

    @staticmethod
    def candidates(plog: PartitionLog, highest_remote: int) -> list[tuple[LogSegment, int]]:
        """Rolled segments holding offsets above ``highest_remote`` whose next segment
        starts at or below the last stable offset, with that next base offset."""
        from_offset = max(highest_remote + 1, plog.local_log_start_offset)
        # Kafka copies up to the last stable offset: a copied segment's transaction index
        # then holds every abort of its range (no transaction open across it is decided
        # later), which remote READ_COMMITTED reads rely on.
        lso = plog.last_stable_offset
        out = []
        for segment, nxt in itertools.pairwise(plog.segments()):
            if nxt.base_offset > lso:
                break
            if nxt.base_offset <= from_offset:
                continue  # wholly copied already
            out.append((segment, nxt.base_offset))
        return out

    def _update_copy_lag(self, candidates: list[tuple[Any, int]]) -> None:
        self.ctx.metrics.set(REMOTE_COPY_LAG_SEGMENTS, self.tp, len(candidates))
        self.ctx.metrics.set(REMOTE_COPY_LAG_BYTES, self.tp, sum(s.size for s, _ in candidates))

    def _prepare(
        self, segment: LogSegment, next_base: int
    ) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
        """The metadata (a fresh segment id) and the files of one segment's copy."""
        ctx, tp, plog = self.ctx, self.tp, self.plog
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
            broker_id=ctx.broker_id,
            event_timestamp_ms=ctx.clock(),
            segment_size_in_bytes=segment.size,
            segment_leader_epochs=epochs,
            txn_index_empty=segment.txn_index.is_empty(),
        )
        snapshot = plog.producer_state.snapshot_file(next_base)
        if snapshot is None or not snapshot.exists():
            # No producer state changed in the segment, so no snapshot was written at the
            # roll: ship an empty one, as Kafka does.
            snapshot = _EmptySnapshot.path()
        data = LogSegmentData(
            log_segment=segment.log.path,
            offset_index=segment.offset_index.path,
            time_index=segment.time_index.path,
            transaction_index=None if md.txn_index_empty else segment.txn_index.path,
            producer_snapshot_index=snapshot,
            leader_epoch_index=checkpoint,
        )
        return md, data

    def _copy_segments(self, batch: list[tuple[LogSegment, int]]) -> bool:
        """Copy consecutive segments together: COPY_SEGMENT_STARTED of each, one RSM call
        for all (``copy_log_segments_data``: the plugin may sync them together), then
        COPY_SEGMENT_FINISHED of each. False when leadership was lost during the copy."""
        ctx, tp, plog = self.ctx, self.tp, self.plog
        copies = [self._prepare(segment, next_base) for segment, next_base in batch]
        for started in [ctx.rlmm.add_remote_log_segment_metadata(md) for md, _ in copies]:
            self.wait(started)
        for _ in copies:
            ctx.metrics.inc(REMOTE_COPY_REQUESTS, tp)
        began = time.monotonic()
        try:
            customs = ctx.rsm.copy_log_segments_data(copies)
        except (RemoteStorageError, OSError) as e:
            first, last = copies[0][0], copies[-1][0]
            for md, _ in copies:
                ctx.metrics.inc(REMOTE_COPY_ERRORS, tp)
                log_event(
                    log,
                    logging.WARNING,
                    "remote_copy_failed",
                    tp,
                    segment_id=md.segment_id,
                    start_offset=md.start_offset,
                    end_offset=md.end_offset,
                    error=f"{type(e).__name__}: {e}",
                )
            for md, _ in copies:
                self.delete_segment(md, reason="failed copy")
            raise RemoteStorageError(
                f"{tp}: copy of segments {first.start_offset}..{last.end_offset} failed"
            ) from e
        if self.cancelled:
            # This broker stopped leading during the copy: only the leader finishes copies
            # (its epoch lineage decides what the remote tier holds). The segments stay
            # COPY_SEGMENT_STARTED, dangling copies the next leader deletes (KIP-405).
            log.info(
                "%s: no longer the leader; segments %d..%d left to the next leader",
                tp,
                copies[0][0].start_offset,
                copies[-1][0].end_offset,
            )
            return False
        ms = round((time.monotonic() - began) * 1000)
        # In offset order, in one ordered write (one metadata sync for the batch): a
        # FINISHED stored without an earlier segment's would make the RLMM's highest remote
        # offset jump over a segment that may never finish (a failure, a crash), and the
        # next run would not copy that segment's offsets. The RLMM stores them in the order
        # given, so a crash keeps a prefix of them.
        self.wait(
            ctx.rlmm.update_remote_log_segment_metadata_in_order(
                [
                    RemoteLogSegmentMetadataUpdate(
                        md.remote_log_segment_id, ctx.clock(), custom,
                        _S.COPY_SEGMENT_FINISHED, ctx.broker_id,
                    )
                    for (md, _), custom in zip(copies, customs, strict=True)
                ]
            )
        )  # fmt: skip
        with plog.lock:
            plog.highest_offset_in_remote_storage = max(
                plog.highest_offset_in_remote_storage, copies[-1][0].end_offset
            )
        for md, _ in copies:
            ctx.metrics.inc(REMOTE_COPY_BYTES, tp, md.segment_size_in_bytes)
            if ctx.copy_quota is not None:
                ctx.copy_quota.record(md.segment_size_in_bytes)
            log_event(
                log,
                logging.INFO,
                "remote_copy",
                tp,
                segment_id=md.segment_id,
                start_offset=md.start_offset,
                end_offset=md.end_offset,
                bytes=md.segment_size_in_bytes,
                ms=ms,
                batch=len(copies),
            )
        self._apply_local_retention()
        return True

    def _apply_local_retention(self) -> None:
        """Apply the partition's local retention now that more of it is remote, rather than
        at the log manager's next retention check (``log.retention.check.interval.ms``,
        5 minutes by default): a partition produced at 20 MB/s would otherwise keep up to a
        check interval's bytes beyond ``local.retention.*``. Kafka waits for the check; the
        rule applied is the same (``PartitionLog.deletable_segments``: only what is wholly
        remote, only past local retention)."""
        if self.cancelled:
            return  # the partition may be closing: its retention is no longer this task's
        try:
            self.plog.delete_old_segments()
        except (CoreError, OSError):
            log.exception("%s: local retention after a copy failed", self.tp)

    def _delete_dangling_copies(self) -> None:
        """Delete copies a crash (or a failed cleanup) left in COPY_SEGMENT_STARTED. Runs of
        a task never overlap, so none of them is in progress now."""
        for md in list(self.ctx.rlmm.list_remote_log_segments(self.tp)):
            if md.state == _S.COPY_SEGMENT_STARTED:
                self.delete_segment(md, reason="dangling copy")


class _EmptySnapshot:
    """An empty producer snapshot file, written once per process (its content is always
    the same) rather than in a fresh scratch directory per copied segment."""

    _lock = threading.Lock()
    _scratch: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    def path(cls) -> Path:
        with cls._lock:
            if cls._scratch is None or not Path(cls._scratch.name).is_dir():
                cls._scratch = tempfile.TemporaryDirectory(prefix="tierlog-copy-")
            path = Path(cls._scratch.name) / "empty.snapshot"
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(encode_snapshot([]))
                tmp.replace(path)
            return path


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


class ExpirationTask(RLMTask):
    """Deletes the partition's remote segments past retention (see the module doc)."""

    kind = "expiration"

    def __init__(self, ctx: TaskContext, tp: TopicIdPartition, plog: PartitionLog) -> None:
        super().__init__(ctx, tp, plog)
        self._kept_warned: set[uuid.UUID] = set()  # segments _warn_kept already reported

    def run_once(self) -> int:
        """One run; returns the number of segments deleted.

        Raises:
            RemoteStorageError: a deletion failed (the next run resumes it).
        """
        ctx, tp, plog = self.ctx, self.tp, self.plog
        if not ctx.rlmm.is_ready(tp):
            return 0
        cfg = plog.config
        segments = list(ctx.rlmm.list_remote_log_segments(tp))
        deleted = 0
        if not cfg.remote_storage_enable:
            if cfg.remote_log_delete_on_disable:  # KIP-950: tiering off, remote data goes
                for md in segments:
                    if md.state != _S.DELETE_SEGMENT_FINISHED:
                        self.delete_segment(md, reason="tiering disabled")
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
        off_lineage = [md for md in finished if not is_within_lineage(md, log_end, lineage)]
        # An unclean election's leftovers (segments of epochs the lineage truncated away)
        # go, once every offset they could still serve is in a segment of the lineage or
        # in the local log. Segments off the lineage without such an epoch are kept (a
        # later unclean election may need them: KIP-405's scenario 5) until the log start
        # offset passes them.
        orphans = [
            md
            for md in off_lineage
            if (has_truncated_epoch(md, lineage) and self._served_elsewhere(md, lineage, valid))
            or md.end_offset < plog.log_start_offset
        ]
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
            if (
                not is_within_lineage(md, log_end, lineage)
                and (has_truncated_epoch(md, lineage) or md.end_offset < plog.log_start_offset)
            )
            or _covered(md, valid)
        ]
        unfinished = {md.segment_id for md in deleting} - {md.segment_id for md in redundant}
        candidates = sorted(
            valid + [md for md in deleting if md.segment_id in unfinished],
            key=lambda m: m.start_offset,
        )
        doomed, reason = self._expired(candidates)
        doomed_ids = {md.segment_id for md in doomed}
        if doomed:
            new_start = min(doomed[-1].end_offset + 1, plog.high_watermark)
            plog.maybe_increment_log_start_offset(new_start, f"remote {reason}")
        for md in redundant:
            self.delete_segment(md, reason="resumed deletion")
        for md in doomed:
            resumed = md.state == _S.DELETE_SEGMENT_STARTED
            self.delete_segment(md, reason=f"resumed deletion ({reason})" if resumed else reason)
        for md in orphans:
            self.delete_segment(md, reason="outside the leader-epoch lineage")
        deleted += len(redundant) + len(doomed) + len(orphans)
        for md in deleting:
            if md.segment_id in unfinished and md.segment_id not in doomed_ids:
                self._warn_kept(md)

        kept = [md for md in valid if md.segment_id not in doomed_ids]
        ctx.metrics.set(REMOTE_LOG_SIZE_BYTES, tp, sum(m.segment_size_in_bytes for m in kept))
        ctx.metrics.set(REMOTE_LOG_METADATA_COUNT, tp, len(kept))
        ctx.metrics.set(REMOTE_DELETE_LAG_BYTES, tp, 0)
        return deleted

    def _served_elsewhere(
        self,
        md: RemoteLogSegmentMetadata,
        lineage: dict[int, int],
        valid: list[RemoteLogSegmentMetadata],
    ) -> bool:
        """Whether every offset ``md`` may serve under the lineage is also in a segment of
        the lineage or in the local log."""
        local_start = self.plog.local_log_start_offset
        ranges = sorted((m.start_offset, m.end_offset) for m in valid)
        for lo, hi in served_ranges(md, lineage):
            need = lo
            for start, end in ranges:
                if end < need:
                    continue
                if start > need:
                    break
                need = end + 1
            if need <= hi and need < local_start:
                return False
        return True

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
        self, valid: list[RemoteLogSegmentMetadata]
    ) -> tuple[list[RemoteLogSegmentMetadata], str]:
        """The oldest segments past retention, and the reason of the last one."""
        plog = self.plog
        cfg = plog.config
        now = self.ctx.clock()
        log_start = plog.log_start_offset
        breach = 0
        if cfg.retention_bytes >= 0:
            # Kafka's size (RLMExpirationTask.buildRetentionSizeData): the remote segments
            # plus the local segments above the highest remote offset. That offset is taken
            # from the segments summed here, not from the log's
            # highest_offset_in_remote_storage: the copy task moves that only after
            # COPY_SEGMENT_FINISHED is recorded, so in between a just-copied segment would
            # count twice, remote and local, and one segment too many would go.
            remote = sum(m.segment_size_in_bytes for m in valid)
            highest = max((m.end_offset for m in valid), default=-1)
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


class FollowerTask(RLMTask):
    """Follows the leader's copies: ``highest_offset_in_remote_storage`` of this replica's
    log moves with the remote tier, so that local retention of a follower deletes only what
    is safely remote (Kafka's RLMFollowerTask)."""

    kind = "follower"

    def run_once(self) -> int:
        """One run; returns 0 (a follower copies and deletes nothing).

        Raises:
            RemoteStorageError: the metadata could not be read.
        """
        ctx, plog = self.ctx, self.plog
        if not ctx.rlmm.is_ready(self.tp):
            return 0
        highest = served_remote_offset(ctx.rlmm, self.tp, plog)
        with plog.lock:
            plog.highest_offset_in_remote_storage = max(
                plog.highest_offset_in_remote_storage, highest
            )
        return 0
