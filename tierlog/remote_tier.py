"""The remote tier around a broker: the plugins KIP-405 asks for, wired from the config.

With ``remote.log.storage.system.enable=true`` the broker gets:

- a RemoteStorageManager (``remote.log.storage.manager.class.name``, default the local
  directory plugin) configured with the ``rsm.config.*`` keys, prefix stripped;
- a RemoteLogMetadataManager (``remote.log.metadata.manager.class.name``) configured with
  the ``rlmm.config.*`` keys plus ``log.dir``; the default, TopicBasedRemoteLogMetadataManager,
  gets an in-process client of the broker's own ``__remote_log_metadata`` topic, which it
  creates at start-up or checks (a partition-count mismatch stops the broker);
- the RemoteLogManager (``remote.log.manager.*`` keys), leading every partition of a
  topic with ``remote.storage.enable=true``;
- a RemotePartitionRemover deleting the remote data of deleted topics;
- with an object-store RSM plugin, a ``TopicManifestPublisher`` keeping each tiered topic's
  ``topic-manifest.json`` (partition count, configs) in the bucket, for ``tierlog restore``.

``RemoteStorageSystem`` is what the ReplicaManager sees through core's ``RemoteTier`` seam:
reads go to the RemoteLogManager, and topic events become its leadership changes. A single
broker leads every partition it hosts, so a created (or newly tiered) topic's partitions
are led from now on, and a deleted topic's partitions are stopped with their remote data
deleted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from core.errors import KafkaStorageError
from core.server.config import REMOTE_TIER_PREFIXES
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.remover import RemotePartitionRemover
from rsm_plugins.base import ObjectStoreRemoteStorageManager
from tiered.api import (
    RLMM_CLASS_NAME,
    RLMM_CONFIG_PREFIX,
    RSM_CLASS_NAME,
    RSM_CONFIG_PREFIX,
    RemoteLogMetadataManager,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
    load_plugin,
    prefixed_configs,
)
from tiered.remote_log_manager import RemoteLogManager
from tiered.rlm_config import RemoteLogManagerConfig
from tierlog.metadata_topic import InProcessMetadataTopicClient
from tierlog.metrics_http import PrometheusEndpoint, QuotaCollector
from tierlog.topic_manifests import TopicManifestPublisher

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog, TimestampAndOffset
    from core.server.broker import Broker
    from core.server.remote_seam import RemoteFetchResult
    from core.server.topics import TopicInfo

log = logging.getLogger(__name__)


class RemoteTierStartError(Exception):
    """The remote tier could not start; the message names the setting at fault."""


class RemoteStorageSystem:
    """The remote tier of one broker (``remote.log.storage.system.enable``): starts and
    stops its plugins and managers, and implements core's ``RemoteTier`` seam."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.rsm: RemoteStorageManager | None = None
        self.rlmm: RemoteLogMetadataManager | None = None
        self.rlm: RemoteLogManager | None = None
        self.remover: RemotePartitionRemover | None = None
        self.manifests: TopicManifestPublisher | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.broker.config.remote_log_storage_system_enable)

    def _settings(self) -> RemoteLogManagerConfig:
        originals = self.broker.config.originals
        known = set(RemoteLogManagerConfig.keys())
        for key in originals:
            if key.startswith(REMOTE_TIER_PREFIXES) and key not in known:
                raise RemoteTierStartError(f"Unknown configuration {key}")
        try:
            return RemoteLogManagerConfig.from_props(
                {k: v for k, v in originals.items() if k in known}
            )
        except ValueError as e:
            raise RemoteTierStartError(str(e)) from e

    def _load(self, key: str, base: type, prefix: str, extra: dict[str, str]) -> Any:
        config = self.broker.config
        class_name = config.get(key)
        try:
            plugin = load_plugin(class_name, base, key=key)
        except RemoteStorageError as e:
            raise RemoteTierStartError(str(e)) from e
        settings = prefixed_configs(config.originals, prefix)
        for k, v in extra.items():
            settings.setdefault(k, v)
        return plugin, settings, class_name

    async def start(self) -> None:
        if not self.enabled:
            return
        config = self.broker.config
        loop = asyncio.get_running_loop()
        rlm_config = self._settings()
        log_dir = str(config.log_dirs[0])
        rsm, rsm_settings, rsm_class = self._load(
            RSM_CLASS_NAME, RemoteStorageManager, RSM_CONFIG_PREFIX, {}
        )
        rlmm, rlmm_settings, rlmm_class = self._load(
            RLMM_CLASS_NAME,
            RemoteLogMetadataManager,
            RLMM_CONFIG_PREFIX,
            {"log.dir": log_dir, "broker.id": str(config.node_id)},
        )
        if isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
            rlmm.attach_client(InProcessMetadataTopicClient(self.broker, loop))
        for plugin, settings, key, class_name in (
            (rsm, rsm_settings, RSM_CLASS_NAME, rsm_class),
            (rlmm, rlmm_settings, RLMM_CLASS_NAME, rlmm_class),
        ):
            try:
                await loop.run_in_executor(None, plugin.configure, settings)
            except RemoteStorageError as e:
                raise RemoteTierStartError(f"{key}={class_name}: {e}") from e
        self.rsm, self.rlmm = rsm, rlmm
        self.rlm = RemoteLogManager(
            rsm,
            rlmm,
            config.node_id,
            rlm_config,
            config.log_dirs[0],
        )
        self.broker.replica_manager.remote = self
        if isinstance(rsm, ObjectStoreRemoteStorageManager):
            topics = self.broker.topics
            self.manifests = TopicManifestPublisher(
                rsm,
                topics.by_id,
                lambda info: topics.effective_config(info).remote_storage_enable,
                config.node_id,
                retry_ms=rlm_config.remote_log_manager_task_retry_backoff_max_ms,
            )
            self.manifests.publish_all(topics.all())
        tiered = self.tiered_partitions()
        if tiered:
            await loop.run_in_executor(None, self.rlm.on_leadership, tiered)
        self.rlm.start()
        if isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
            self.remover = RemotePartitionRemover(
                rlmm,
                rsm,
                config.node_id,
                interval_ms=rlm_config.remote_partition_remover_task_interval_ms,
                topic_exists=lambda topic_id: self.broker.topics.by_id(topic_id) is not None,
            )
            self.remover.start()
        log.info(
            "remote tier started: %s, %s; %d tiered partitions", rsm_class, rlmm_class, len(tiered)
        )

    def _partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        p = self.broker.replica_manager.partition(topic, partition)
        return p.log if p is not None else None

    def tiered_partitions(
        self, topics: list[TopicInfo] | None = None
    ) -> list[tuple[TopicIdPartition, PartitionLog]]:
        """The hosted partitions of ``topics`` (default: every topic) that are tiered."""
        out = []
        for info in self.broker.topics.all() if topics is None else topics:
            if not self.broker.topics.effective_config(info).remote_storage_enable:
                continue
            for index in range(info.partitions):
                plog = self._partition_log(info.name, index)
                if plog is not None:
                    out.append((TopicIdPartition(info.topic_id, info.name, index), plog))
        return out

    # -- core's RemoteTier seam ----------------------------------------------------------
    def _running(self) -> RemoteLogManager:
        if self.rlm is None:
            raise KafkaStorageError("the remote tier is stopped")
        return self.rlm

    @property
    def fetch_max_wait_ms(self) -> int:
        return self._running().fetch_max_wait_ms

    def start_read(
        self,
        topic_id: object,
        topic: str,
        partition: int,
        log: PartitionLog,
        fetch_offset: int,
        max_bytes: int,
        *,
        read_committed: bool,
    ) -> asyncio.Future[RemoteFetchResult]:
        return self._running().start_read(
            topic_id, topic, partition, log, fetch_offset, max_bytes, read_committed=read_committed
        )

    async def offset_for_timestamp(
        self, topic_id: object, topic: str, partition: int, log: PartitionLog, timestamp: int
    ) -> TimestampAndOffset | None:
        return await self._running().offset_for_timestamp(
            topic_id, topic, partition, log, timestamp
        )

    def on_topic_created(self, topic: TopicInfo) -> None:
        """A topic was created or reconfigured: this broker leads its tiered partitions."""
        if self.manifests is not None:
            self.manifests.topic_changed(topic)
        if self.rlm is not None:
            self.rlm.on_leadership(self.tiered_partitions([topic]))

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        """A topic was deleted: its manifest goes first, its partitions stop here and their
        remote data goes."""
        if self.manifests is not None:
            self.manifests.topic_deleted(topic)
        if self.rlm is not None:
            tps = [TopicIdPartition(topic.topic_id, topic.name, p) for p in range(topic.partitions)]
            self.rlm.on_stop_partitions(tps, delete=True)

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        if self.manifests is not None:
            await loop.run_in_executor(None, self.manifests.close)
        if self.remover is not None:
            await loop.run_in_executor(None, self.remover.stop)
        if self.rlm is not None:
            self.broker.replica_manager.remote = None
            await loop.run_in_executor(None, self.rlm.shutdown)
        for plugin in (self.rlmm, self.rsm):
            if plugin is not None:
                await loop.run_in_executor(None, plugin.close)
        self.rlm = self.rlmm = self.rsm = self.remover = self.manifests = None


class TieredBroker:
    """A broker and its remote tier, started and stopped together."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.remote_tier = RemoteStorageSystem(broker)
        self.metrics_endpoint: PrometheusEndpoint | None = None

    @property
    def config(self):
        return self.broker.config

    async def start(self):
        config = self.broker.config
        if self.remote_tier.enabled and config.get("zookeeper.connect"):
            # Before anything starts: in a cluster the remote tier would have to follow
            # leadership changes and write __remote_log_metadata through its leaders,
            # which it does not do yet.
            raise RemoteTierStartError(
                "remote.log.storage.system.enable=true with zookeeper.connect: tiered "
                "storage runs on a broker alone only for now; unset one of the two"
            )
        bound = await self.broker.start()
        try:
            await self.remote_tier.start()
            port = self.broker.config.get("metrics.prometheus.port")
            if port >= 0:
                host = self.broker.config.get("metrics.prometheus.host")
                quotas = QuotaCollector(self.broker.quotas.metrics)
                endpoint = PrometheusEndpoint(host, port, self._tiering_metrics, [quotas])
                try:
                    endpoint.start()
                except OSError as e:
                    raise RemoteTierStartError(
                        f"metrics.prometheus.port={port}: cannot listen on {host}:{port}: {e}"
                    ) from e
                self.metrics_endpoint = endpoint
        except BaseException:
            await self.stop()
            raise
        return bound

    def _tiering_metrics(self):
        rlm = self.remote_tier.rlm
        return rlm.metrics if rlm is not None else None

    async def stop(self) -> None:
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
            self.metrics_endpoint = None
        await self.remote_tier.stop()
        await self.broker.stop()
