"""An archive written the way the broker writes one: segments by core's PartitionLog (keys,
null values, headers, every codec, transactional batches with one aborted transaction),
copied with their indexes and checkpoints by the local-directory RSM plugin."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from pathlib import Path

from core.log.config import LogConfig
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.partition_log import PartitionLog
from core.log.txn_index import AbortedTxn
from core.records.batch import Compression
from core.records.builder import RecordBatchBuilder
from rsm_plugins.local import LocalDirRemoteStorageManager
from spark_jobs.archive import ArchiveConfig
from tiered.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

T0 = 1_700_000_000_000
TXN_PID = 77


@dataclass
class Archive:
    config: ArchiveConfig
    tp: TopicIdPartition
    expected: list[tuple[int, bytes | None, bytes | None, tuple, int]]  # offset,key,value,h,ts
    aborted_offsets: set[int]
    segments: list[RemoteLogSegmentMetadata]


def write_archive(root: Path, *, epochs_split: bool = True, ts_step_ms: int = 1000) -> Archive:
    """120 records (offsets 0..119), record ``n`` timestamped ``T0 + n * ts_step_ms``."""
    log = PartitionLog(root / "log" / "t-0", "t", 0, LogConfig(segment_bytes=1200))
    expected = []
    aborted: set[int] = set()
    codecs = list(Compression)
    seq = 0
    for b in range(40):
        epoch = 0 if (b < 20 or not epochs_split) else 2
        txn = b in (10, 11, 30)
        builder = RecordBatchBuilder(
            compression=codecs[b % len(codecs)],
            producer_id=TXN_PID if txn else -1,
            producer_epoch=0 if txn else -1,
            base_sequence=seq if txn else -1,
            is_transactional=txn,
        )
        if txn:
            seq += 3
        rows = []
        for i in range(3):
            n = b * 3 + i
            key = None if n % 5 == 0 else b"k%d" % n
            value = None if n % 7 == 0 else (b"value-%d-" % n) * 5
            headers = ((f"h{n % 3}", b"x" if n % 2 else None),) if n % 4 == 0 else ()
            builder.append(value, key=key, headers=headers, timestamp=T0 + n * ts_step_ms)
            rows.append((key, value, headers, T0 + n * ts_step_ms))
        info = log.append_as_leader(builder.build(), epoch)
        for i, (key, value, headers, ts) in enumerate(rows):
            expected.append((info.first_offset + i, key, value, headers, ts))
        if b == 11:  # batches 10 and 11 were one transaction, aborted
            first = info.first_offset - 3
            log.active_segment.append_aborted_txn(
                AbortedTxn(TXN_PID, first, info.last_offset, first)
            )
            aborted.update(range(first, info.last_offset + 1))
    log.roll()
    log.flush()
    tp = TopicIdPartition(uuid.UUID(int=99), "orders", 0)
    bucket = root / "bucket"
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"storage.root": str(bucket)})
    cache = log.leader_epoch_cache
    segments = log.segments()
    copied = []
    for n, seg in enumerate(segments[:-1]):
        next_base = segments[n + 1].base_offset
        snapshot = root / f"{next_base:020d}.snapshot"
        snapshot.write_bytes(b"")
        txn = seg.txn_index.path if seg.txn_index.path.exists() else None
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(tp, uuid.uuid4()),
            start_offset=seg.base_offset,
            end_offset=next_base - 1,
            max_timestamp_ms=seg.largest_timestamp,
            broker_id=1,
            event_timestamp_ms=T0,
            segment_size_in_bytes=seg.size,
            segment_leader_epochs=cache.entries_for_range(seg.base_offset, next_base - 1),
            txn_index_empty=txn is None,
        )
        data = LogSegmentData(
            log_segment=seg.log.path,
            offset_index=seg.offset_index.path,
            time_index=seg.time_index.path,
            transaction_index=txn,
            producer_snapshot_index=snapshot,
            leader_epoch_index=LeaderEpochCheckpointFile.encode(
                cache.epoch_entries_in_range(-1, next_base)
            ),
        )
        rsm.copy_log_segment_data(md, data)
        copied.append(md)
    rsm.close()
    log.close()
    config = ArchiveConfig(
        "rsm_plugins.local.LocalDirRemoteStorageManager", {"storage.root": str(bucket)}
    )
    finished = [
        dataclasses.replace(m, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED) for m in copied
    ]
    return Archive(config, tp, expected, aborted, finished)
