"""Replaying ``__remote_log_metadata`` into per-partition caches, without a broker.

The CLI (``tierlog metadata``) and the Spark jobs read the topic with a metadata-topic client
(over Kafka, or offline from log dirs) and apply every event in order to a
``RemotePartitionMetadataStore``; events that do not apply are reported, not fatal.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from rlmm.metadata_cache import RemoteLogMetadataCache
from rlmm.partition_store import RemotePartitionMetadataStore
from rlmm.partitioner import metadata_partition
from rlmm.serde import MetadataSerdeError, RemoteLogSegmentMetadataSnapshot, decode
from rlmm.topic_client import METADATA_TOPIC
from tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteStorageError,
    TopicIdPartition,
)


@dataclass
class TracedEvent:
    partition: int
    offset: int
    api_key: int
    version: int
    event: object
    applied: bool = True
    problem: str | None = None


@dataclass
class Replay:
    """Every user partition's cache after replaying the topic."""

    num_partitions: int
    store: RemotePartitionMetadataStore = field(default_factory=RemotePartitionMetadataStore)
    delete_states: dict[TopicIdPartition, RemotePartitionDeleteState] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    traced: list[TracedEvent] = field(default_factory=list)

    def partitions(self) -> list[TopicIdPartition]:
        """Every user partition seen, in listing order."""
        return sorted({*self.store.partitions(), *self.delete_states}, key=partition_key)

    def cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache | None:
        try:
            return self.store.cache(tp)
        except RemoteStorageError:
            return None


def partition_key(tp: TopicIdPartition) -> tuple[str, int, bytes]:
    """The listing order of user partitions (and what a cursor records)."""
    return tp.topic, tp.partition, tp.topic_id.bytes


def _event_partition(event: object) -> TopicIdPartition | None:
    if isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
        return event.topic_id_partition
    if isinstance(event, RemotePartitionDeleteMetadata):
        return event.topic_id_partition
    return None


def _event_segment(event: object) -> uuid.UUID | None:
    if isinstance(event, RemoteLogSegmentMetadata):
        return event.segment_id
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return event.remote_log_segment_id.id
    return None


def replay(
    records: Iterable[tuple[int, int, bytes]],
    num_partitions: int,
    trace: uuid.UUID | None = None,
) -> Replay:
    """Apply every event of the topic to per-partition caches.

    Args:
        records: ``(metadata partition, offset, value)`` of every record, in offset order per
            partition.
        num_partitions: the metadata topic's partition count (to check where events are).
        trace: a segment id whose events to keep in ``Replay.traced``.
    """
    result = Replay(num_partitions)
    store = result.store
    for partition, offset, value in records:
        where = f"{METADATA_TOPIC}-{partition} offset {offset}"
        try:
            decoded = decode(value)
        except MetadataSerdeError as e:
            result.warnings.append(f"{where}: cannot decode the value: {e}")
            continue
        event = decoded.event
        traced = None
        if trace is not None and _event_segment(event) == trace:
            traced = TracedEvent(partition, offset, decoded.api_key, decoded.version, event)
            result.traced.append(traced)
        applied, problem = _apply(result, store, partition, event)
        if problem is not None:
            result.warnings.append(f"{where}: {problem}")
        if traced is not None:
            traced.applied, traced.problem = applied, problem
    return result


def _apply(
    result: Replay, store: RemotePartitionMetadataStore, partition: int, event: object
) -> tuple[bool, str | None]:
    """Apply one event: whether it applied, and what is wrong with it (or None)."""
    tp = _event_partition(event)
    if tp is None:
        kind = "snapshot" if isinstance(event, RemoteLogSegmentMetadataSnapshot) else "unknown"
        return False, f"a {kind} record does not belong in {METADATA_TOPIC}: skipped"
    expected = metadata_partition(tp, result.num_partitions)
    try:
        if isinstance(event, RemoteLogSegmentMetadata):
            store.add_copy_in_progress_segment(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            store.update_remote_log_segment_metadata(event)
        elif isinstance(event, RemotePartitionDeleteMetadata):
            store.put_remote_partition_delete_metadata(event)
            result.delete_states[tp] = event.state
    except (RemoteStorageError, ValueError) as e:
        return False, f"{type(event).__name__} not applied: {e}"
    if expected != partition:
        return True, (
            f"{tp} belongs in partition {expected} of {result.num_partitions} "
            "(applied anyway; is the partition count right?)"
        )
    return True, None
