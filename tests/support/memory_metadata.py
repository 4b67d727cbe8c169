"""An in-memory ``__remote_log_metadata`` topic, and a TopicBasedRemoteLogMetadataManager
over it, for the rlmm and tiered tests."""

from __future__ import annotations

import threading

from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.topic_client import MetadataRecord, MetadataTopicError
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

S = RemoteLogSegmentState


class MemoryTopic:
    """An in-memory ``MetadataTopicClient`` that counts the records it serves.

    It models what a crash of the machine keeps: a durable append makes its partition's
    records up to it durable (as a flush of the log does), and ``crash`` drops the rest."""

    def __init__(self, partitions: int = 5) -> None:
        self.partitions: list[list[bytes]] | None = None
        self.wanted = partitions
        self.lock = threading.Lock()
        self.records_read = 0
        self.durable_end: dict[int, int] = {}

    def ensure_topic(self, num_partitions: int) -> None:
        if self.partitions is None:
            self.partitions = [[] for _ in range(num_partitions)]
        elif len(self.partitions) != num_partitions:
            raise MetadataTopicError(f"has {len(self.partitions)} partitions")

    def partition_count(self) -> int:
        assert self.partitions is not None
        return len(self.partitions)

    def append(self, partition: int, value: bytes, *, durable: bool = True) -> int:
        assert self.partitions is not None
        with self.lock:
            self.partitions[partition].append(value)
            offset = len(self.partitions[partition]) - 1
            if durable:
                self.durable_end[partition] = offset + 1
            return offset

    def crash(self) -> None:
        """Drop every record no durable append covered (a power loss)."""
        assert self.partitions is not None
        with self.lock:
            for i, records in enumerate(self.partitions):
                del records[self.durable_end.get(i, 0) :]

    def read(self, partition: int, start_offset: int, max_records: int) -> list[MetadataRecord]:
        assert self.partitions is not None
        with self.lock:
            values = self.partitions[partition][start_offset : start_offset + max_records]
        self.records_read += len(values)
        return [MetadataRecord(partition, start_offset + i, v) for i, v in enumerate(values)]

    def end_offset(self, partition: int) -> int:
        assert self.partitions is not None
        return len(self.partitions[partition])

    def close(self) -> None:
        pass


def manager(topic: MemoryTopic, log_dir=None) -> TopicBasedRemoteLogMetadataManager:
    m = TopicBasedRemoteLogMetadataManager(topic)
    configs = {"remote.log.metadata.topic.num.partitions": "5"}
    if log_dir is not None:
        configs["log.dir"] = str(log_dir)
    m.configure(configs)
    return m


def segment(tp: TopicIdPartition, start: int, end: int, epochs=None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp),
        start,
        end,
        max_timestamp_ms=start,
        broker_id=1,
        event_timestamp_ms=1,
        segment_size_in_bytes=100,
        segment_leader_epochs=epochs or {0: start},
    )


def finish(md: RemoteLogSegmentMetadata, state: S = S.COPY_SEGMENT_FINISHED):
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, None, state, 1)


def ready(m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition) -> None:
    m.on_partition_leadership_changes({tp}, set())
    assert m.wait_ready(tp, 10)
