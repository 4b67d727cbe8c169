"""``__consumer_offsets``: the internal compacted topic behind the group coordinator.

Created at start-up with ``offsets.topic.num.partitions`` partitions (an existing topic keeps
its partition count, as in Kafka, where changing it would move groups between partitions)
and Kafka's topic configs: ``cleanup.policy=compact``, ``compression.type=producer``,
``segment.bytes=offsets.topic.segment.bytes``. A group's records all go to partition
``partition_for(group)``; clients may read the topic but not produce to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from core.clock import now_ms
from core.log.producer_state import read_txn_marker
from core.records.builder import RecordBatchBuilder
from core.records.record import ControlRecordType, decode_records
from core.server.coordinator_records import partition_for
from core.server.topics import TopicInfo, TopicRegistry

if TYPE_CHECKING:
    from core.server.replica_manager import Partition

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# One appended batch stays well under max.message.bytes (1 MiB by default).
MAX_BATCH_BYTES = 512 * 1024

CoordinatorRecord = tuple[bytes, bytes | None]


def offsets_topic_configs(segment_bytes: int) -> dict[str, str]:
    """The topic-level configs Kafka gives ``__consumer_offsets``."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(segment_bytes),
    }


def ensure_offsets_topic(topics: TopicRegistry, partitions: int, segment_bytes: int) -> TopicInfo:
    """The registry's ``__consumer_offsets``, created if missing."""
    info = topics.get(OFFSETS_TOPIC)
    if info is None:
        info = topics.create(OFFSETS_TOPIC, partitions, offsets_topic_configs(segment_bytes))
        log.info("created %s with %d partitions", OFFSETS_TOPIC, partitions)
    elif info.partitions != partitions:
        log.warning(
            "%s has %d partitions; offsets.topic.num.partitions=%d is ignored (changing it "
            "would move groups to other partitions)",
            OFFSETS_TOPIC,
            info.partitions,
            partitions,
        )
    return info


# Appends one batch to the leader of a partition and returns its log end offset after it.
BatchAppender = Callable[[int, bytearray], int]


class OffsetsTopic:
    """Appends coordinator records to ``__consumer_offsets`` and replays them.

    Args:
        partition: the leader partition of ``__consumer_offsets`` with that index.
        num_partitions: the topic's partition count (settable: in a cluster the topic is
            created after the broker starts).
        on_append: called with the partition index after each append (to wake fetches of
            consumers reading the topic); may be called from any thread.
        appender: how a batch is appended (the broker's: on its event loop, through its
            replica manager, from the flushing thread); default: straight to the
            partition's log, for tools and tests.
        clock: milliseconds since the epoch, the records' timestamps.
    """

    def __init__(
        self,
        partition: Callable[[int], Partition | None],
        num_partitions: int,
        *,
        on_append: Callable[[int], None] | None = None,
        appender: BatchAppender | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._partition = partition
        self.num_partitions = num_partitions
        self._on_append = on_append
        self._appender = appender or self._append_to_log
        self._clock = clock

    def _append_to_log(self, index: int, batch: bytearray) -> int:
        partition = self._leader(index)
        partition.append_as_leader(batch)
        return partition.log.log_end_offset

    def partition_for(self, group: str) -> int:
        return partition_for(group, self.num_partitions)

    def _leader(self, index: int) -> Partition:
        partition = self._partition(index)
        if partition is None:
            raise LookupError(f"{OFFSETS_TOPIC}-{index} is not open on this broker")
        return partition

    def append(self, index: int, records: Sequence[CoordinatorRecord]) -> int:
        """Append records (key, value or None for a tombstone) to partition ``index``, in
        batches of at most ``MAX_BATCH_BYTES``; returns the log end offset after them (the
        high watermark their replication waits for). Not idempotent: a retry appends again
        (harmless: replay and compaction keep the latest record per key).

        Raises:
            KafkaStorageError: the write failed (earlier batches may be in the log).
            LookupError: the partition is not open (or no longer led here).
            CoreError: the leader refused the append (NOT_LEADER_OR_FOLLOWER, ...).
        """
        if not records:
            return -1
        now = self._clock()
        builder = RecordBatchBuilder()
        size = 0
        end = -1
        for key, value in records:
            builder.append(value, key=key, timestamp=now)
            size += len(key) + (len(value) if value is not None else 0) + 16
            if size >= MAX_BATCH_BYTES:
                end = self._appender(index, builder.build())
                builder, size = RecordBatchBuilder(), 0
        if len(builder):
            end = self._appender(index, builder.build())
        if self._on_append is not None:
            self._on_append(index)
        return end

    def append_transactional(
        self,
        index: int,
        records: Sequence[CoordinatorRecord],
        producer_id: int,
        producer_epoch: int,
    ) -> int:
        """Append TxnOffsetCommit records as one transactional batch of the producer (Kafka
        writes them so): they count once the coordinator's COMMIT marker follows them, and
        an ABORT marker drops them, at replay as in memory. Returns the log end offset after
        the batch (the high watermark its replication waits for).

        Raises:
            InvalidProducerEpochError: an older epoch than the producer's in the partition.
            KafkaStorageError, LookupError: as ``append``.
        """
        partition = self._leader(index)
        now = self._clock()
        builder = RecordBatchBuilder(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=0,
            is_transactional=True,
        )
        for key, value in records:
            builder.append(value, key=key, timestamp=now)
        partition.append_as_coordinator(builder.build())
        if self._on_append is not None:
            self._on_append(index)
        return partition.log.log_end_offset

    def sync(self, indexes: Iterable[int]) -> None:
        """fsync the given partitions (blocking).

        Raises:
            KafkaStorageError: the fsync failed.
        """
        for index in sorted(set(indexes)):
            self._leader(index).log.flush()

    def replay(
        self,
        indexes: Iterable[int] | None = None,
        open_transactions: dict[int, list[tuple[int, CoordinatorRecord]]] | None = None,
    ) -> Iterator[CoordinatorRecord]:
        """Every record of the given partitions (default: all) from its log start,
        partition by partition, in offset order (the order that rebuilds the
        coordinator's state).

        Transactional offset commits count at their COMMIT marker and are dropped at an
        ABORT; those still open at the end are put in ``open_transactions`` (producer id
        -> [(partition, record)]) for the store to complete when their marker comes."""
        for index in range(self.num_partitions) if indexes is None else indexes:
            plog = self._leader(index).log
            start = plog.log_start_offset
            open_txns: dict[int, list[tuple[int, CoordinatorRecord]]] = {}
            for segment in plog.segments():
                for _, header in segment.log.scan_batches(0):
                    if header.last_offset < start:
                        continue
                    if header.is_control:
                        if not header.has_producer_id:
                            continue
                        marker = read_txn_marker(header)
                        done = open_txns.pop(header.producer_id, [])
                        if marker is not None and marker.control_type == ControlRecordType.COMMIT:
                            yield from (record for _, record in done)
                        continue
                    for record in decode_records(header, verify=False):
                        if record.offset >= start and record.key is not None:
                            if header.is_transactional:
                                txn = open_txns.setdefault(header.producer_id, [])
                                txn.append((index, (record.key, record.value)))
                            else:
                                yield record.key, record.value
            if open_transactions is not None:
                for pid, records in open_txns.items():
                    open_transactions.setdefault(pid, []).extend(records)
