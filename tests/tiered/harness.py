"""The tiering test harness: a real PartitionLog, the real topic-based RLMM over an
in-memory metadata topic, and an RSM (a dict-backed one, or the local-directory plugin)."""

from __future__ import annotations

import io
import threading
import uuid
from pathlib import Path

from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.records.builder import RecordBatchBuilder
from rsm_plugins.local import LocalDirRemoteStorageManager
from tests.support.memory_metadata import MemoryTopic, manager
from tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from tiered.remote_log_manager import RemoteLogManager
from tiered.rlm_tasks import CopyTask, ExpirationTask, RLMTask

T0 = 1_700_000_000_000


def client_batch(values: list[bytes], *, timestamp: int) -> bytearray:
    builder = RecordBatchBuilder()
    for i, value in enumerate(values):
        builder.append(value, timestamp=timestamp + i)
    return builder.build()


class Clock:
    def __init__(self, now: int = T0 + 1000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class MemoryRSM(RemoteStorageManager):
    """Objects in a dict keyed by (segment id, suffix); failures can be injected."""

    def __init__(self) -> None:
        self.objects: dict[tuple[uuid.UUID, str], bytes] = {}
        self.fail_copies = 0
        self.copies = 0
        self.fetches = 0
        self.index_fetches = 0
        self.lock = threading.Lock()

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        sid = metadata.segment_id
        self.objects[(sid, "log")] = segment_data.log_segment.read_bytes()
        if self.fail_copies > 0:
            self.fail_copies -= 1
            raise RemoteStorageError("injected copy failure")  # a partial copy stays behind
        self.objects[(sid, "index")] = segment_data.offset_index.read_bytes()
        self.objects[(sid, "timeindex")] = segment_data.time_index.read_bytes()
        if segment_data.transaction_index is not None:
            self.objects[(sid, "txnindex")] = segment_data.transaction_index.read_bytes()
        self.objects[(sid, "snapshot")] = segment_data.producer_snapshot_index.read_bytes()
        self.objects[(sid, "leader-epoch-checkpoint")] = segment_data.leader_epoch_index
        self.copies += 1
        return b"custom"

    def fetch_log_segment(self, metadata, start_position, end_position=None):
        self.fetches += 1
        try:
            data = self.objects[(metadata.segment_id, "log")]
        except KeyError as e:
            raise RemoteResourceNotFoundError(str(metadata.segment_id)) from e
        return io.BytesIO(data[start_position:end_position])

    def fetch_index(self, metadata, index_type: IndexType):
        self.index_fetches += 1
        try:
            return io.BytesIO(self.objects[(metadata.segment_id, index_type.value)])
        except KeyError as e:
            raise RemoteResourceNotFoundError(f"{metadata.segment_id} {index_type}") from e

    def delete_log_segment_data(self, metadata) -> None:
        for key in [k for k in self.objects if k[0] == metadata.segment_id]:
            del self.objects[key]

    def segment_ids(self) -> set[uuid.UUID]:
        return {sid for sid, _ in self.objects}


def local_dir_rsm(root: Path) -> RemoteStorageManager:
    """rsm_plugins.local.LocalDirRemoteStorageManager storing under ``root``."""
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"storage.root": str(root)})
    return rsm


def tiered_config(**overrides) -> LogConfig:
    base = dict(
        segment_bytes=2048,
        index_interval_bytes=256,
        remote_storage_enable=True,
        local_retention_bytes=1,
        retention_bytes=-1,
        retention_ms=-1,
        local_retention_ms=-2,
    )
    base.update(overrides)
    return LogConfig(**base)


def produce(plog: PartitionLog, n_batches: int, *, epoch: int = 0, ts: int = T0, size=40):
    """Append ``n_batches`` batches of 5 records each; returns the appended infos."""
    infos = []
    for i in range(n_batches):
        values = [f"{plog.log_end_offset + j:06d}".encode() * (size // 6) for j in range(5)]
        infos.append(plog.append_as_leader(client_batch(values, timestamp=ts + i), epoch))
    plog.update_high_watermark(plog.log_end_offset)
    return infos


class Env:
    def __init__(self, tmp_path: Path, rsm: RemoteStorageManager, config: LogConfig) -> None:
        self.tmp_path = tmp_path
        self.clock = Clock()
        self.topic = MemoryTopic()
        self.rlmm = manager(self.topic)
        self.rsm = rsm
        self.tp = TopicIdPartition(uuid.UUID(int=42), "t", 0)
        self.plog = PartitionLog(tmp_path / "logs" / "t-0", "t", 0, config, clock=self.clock)
        self.rlm = self.new_rlm()

    def new_rlm(self, **config) -> RemoteLogManager:
        rlm = RemoteLogManager(
            self.rsm,
            self.rlmm,
            1,
            {"remote.fetch.max.wait.ms": 5000, **config},
            self.tmp_path / "logs",
            clock=self.clock,
        )
        rlm.on_leadership([(self.tp, self.plog)])
        assert self.rlmm.wait_ready(self.tp, 10)
        return rlm

    def task(self, kind: type[RLMTask]) -> RLMTask:
        return next(t for t in self.rlm.tasks(self.tp) if isinstance(t, kind))

    def copy(self) -> int:
        """One run of the partition's copy task, in this thread."""
        return self.task(CopyTask).run_once()

    def expire(self) -> int:
        """One run of the partition's expiration task, in this thread."""
        return self.task(ExpirationTask).run_once()

    def retain_only(self, kept: list[RemoteLogSegmentMetadata]) -> None:
        """Set ``retention.bytes`` (on ``tiered_config()``) to what ``kept`` and the local-only
        segments hold: the next expiration run deletes the remote segments before ``kept``."""
        local_only = sum(
            s.size
            for s in self.plog.segments()
            if s.base_offset > self.plog.highest_offset_in_remote_storage
        )
        keep = sum(md.segment_size_in_bytes for md in kept)
        self.plog.update_config(tiered_config(retention_bytes=keep + local_only))

    def segments(self, state=None) -> list[RemoteLogSegmentMetadata]:
        return [
            md
            for md in self.rlmm.list_remote_log_segments(self.tp)
            if state is None or md.state == state
        ]

    def close(self) -> None:
        self.rlm.shutdown()
        self.rlmm.close()
        self.plog.close()
