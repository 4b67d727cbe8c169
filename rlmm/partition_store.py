"""The remote log metadata of the user partitions a broker follows (Kafka's
RemotePartitionMetadataStore): one ``RemoteLogMetadataCache`` per partition, and each
partition's deletion state (DELETE_PARTITION_MARKED -> STARTED -> FINISHED)."""

from __future__ import annotations

import threading

from rlmm.metadata_cache import RemoteLogMetadataCache
from tiered.api import (
    InvalidStateTransitionError,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
)


class RemotePartitionMetadataStore:
    """The caches of the user partitions this broker follows, and their deletion state
    (Kafka's RemotePartitionMetadataStore)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    def cache(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache:
        """The partition's cache.

        Raises:
            RemoteResourceNotFoundError: the partition is unknown, or its deletion finished.
        """
        cache = self._caches.get(topic_id_partition)
        if cache is None:
            raise RemoteResourceNotFoundError(f"no remote log metadata for {topic_id_partition}")
        return cache

    def get_or_create(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache:
        with self._lock:
            cache = self._caches.get(topic_id_partition)
            if cache is None:
                cache = self._caches[topic_id_partition] = RemoteLogMetadataCache(
                    topic_id_partition
                )
            return cache

    def install(self, cache: RemoteLogMetadataCache) -> None:
        """Put a cache rebuilt from a snapshot in place of the partition's."""
        with self._lock:
            self._caches[cache.topic_id_partition] = cache

    def remove(self, topic_id_partition: TopicIdPartition) -> None:
        """Drop the partition's state (it is no longer hosted here); idempotent."""
        with self._lock:
            self._caches.pop(topic_id_partition, None)
            self._deletes.pop(topic_id_partition, None)

    def partitions(self) -> list[TopicIdPartition]:
        return list(self._caches)

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """See ``RemoteLogMetadataCache.add_copy_in_progress_segment``; creates the cache."""
        self.get_or_create(metadata.topic_id_partition).add_copy_in_progress_segment(metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """See ``RemoteLogMetadataCache.update_remote_log_segment_metadata``.

        Raises:
            RemoteResourceNotFoundError: the partition or the segment is unknown.
        """
        self.cache(update.topic_id_partition).update_remote_log_segment_metadata(update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Record a step of deleting the partition's remote data.

        The cache keeps serving until DELETE_PARTITION_FINISHED, which drops the partition
        (later reads raise ``RemoteResourceNotFoundError``, as in Kafka). Repeats are
        idempotent.

        Raises:
            InvalidStateTransitionError: the state does not follow the current one.
        """
        tp = metadata.topic_id_partition
        with self._lock:
            current = self._deletes.get(tp)
            source = None if current is None else current.state
            if not RemotePartitionDeleteState.is_valid_transition(source, metadata.state):
                raise InvalidStateTransitionError(
                    f"partition {tp}: invalid delete transition "
                    f"{'none' if source is None else source.name} -> {metadata.state.name}"
                )
            if metadata.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self._deletes.pop(tp, None)
                self._caches.pop(tp, None)
            else:
                self._deletes[tp] = metadata

    def partition_delete_state(
        self, topic_id_partition: TopicIdPartition
    ) -> RemotePartitionDeleteState | None:
        """The partition's deletion step, or None when it is not being deleted."""
        current = self._deletes.get(topic_id_partition)
        return None if current is None else current.state

    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """Raises: RemoteResourceNotFoundError: the partition is unknown or deleted."""
        return self.cache(topic_id_partition).remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        """Raises: RemoteResourceNotFoundError: the partition is unknown or deleted."""
        return self.cache(topic_id_partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Raises: RemoteResourceNotFoundError: the partition is unknown or deleted."""
        return self.cache(topic_id_partition).list_remote_log_segments(leader_epoch)

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        """Raises: RemoteResourceNotFoundError: the partition is unknown or deleted."""
        return self.cache(topic_id_partition).remote_log_size(leader_epoch)
