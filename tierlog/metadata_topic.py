"""The in-process client of ``__remote_log_metadata`` inside a broker.

The RLMM calls it from background threads. Appends go through the broker's own produce
path on its event loop (so consumers of the topic are woken as for any topic). A durable
append then fsyncs the partition up to and including its record, on the calling thread,
before the offset is returned; that sync also covers every earlier record of the partition,
so the RLMM asks for it only where a crash must not lose the event (COPY_SEGMENT_FINISHED,
which lets local retention delete the local copy, covers the STARTED before it; see
``rlmm.manager``). Concurrent durable appends share syncs: one whose record an earlier
sync already covered returns without its own (``PartitionLog.flush`` of an offset below
the recovery point does nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.errors import CoreError
from core.records.batch import HEADER_SIZE, RecordBatchHeader
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records
from rlmm.topic_client import METADATA_TOPIC, MetadataRecord, MetadataTopicError

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog
    from core.server.broker import Broker
    from core.server.replica_manager import Partition

# The topic's own settings (Kafka's TopicBasedRemoteLogMetadataManagerConfig): keep every
# event forever; it is the only record of where remote data is.
METADATA_TOPIC_CONFIGS = {"retention.ms": "-1", "cleanup.policy": "delete"}
READ_BYTES = 1 << 20


class InProcessMetadataTopicClient:
    """``MetadataTopicClient`` over a running broker in the same process."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.loop = loop

    def _partition(self, index: int) -> Partition:
        partition = self.broker.replica_manager.partition(METADATA_TOPIC, index)
        if partition is None:
            raise MetadataTopicError(f"{METADATA_TOPIC}-{index} does not exist")
        return partition

    def ensure_topic(self, num_partitions: int) -> None:
        info = self.broker.topics.get(METADATA_TOPIC)
        if info is None:
            future = asyncio.run_coroutine_threadsafe(self._create(num_partitions), self.loop)
            future.result()
            return
        if info.partitions != num_partitions:
            raise MetadataTopicError(
                f"{METADATA_TOPIC} has {info.partitions} partitions but "
                f"remote.log.metadata.topic.num.partitions={num_partitions}: refusing to start "
                "(the metadata partition of every user partition would change)"
            )

    async def _create(self, num_partitions: int) -> None:
        try:
            await self.broker.create_topic(METADATA_TOPIC, num_partitions, METADATA_TOPIC_CONFIGS)
        except CoreError as e:
            raise MetadataTopicError(f"cannot create {METADATA_TOPIC}: {e}") from e

    def partition_count(self) -> int:
        info = self.broker.topics.get(METADATA_TOPIC)
        if info is None:
            raise MetadataTopicError(f"{METADATA_TOPIC} does not exist")
        return info.partitions

    def append(self, partition: int, value: bytes, *, durable: bool = True) -> int:
        target = self._partition(partition)
        batch = metadata_batch(value)

        async def do_append() -> int:
            return self.broker.replica_manager.append(target, batch).first_offset

        try:
            offset = asyncio.run_coroutine_threadsafe(do_append(), self.loop).result()
            if durable:
                target.log.flush(offset + 1)
        except CoreError as e:
            raise MetadataTopicError(f"append to {METADATA_TOPIC}-{partition} failed: {e}") from e
        return offset

    def append_all(self, partition: int, values: Sequence[bytes], *, durable: bool = True) -> int:
        """``MetadataTopicBatchAppender.append_all``: one record batch, appended in one pass
        on the event loop (a copy batch's COPY_SEGMENT_FINISHED events: one wait for the
        loop and one sync instead of one each)."""
        target = self._partition(partition)
        batch = metadata_batch(*values)

        async def do_append() -> int:
            return self.broker.replica_manager.append(target, batch).first_offset

        try:
            last = asyncio.run_coroutine_threadsafe(do_append(), self.loop).result()
            last += len(values) - 1
            if durable:
                target.log.flush(last + 1)
        except CoreError as e:
            raise MetadataTopicError(f"append to {METADATA_TOPIC}-{partition} failed: {e}") from e
        return last

    def read(self, partition: int, start_offset: int, max_records: int) -> list[MetadataRecord]:
        plog = self._partition(partition).log
        return read_metadata_records(plog, partition, start_offset, max_records)

    def end_offset(self, partition: int) -> int:
        return self._partition(partition).high_watermark

    def close(self) -> None:
        return None


def read_metadata_records(
    plog: PartitionLog, partition: int, start_offset: int, max_records: int
) -> list[MetadataRecord]:
    """Records of a metadata partition's log from ``start_offset``, below its high
    watermark, at most ``max_records``: ``MetadataTopicClient.read`` over a local log."""
    out: list[MetadataRecord] = []
    offset = max(start_offset, plog.log_start_offset)
    while len(out) < max_records and offset < plog.high_watermark:
        info = plog.read(offset, READ_BYTES, max_offset=plog.high_watermark)
        if info.records is None:
            break
        data = info.records.read_bytes()
        advanced = False
        position = 0
        # Whole batches only: a slice may end inside one, which the next read starts at.
        while position + HEADER_SIZE <= len(data):
            header = RecordBatchHeader(data, position)
            if position + header.size_in_bytes > len(data):
                break
            for record in decode_records(header):
                if record.offset >= offset and record.value is not None:
                    out.append(MetadataRecord(partition, record.offset, record.value))
            offset = header.next_offset
            position += header.size_in_bytes
            advanced = True
        if not advanced:
            break
    return out[:max_records]


def metadata_batch(*values: bytes) -> bytearray:
    """Metadata events as the record batch appended for them (null keys), in order."""
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(value, key=None)
    return builder.build()
