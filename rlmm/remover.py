"""RemotePartitionRemover: deletes the remote data of partitions marked for deletion.

KIP-405's partition deletion lifecycle. Deleting a tiered topic publishes
DELETE_PARTITION_MARKED for each of its partitions (the controller does, see
docs/ARCHITECTURE.md). The remover acts on the marked partitions whose metadata its RLMM has
loaded and caught up: on a broker, those of the ``__remote_log_metadata`` partitions it
leads (``TopicBasedRemoteLogMetadataManager.follow_metadata_partitions``), so exactly one
broker runs each deletion, and the next leader of that metadata partition resumes it after
a restart or failover. It runs at once when the RLMM loads a partition being deleted
(``wake``) and every ``remote.partition.remover.task.interval.ms`` (1 h by default): for
each marked partition it publishes DELETE_PARTITION_STARTED, deletes every segment through
the RSM (DELETE_SEGMENT_STARTED -> ``delete_log_segment_data`` -> DELETE_SEGMENT_FINISHED),
publishes DELETE_PARTITION_FINISHED, calls ``on_partition_deleted`` (the broker deletes the
topic manifest there) and releases the partition's metadata (``on_stop_partitions``). A run
interrupted by a crash resumes from STARTED: every step is idempotent.

A marked partition whose topic still exists (``topic_exists``, the broker's registry) is not
touched: topic ids are never reused, so such a mark was not written by a topic deletion (a
forged or mistaken event in ``__remote_log_metadata``); it is logged and left alone.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from core.clock import now_ms
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from tiered.api import (
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

INTERVAL_KEY = "remote.partition.remover.task.interval.ms"
DEFAULT_INTERVAL_MS = 3_600_000
WRITE_TIMEOUT_S = 60

_SEG = RemoteLogSegmentState
_PART = RemotePartitionDeleteState


class RemotePartitionRemover:
    """Runs the deletion lifecycle of marked partitions, periodically or on demand."""

    def __init__(
        self,
        rlmm: TopicBasedRemoteLogMetadataManager,
        rsm: RemoteStorageManager,
        broker_id: int,
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        clock: Callable[[], int] = now_ms,
        topic_exists: Callable[[uuid.UUID], bool] = lambda topic_id: False,
        on_partition_deleted: Callable[[TopicIdPartition], None] = lambda tp: None,
    ) -> None:
        self.on_partition_deleted = on_partition_deleted
        self.rlmm = rlmm
        self.topic_exists = topic_exists
        self._refused: set[TopicIdPartition] = set()  # marks already reported
        self.rsm = rsm
        self.broker_id = broker_id
        self.interval_ms = interval_ms
        self.clock = clock
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def mark(self, topic_id_partition: TopicIdPartition) -> None:
        """Publish DELETE_PARTITION_MARKED (the topic was deleted); blocks until stored."""
        self._publish_partition(topic_id_partition, _PART.DELETE_PARTITION_MARKED)

    def marked_partitions(self) -> list[TopicIdPartition]:
        """Partitions marked (or started) for deletion whose topic is gone, of those whose
        metadata is loaded and caught up (a partition still loading may be finished)."""
        store = self.rlmm.store
        out = []
        for tp in store.partitions():
            if not self.rlmm.is_ready(tp):
                continue
            if store.partition_delete_state(tp) not in (
                _PART.DELETE_PARTITION_MARKED,
                _PART.DELETE_PARTITION_STARTED,
            ):
                continue
            if self.topic_exists(tp.topic_id):
                if tp not in self._refused:
                    self._refused.add(tp)
                    log.warning(
                        "%s is marked for deletion in the remote log metadata but its topic "
                        "exists: its remote data is kept",
                        tp,
                    )
                continue
            out.append(tp)
        return out

    def run_once(self) -> int:
        """Delete the remote data of every marked partition; returns how many finished.

        A partition whose deletion fails (the store is down) stays STARTED and is retried
        at the next run.
        """
        finished = 0
        for tp in self.marked_partitions():
            try:
                self._delete_partition(tp)
                finished += 1
            except RemoteStorageError:
                log.exception("deleting the remote data of %s failed; retrying next run", tp)
        return finished

    def _delete_partition(self, tp: TopicIdPartition) -> None:
        self._publish_partition(tp, _PART.DELETE_PARTITION_STARTED)
        try:
            segments = list(self.rlmm.store.cache(tp).list_remote_log_segments(None))
        except RemoteResourceNotFoundError:
            # Marked again after it finished (a new controller repeats the marks of a topic
            # deletion in progress): there is nothing left to delete.
            segments = []
        for md in segments:
            if md.state != _SEG.DELETE_SEGMENT_STARTED:
                self._publish_segment(md.remote_log_segment_id, _SEG.DELETE_SEGMENT_STARTED)
            self.rsm.delete_log_segment_data(md)
            self._publish_segment(md.remote_log_segment_id, _SEG.DELETE_SEGMENT_FINISHED)
        self._publish_partition(tp, _PART.DELETE_PARTITION_FINISHED)
        try:
            self.on_partition_deleted(tp)
        except RemoteStorageError:
            log.exception("%s: cleaning up after the deletion of its remote data failed", tp)
        # The partition is gone from this broker too: its metadata was kept loaded for this
        # deletion only (see RemoteLogManager.on_stop_partitions).
        self.rlmm.on_stop_partitions({tp})
        log.info("deleted the remote data of %s: %d segments", tp, len(segments))

    def _publish_segment(self, segment_id, state: RemoteLogSegmentState) -> None:
        update = RemoteLogSegmentMetadataUpdate(
            segment_id, self.clock(), None, state, self.broker_id
        )
        self.rlmm.update_remote_log_segment_metadata(update).result(WRITE_TIMEOUT_S)

    def _publish_partition(self, tp: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        event = RemotePartitionDeleteMetadata(tp, state, self.clock(), self.broker_id)
        self.rlmm.put_remote_partition_delete_metadata(event).result(WRITE_TIMEOUT_S)

    # -- the periodic task -----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name="remote-partition-remover", daemon=True
        )
        self._thread.start()

    def wake(self) -> None:
        """Run now (the RLMM loaded a partition being deleted)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_ms / 1000)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.run_once()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)
