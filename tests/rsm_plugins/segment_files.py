"""Real segment files for the RSM contract tests, written by core's PartitionLog.

``write_segments`` appends idempotent-producer batches in two leader epochs, rolls, and
returns each rolled segment's files as ``LogSegmentData`` with the facts its
``RemoteLogSegmentMetadata`` needs. The first segment also gets an aborted transaction, so
it has a ``.txnindex``; the others have none (``transaction_index`` None).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from core.log.config import LogConfig
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.partition_log import PartitionLog
from core.log.txn_index import AbortedTxn
from core.records.builder import RecordBatchBuilder
from tiered.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

PRODUCER_ID = 4242


@dataclass(frozen=True)
class SegmentFiles:
    """One rolled segment: its files and the facts of its metadata."""

    data: LogSegmentData
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    size: int
    leader_epochs: dict[int, int]

    def log_bytes(self) -> bytes:
        return self.data.log_segment.read_bytes()

    def metadata(
        self, tp: TopicIdPartition, segment_id: uuid.UUID | None = None
    ) -> RemoteLogSegmentMetadata:
        """Fresh metadata (COPY_SEGMENT_STARTED) for a copy of this segment."""
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(tp, segment_id or uuid.uuid4()),
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=1,
            event_timestamp_ms=1_700_000_000_000,
            segment_size_in_bytes=self.size,
            segment_leader_epochs=self.leader_epochs,
            txn_index_empty=self.data.transaction_index is None,
        )


def _batch(first_value: int, count: int, sequence: int, timestamp: int) -> bytearray:
    builder = RecordBatchBuilder(producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=sequence)
    for i in range(count):
        value = f"value-{first_value + i:08d}-".encode() * 12
        builder.append(value, key=f"k{(first_value + i) % 7}".encode(), timestamp=timestamp + i)
    return builder.build()


def write_segments(
    directory: Path, *, segments: int = 3, batches_per_segment: int = 12
) -> list[SegmentFiles]:
    """Write ``segments`` rolled segments (plus an empty active one) and describe them."""
    config = LogConfig(segment_bytes=64 * 1024 * 1024, index_interval_bytes=512)
    log = PartitionLog(directory / "t-0", "t", 0, config)
    sequence = 0
    for s in range(segments):
        # Epoch 0 for the first segment and the start of the second, epoch 3 afterwards.
        for b in range(batches_per_segment):
            epoch = 0 if s == 0 or (s == 1 and b < batches_per_segment // 2) else 3
            info = log.append_as_leader(
                _batch(sequence, 10, sequence, 1_700_000_000_000 + sequence * 10), epoch
            )
            sequence += 10
        if s == 0:
            log.active_segment.append_aborted_txn(
                AbortedTxn(PRODUCER_ID, info.first_offset, info.last_offset, info.first_offset)
            )
        log.roll()
    log.flush()
    rolled = log.segments()[:-1]
    cache = log.leader_epoch_cache
    out: list[SegmentFiles] = []
    for i, seg in enumerate(rolled):
        next_base = log.segments()[i + 1].base_offset
        end_offset = next_base - 1
        snapshot = log.producer_state.snapshot_file(next_base)
        assert snapshot is not None, f"no producer snapshot at {next_base}"
        # What the RemoteLogManager ships: the checkpoint truncated to the segment's end.
        checkpoint = LeaderEpochCheckpointFile.encode(cache.epoch_entries_in_range(-1, next_base))
        txn = seg.txn_index.path if seg.txn_index.path.exists() else None
        out.append(
            SegmentFiles(
                data=LogSegmentData(
                    log_segment=seg.log.path,
                    offset_index=seg.offset_index.path,
                    time_index=seg.time_index.path,
                    transaction_index=txn,
                    producer_snapshot_index=snapshot,
                    leader_epoch_index=checkpoint,
                ),
                start_offset=seg.base_offset,
                end_offset=end_offset,
                max_timestamp_ms=seg.largest_timestamp,
                size=seg.size,
                leader_epochs=cache.entries_for_range(seg.base_offset, end_offset),
            )
        )
    log.close()
    return out
