"""A tiered topic written the way a broker writes one, for the verify and restore tests.

Records are appended by core's PartitionLog; rolled segments are copied by the
RemoteLogManager's own ``CopyTask`` through an RSM plugin, which records them in a stopped
broker's ``__remote_log_metadata`` through the real topic-based RLMM (over
``tierlog.offline_storage``); the topic manifest is written by the broker's publisher. Two
branches of one partition (an unclean election) are two PartitionLogs copied in turn.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.log.config import LogConfig
from core.log.log_manager import LogManagerConfig
from core.log.partition_log import PartitionLog
from core.records.builder import RecordBatchBuilder
from core.server.topics import TopicInfo
from rlmm.manager import BROKER_ID_KEY, NUM_PARTITIONS_KEY, TopicBasedRemoteLogMetadataManager
from tiered.api import RemoteLogSegmentMetadata, TopicIdPartition
from tiered.metrics import TieringMetrics
from tiered.remote_index_cache import RemoteIndexCache
from tiered.rlm_config import RemoteLogManagerConfig
from tiered.rlm_tasks import CopyTask, TaskContext
from tierlog.offline_storage import OfflineBrokerStorage
from tierlog.remote_storage_config import open_object_store_rsm
from tierlog.topic_manifests import TopicManifestPublisher

METADATA_PARTITIONS = 3
BROKER_ID = 1
T0 = 1_700_000_000_000
RECORDS_PER_BATCH = 5
# Two batches of five ~60-byte records per segment: segments roll every 10 offsets.
SEGMENT_BYTES = 1000


def local_rsm_props(bucket: Path, key_prefix: str = "") -> dict[str, str]:
    return {
        "remote.log.storage.manager.class.name": "rsm_plugins.local.LocalDirRemoteStorageManager",
        "rsm.config.storage.root": str(bucket),
        "rsm.config.key.prefix": key_prefix,
    }


def record(tag: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    return f"k{offset}".encode(), f"{tag}-{partition}-{offset:06d}-".encode() * 2


@dataclass
class Producer:
    """An idempotent producer: its batches carry its id, epoch and sequences."""

    producer_id: int
    epoch: int = 0
    next_sequence: int = 0


@dataclass
class Branch:
    """One replica's log of a partition: its PartitionLog and what it holds."""

    plog: PartitionLog
    records: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)

    def append(self, epoch: int, batches: int, tag: str, producer: Producer | None = None) -> None:
        for _ in range(batches):
            builder = RecordBatchBuilder(
                producer_id=-1 if producer is None else producer.producer_id,
                producer_epoch=-1 if producer is None else producer.epoch,
                base_sequence=-1 if producer is None else producer.next_sequence,
            )
            start = self.plog.log_end_offset
            rows = [record(tag, self.plog.partition, start + i) for i in range(RECORDS_PER_BATCH)]
            for i, (k, v) in enumerate(rows):
                builder.append(v, key=k, timestamp=T0 + start + i)
            info = self.plog.append_as_leader(builder.build(), epoch)
            assert info.first_offset == start
            for i, row in enumerate(rows):
                self.records[start + i] = row
            if producer is not None:
                producer.next_sequence += RECORDS_PER_BATCH
        self.plog.update_high_watermark(self.plog.log_end_offset)


class TierWriter:
    """Writes tiered topics into a bucket and a stopped broker's metadata topic."""

    def __init__(self, root: Path, rsm_props: Mapping[str, str], broker_log_dir: Path) -> None:
        self.root = root
        self.rsm = open_object_store_rsm(rsm_props)
        self.storage = OfflineBrokerStorage(
            LogManagerConfig((broker_log_dir,), node_id=BROKER_ID), {}
        )
        self.rlmm = TopicBasedRemoteLogMetadataManager(self.storage.metadata_client())
        self.rlmm.configure(
            {NUM_PARTITIONS_KEY: str(METADATA_PARTITIONS), BROKER_ID_KEY: str(BROKER_ID)}
        )
        self.context = TaskContext(
            rsm=self.rsm,
            rlmm=self.rlmm,
            broker_id=BROKER_ID,
            config=RemoteLogManagerConfig(),
            clock=lambda: T0 + 10_000,
            metrics=TieringMetrics(),
            index_cache=RemoteIndexCache(root / "index-cache", self.rsm, 1 << 30),
            copy_quota=None,
            random=random.Random(8),
        )

    def branch(self, tp: TopicIdPartition, name: str) -> Branch:
        config = LogConfig(segment_bytes=SEGMENT_BYTES, remote_storage_enable=True)
        directory = self.root / "replicas" / name / f"{tp.topic}-{tp.partition}"
        return Branch(PartitionLog(directory, tp.topic, tp.partition, config))

    def copy(self, tp: TopicIdPartition, branch: Branch) -> int:
        """What the leader's copy task copies of ``branch`` now; returns the segments."""
        self.rlmm.on_partition_leadership_changes({tp}, set())
        assert self.rlmm.wait_ready(tp, 30)
        return CopyTask(self.context, tp, branch.plog).run_once()

    def manifest(self, tp_topic: str, topic_id: uuid.UUID, partitions: int,
                 configs: Mapping[str, str]) -> None:  # fmt: skip
        """The topic manifest, written as the broker's publisher writes it."""
        info = TopicInfo(tp_topic, topic_id, partitions, dict(configs))
        publisher = TopicManifestPublisher(self.rsm, lambda _: info, lambda _: True, BROKER_ID)
        publisher.topic_changed(info)
        publisher.close()

    def segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        return list(self.rlmm.list_remote_log_segments(tp))

    def close(self) -> None:
        self.rlmm.close()
        self.storage.close()
        self.context.index_cache.close()
        self.rsm.close()


@dataclass
class TieredTopic:
    topic: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str]
    # partition -> offset -> (key, value), for the offsets in the remote tier
    remote: dict[int, dict[int, tuple[bytes, bytes]]]
    segments: dict[int, list[RemoteLogSegmentMetadata]]


def write_tiered_topic(
    writer: TierWriter,
    topic: str = "orders",
    *,
    partitions: int = 2,
    batches: int = 9,
    configs: Mapping[str, str] | None = None,
    producer: Producer | None = None,
    manifest: bool = True,
) -> TieredTopic:
    """``batches`` batches per partition in epoch 0 (with ``producer``'s ids on partition
    0), every rolled segment copied: the last one (the active segment) stays local."""
    topic_id = uuid.uuid4()
    configs = dict(configs or {"remote.storage.enable": "true", "retention.ms": "-1"})
    remote: dict[int, dict[int, tuple[bytes, bytes]]] = {}
    segments: dict[int, list[RemoteLogSegmentMetadata]] = {}
    for p in range(partitions):
        tp = TopicIdPartition(topic_id, topic, p)
        branch = writer.branch(tp, f"{topic}-leader")
        branch.append(0, batches, topic, producer if p == 0 else None)
        writer.copy(tp, branch)
        highest = branch.plog.highest_offset_in_remote_storage
        remote[p] = {o: r for o, r in branch.records.items() if o <= highest}
        segments[p] = writer.segments(tp)
        branch.plog.close()
    if manifest:
        writer.manifest(topic, topic_id, partitions, configs)
    return TieredTopic(topic, topic_id, partitions, configs, remote, segments)


@dataclass
class Diverged:
    """A partition whose bucket holds two branches (an unclean election)."""

    tp: TopicIdPartition
    canonical: dict[int, tuple[bytes, bytes]]  # offset -> record of the surviving branch
    diverged: list[RemoteLogSegmentMetadata]  # finished copies of the truncated branch
    segments: list[RemoteLogSegmentMetadata]  # every finished copy


def write_diverged(writer: TierWriter, topic: str = "branches") -> Diverged:
    """Leader A writes offsets 0..59 in epoch 0 and copies what it rolled; B, with only
    0..29, is elected uncleanly, writes 30..69 in epoch 1 and copies the segments holding
    offsets from 30 on (its copy task finds the highest remote offset of epoch 0 along its
    own lineage: 29). A's copies holding offsets from 30 are the diverged branch. Tags have
    one length so that both replicas roll at the same offsets."""
    tp = TopicIdPartition(uuid.uuid4(), topic, 0)
    a = writer.branch(tp, "a")
    a.append(0, 6, "same")
    a.append(0, 6, "aaaa")
    writer.copy(tp, a)
    a_segments = writer.segments(tp)
    b = writer.branch(tp, "b")
    b.append(0, 6, "same")
    b.append(1, 8, "bbbb")
    writer.copy(tp, b)
    segments = writer.segments(tp)
    highest = b.plog.highest_offset_in_remote_storage
    diverged = [md for md in a_segments if md.end_offset >= 30]
    assert diverged and highest >= 59, (a_segments, segments)
    a.plog.close()
    b.plog.close()
    # Records are stamped in 2023: kept forever, not expired by a 7-day retention.
    writer.manifest(topic, tp.topic_id, 1, {"remote.storage.enable": "true", "retention.ms": "-1"})
    canonical = {o: r for o, r in b.records.items() if o <= highest}
    return Diverged(tp, canonical, diverged, segments)
