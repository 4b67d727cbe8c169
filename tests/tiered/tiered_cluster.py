"""Tiered brokers in one process, replicating over 127.0.0.1, with the test as controller.

``tests/core/server/replica_cluster.py``'s cluster, each node a broker with its remote tier
(``TieredBroker``): one local-directory bucket shared by every node, and one remote log
metadata topic shared in memory (``tests/support/shared_rlmm.py``). The test also plays
ZooKeeper's topic configs: ``topic_configs`` are every node's overrides of the replicated
topics.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.records.batch import iter_batches, peek_batch_size
from core.records.record import decode_records
from core.server.broker import Broker
from core.server.cluster_types import TopicPartition
from core.server.config import load_broker_config
from core.server.node_client import ClientSettings, NodeClient
from core.server.topics import TopicRegistry
from tests.core.server.replica_cluster import LISTENER, Cluster, Node, RecordingIsrWriter
from tests.support import shared_rlmm
from tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tiered.remote_log_manager import RemoteLogManager
from tierlog.remote_tier import TieredBroker

_REGISTRY_LOG_CONFIG = TopicRegistry.log_config
_RECONCILE_TOPICS = Broker._reconcile_topics


def tiered_settings(directory: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.root": str(directory / "bucket"),
        "remote.log.metadata.manager.class.name": shared_rlmm.CLASS_NAME,
        f"rlmm.config.{shared_rlmm.SHARED_TOPIC_KEY}": f"rlmm-{uuid.uuid4()}",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "50",
        "log.retention.check.interval.ms": "50",
        "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "50",
        # Without ZooKeeper a broker trusts no peer on a PLAINTEXT listener: the nodes (and
        # the test) connect anonymously, so the anonymous principal is the brokers' one.
        "super.users": "User:ANONYMOUS",
    }


class TieredNode(Node):
    def __init__(
        self,
        node_id: int,
        directory: Path,
        settings: Mapping[str, str],
        writer: RecordingIsrWriter,
    ) -> None:
        super().__init__(node_id, directory, settings, writer)
        self.tiered: TieredBroker | None = None

    async def start(self, *, max_fetch_version: int | None = None) -> None:
        config = load_broker_config(
            None,
            {
                "node.id": str(self.node_id),
                "log.dirs": str(self.directory),
                "listeners": f"{LISTENER}://127.0.0.1:0",
                "offsets.topic.num.partitions": "1",
                **self.settings,
            },
        )
        broker = Broker(config)
        tiered = TieredBroker(broker)
        await tiered.start()
        self.client = NodeClient(ClientSettings.from_config(config))
        broker.replica_manager.set_node_client(self.client, LISTENER)
        broker.replica_manager.set_isr_writer(self.writer)
        self.broker = broker
        self.tiered = tiered

    async def stop(self) -> None:
        assert self.tiered is not None and self.client is not None
        await self.tiered.stop()
        await self.client.close()
        self.broker = None
        self.tiered = None

    @property
    def rlm(self) -> RemoteLogManager:
        assert self.tiered is not None and self.tiered.remote_tier.rlm is not None
        return self.tiered.remote_tier.rlm

    def plog(self, tp: TopicPartition) -> PartitionLog:
        partition = self.partition(tp)
        assert partition is not None
        return partition.log

    def epochs(self, tp: TopicPartition) -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in self.plog(tp).leader_epoch_cache.entries()]


class TieredCluster(Cluster):
    def __init__(
        self,
        directory: Path,
        size: int,
        topic_configs: dict[str, dict[str, str]],
        settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(directory, size)
        base = {**tiered_settings(directory), **(settings or {})}
        self.topic_configs = topic_configs
        self.nodes = {
            i: TieredNode(i, directory / f"broker-{i}", base, self.writer)
            for i in range(1, size + 1)
        }

    async def start(self, **options: Any) -> None:
        self._play_zookeeper_topic_configs()
        await super().start(**options)

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            TopicRegistry.log_config = _REGISTRY_LOG_CONFIG  # type: ignore[method-assign]
            Broker._reconcile_topics = _RECONCILE_TOPICS  # type: ignore[method-assign]

    def _play_zookeeper_topic_configs(self) -> None:
        """The replicated topics are in no broker's registry (the test is their
        controller): every broker of the process opens their logs with ``topic_configs``
        (as ZooKeeper's /config/topics would give them), from the first load on, and never
        adopts them as its own topics when it finds them on disk at a restart."""
        configs = self.topic_configs

        def log_config(registry: TopicRegistry, name: str) -> LogConfig:
            if name in configs:
                return LogConfig.from_props(configs[name], defaults=registry.broker_defaults)
            return _REGISTRY_LOG_CONFIG(registry, name)

        def reconcile_topics(broker: Broker) -> None:
            manager = broker.log_manager
            assert manager is not None
            every_log = manager.all_logs
            manager.all_logs = lambda: [p for p in every_log() if p.topic not in configs]  # type: ignore[method-assign]
            try:
                _RECONCILE_TOPICS(broker)
            finally:
                del manager.all_logs

        TopicRegistry.log_config = log_config  # type: ignore[method-assign]
        Broker._reconcile_topics = reconcile_topics  # type: ignore[method-assign]

    def node(self, node_id: int) -> TieredNode:
        node = self.nodes[node_id]
        assert isinstance(node, TieredNode)
        return node

    def segments(
        self, node_id: int, tp: TopicIdPartition, *states: RemoteLogSegmentState
    ) -> list[RemoteLogSegmentMetadata]:
        """The remote segments ``node_id``'s RLMM knows of ``tp`` (in these states), by
        start offset then event time."""
        rlmm = self.node(node_id).rlm.rlmm
        found = [md for md in rlmm.list_remote_log_segments(tp) if not states or md.state in states]
        return sorted(found, key=lambda m: (m.start_offset, m.event_timestamp_ms))

    async def read_all(self, node_id: int, tp: TopicPartition, start: int = 0) -> list[Any]:
        """Every record from ``start`` up to the high watermark, read with consumer fetches
        from ``node_id``: (offset, partition leader epoch, value)."""
        out: list[Any] = []
        offset = start
        while True:
            data, _ = await self.fetch(node_id, tp, offset)
            assert data.error_code == 0, (node_id, offset, data.error_code)
            records = bytes(data.records or b"")
            whole = 0  # a remote read may end inside a batch: keep whole batches only
            while (size := peek_batch_size(records, whole)) is not None and whole + size <= len(
                records
            ):
                whole += size
            if not whole:
                break
            for header in iter_batches(records[:whole]):
                for record in decode_records(header):
                    if record.offset >= offset:
                        out.append((record.offset, header.partition_leader_epoch, record.value))
                offset = max(offset, header.last_offset + 1)
            if offset >= int(data.high_watermark):
                break
        return out


def values(tags: Sequence[int]) -> list[bytes]:
    return [f"msg {t:04d}".encode() * 10 for t in tags]
