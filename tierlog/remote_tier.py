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
- a RemotePartitionRemover deleting the remote data of deleted topics: the partitions
  marked DELETE_PARTITION_MARKED (by the controller's broker, ``mark_topic_deleted``; alone,
  by this broker) in the ``__remote_log_metadata`` partitions this broker leads (all of
  them when it runs alone), which its RLMM follows for that;
- with an object-store RSM plugin, a ``TopicManifestPublisher`` keeping each tiered topic's
  ``topic-manifest.json`` (partition count, configs) in the bucket, for ``tierlog restore``;
  a topic being deleted (``/admin/delete_topics``) has none: it is deleted, never written,
  and deleted again by the remover when each partition's remote data is gone.

``RemoteStorageSystem`` is what the ReplicaManager sees through core's ``RemoteTier`` seam:
reads go to the RemoteLogManager, and so do the followers' requests for the state below
their leader's local log start (``remote_log_aux_state``). It is also a leadership listener
of the ReplicaManager (Kafka's ``onLeadershipChange`` / ``stopPartitions``): the tiered
partitions this broker leads get copy and expiration tasks, those it follows a follower
task, and the RLMM follows the metadata of both, so that a new leader serves remote reads
at once; stopped partitions lose their tasks. Leadership changes apply in order on one
thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from core.errors import CoreError, KafkaStorageError
from core.server.config import REMOTE_TIER_PREFIXES
from core.server.topics import TopicInfo
from rlmm.manager import BOOTSTRAP_KEY, CLIENT_PREFIX, TopicBasedRemoteLogMetadataManager
from rlmm.remover import RemotePartitionRemover
from rlmm.topic_client import METADATA_TOPIC
from rsm_plugins.base import ObjectStoreRemoteStorageManager
from tiered.api import (
    RLMM_CLASS_NAME,
    RLMM_CONFIG_PREFIX,
    RSM_CLASS_NAME,
    RSM_CONFIG_PREFIX,
    RemoteLogMetadataManager,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
    load_plugin,
    prefixed_configs,
)
from tiered.remote_log_manager import RemoteLogManager
from tiered.rlm_config import RemoteLogManagerConfig
from tierlog.metadata_topic import InProcessMetadataTopicClient
from tierlog.metrics_http import PrometheusEndpoint, QuotaCollector, ReplicationCollector
from tierlog.topic_manifests import TopicManifestPublisher

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog, TimestampAndOffset
    from core.server.broker import Broker
    from core.server.cluster_types import TopicPartition
    from core.server.partition import Partition
    from core.server.remote_seam import RemoteFetchResult, RemoteLogAuxState, RemoteLogStart

# Kafka's key: the listener whose endpoint the RLMM's Kafka client uses.
LISTENER_KEY = "remote.log.metadata.manager.listener.name"
log = logging.getLogger(__name__)

LEADERSHIP_ATTEMPTS = 30  # about 30 s of retries of one leadership change
MARK_WAIT_S = 120  # how long a deletion mark waits for the remote tier to start
MARK_TIMEOUT_S = 60  # one mark's write


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
        # Leadership changes reach the RemoteLogManager in the order they happened.
        self._leadership = ThreadPoolExecutor(1, thread_name_prefix="rlm-leadership")
        self._listening = False
        self._configuring: asyncio.Future[None] | None = None  # in a cluster: see start()
        self._in_cluster = bool(broker.config.get("zookeeper.connect"))
        self._loop: asyncio.AbstractEventLoop | None = None
        # The __remote_log_metadata partitions this broker leads (see rlmm.remover).
        self._led_metadata: set[int] = set()
        broker.remote_deletion_marker = self.mark_topic_deleted

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
        """Load and configure the plugins, then start tiering the hosted partitions.

        Running alone, all of it before returning (a bad setting stops the broker). In a
        cluster the metadata manager reaches ``__remote_log_metadata`` through the
        cluster's leaders with a Kafka client (bootstrap: this broker's inter-broker
        listener, unless configured), and the topic may need brokers that are not up yet:
        its configuration is retried in the background (as Kafka's topic-based RLMM
        initializes) and tiering starts once it succeeds; meanwhile remote reads answer
        KAFKA_STORAGE_ERROR and followers retry.
        """
        if not self.enabled:
            return
        config = self.broker.config
        loop = asyncio.get_running_loop()
        self._loop = loop
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
        in_cluster = bool(config.get("zookeeper.connect"))
        if isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
            if not in_cluster:
                rlmm.attach_client(InProcessMetadataTopicClient(self.broker, loop))
            elif config.get(LISTENER_KEY) or not rlmm_settings.get(BOOTSTRAP_KEY):
                # Kafka's configureRLMM: the listener's endpoint first, the operator's
                # remote.log.metadata.common.client.* settings over it. Without a listener
                # named, an operator's bootstrap.servers (another cluster) stands alone.
                for key, value in self._metadata_client_endpoint().items():
                    rlmm_settings.setdefault(key, value)
        try:
            await loop.run_in_executor(None, rsm.configure, rsm_settings)
        except RemoteStorageError as e:
            raise RemoteTierStartError(f"{RSM_CLASS_NAME}={rsm_class}: {e}") from e
        self.rsm = rsm  # closed by stop() from now on
        if in_cluster:
            self._configuring = asyncio.ensure_future(
                self._configure_until_done(
                    rsm, rlmm, rlmm_settings, rlmm_class, rsm_class, rlm_config
                )
            )
            return
        try:
            await loop.run_in_executor(None, rlmm.configure, rlmm_settings)
        except RemoteStorageError as e:
            raise RemoteTierStartError(f"{RLMM_CLASS_NAME}={rlmm_class}: {e}") from e
        await self._start_tiering(rsm, rlmm, rsm_class, rlmm_class, rlm_config)

    def _metadata_client_endpoint(self) -> dict[str, str]:
        """``bootstrap.servers`` and ``security.protocol`` (under Kafka's
        ``remote.log.metadata.common.client.`` prefix) of the listener named by
        ``remote.log.metadata.manager.listener.name``, else of the inter-broker listener."""
        config = self.broker.config
        name = config.get(LISTENER_KEY) or config.inter_broker_listener_name
        for bound in self.broker.bound:
            if bound.name == name:
                host = bound.host if bound.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
                protocol = config.listener_security_protocol_map.get(name, "PLAINTEXT")
                return {
                    BOOTSTRAP_KEY: f"{host}:{bound.port}",
                    CLIENT_PREFIX + "security.protocol": protocol,
                }
        raise RemoteTierStartError(f"{LISTENER_KEY}: listener {name} is not one of this broker's")

    async def _configure_until_done(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        settings: dict[str, str],
        rlmm_class: str,
        rsm_class: str,
        rlm_config: RemoteLogManagerConfig,
    ) -> None:
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                await loop.run_in_executor(None, rlmm.configure, settings)
                break
            except RemoteStorageError as e:
                attempt += 1
                level = (
                    logging.WARNING if attempt in (1, 10) or attempt % 60 == 0 else logging.DEBUG
                )
                log.log(level, "%s not ready yet (attempt %d): %s", rlmm_class, attempt, e)
                await asyncio.sleep(1.0)
        await self._start_tiering(rsm, rlmm, rsm_class, rlmm_class, rlm_config)

    async def _start_tiering(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        rsm_class: str,
        rlmm_class: str,
        rlm_config: RemoteLogManagerConfig,
    ) -> None:
        config = self.broker.config
        loop = asyncio.get_running_loop()
        self.rsm, self.rlmm = rsm, rlmm
        self.rlm = RemoteLogManager(
            rsm,
            rlmm,
            config.node_id,
            rlm_config,
            config.log_dirs[0],
        )
        manager = self.broker.replica_manager
        manager.remote = self
        if isinstance(rsm, ObjectStoreRemoteStorageManager):
            topics = self.broker.topics
            self.manifests = TopicManifestPublisher(
                rsm,
                self._manifest_topic,
                lambda info: topics.effective_config(info).remote_storage_enable,
                config.node_id,
                retry_ms=rlm_config.remote_log_manager_task_retry_backoff_max_ms,
            )
            self.manifests.publish_all(topics.all())
        if not self._listening:
            manager.add_leadership_listener(self)
            self._listening = True
        # Partitions whose roles were applied before the remote tier started.
        hosted = list(manager.partitions.values())
        if self._in_cluster:
            self._led_metadata = {
                p.index for p in hosted if p.topic == METADATA_TOPIC and p.is_leader
            }
        leaders = [p for p in hosted if p.is_leader]
        followers = [p for p in hosted if not p.is_leader]
        tiered = self._tiered(leaders) + self._tiered(followers)
        await loop.run_in_executor(self._leadership, self._apply_roles, leaders, followers)
        self.rlm.start()
        if isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
            self.remover = RemotePartitionRemover(
                rlmm,
                rsm,
                config.node_id,
                interval_ms=rlm_config.remote_partition_remover_task_interval_ms,
                topic_exists=lambda topic_id: self.broker.topics.by_id(topic_id) is not None,
                on_partition_deleted=self._partition_remote_data_deleted,
            )
            rlmm.deletion_listener = self.remover.wake
            self.remover.start()
            if not self._in_cluster:
                # Alone, this broker leads every metadata partition.
                self._led_metadata = set(range(rlmm.num_partitions))
            await loop.run_in_executor(self._leadership, self._follow_metadata)
        log.info(
            "remote tier started: %s, %s; %d tiered partitions", rsm_class, rlmm_class, len(tiered)
        )

    # -- deletion of a deleted topic's remote data (KIP-405) -----------------------------
    def mark_topic_deleted(self, name: str, topic_id: uuid.UUID, partitions: list[int]) -> None:
        """Mark the partitions of a deleted tiered topic DELETE_PARTITION_MARKED (the
        controller's broker does, and a broker running alone): the remover on the leader of
        each partition's metadata partition then deletes the remote data. Waits for a
        starting remote tier; blocking.

        Raises:
            RemoteStorageError: the remote tier is off or did not start in time, or a mark
                was not stored.
        """
        if not self.enabled:
            raise RemoteStorageError("remote.log.storage.system.enable is false on this broker")
        deadline = time.monotonic() + MARK_WAIT_S
        while self.rlmm is None or self.rlm is None:
            if time.monotonic() >= deadline:
                raise RemoteStorageError(f"the remote tier did not start in {MARK_WAIT_S} s")
            time.sleep(0.2)
        rlmm = self.rlmm
        futures = [
            rlmm.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(
                    TopicIdPartition(topic_id, name, index),
                    RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                    int(time.time() * 1000),
                    self.broker.config.node_id,
                )
            )
            for index in partitions
        ]
        for future in futures:
            future.result(MARK_TIMEOUT_S)
        log.info("marked %d remote partitions of deleted topic %s for deletion", len(futures), name)

    def _follow_metadata(self) -> None:
        """On the leadership thread: the RLMM follows the metadata partitions led here."""
        rlmm = self.rlmm
        if isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
            rlmm.follow_metadata_partitions(set(self._led_metadata))

    def _partition_remote_data_deleted(self, tp: TopicIdPartition) -> None:
        """The remover finished a partition: its topic's manifest goes (idempotent; the
        first partition finished deletes it, the others find it gone)."""
        if isinstance(self.rsm, ObjectStoreRemoteStorageManager):
            self.rsm.delete_topic_manifest(tp.topic, tp.topic_id)

    def _manifest_topic(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic whose manifest to keep, or None for one deleted or being deleted (its
        manifest is deleted, never written again). In a cluster ZooKeeper decides: a broker
        that was down during a deletion may still list the topic. On the manifest
        publisher's threads.

        Raises:
            RemoteStorageError: ZooKeeper could not tell (the publisher retries).
        """
        info = self.broker.topics.by_id(topic_id)
        cluster = self.broker.cluster
        if info is None or cluster is None or self._loop is None:
            return info
        zk = cluster.connected_zk
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is self._loop:
                # Waiting here for the loop would block it: the publisher retries off it.
                raise RemoteStorageError("topic manifests are checked off the event loop")

        async def live() -> bool:
            if info.name in await zk.get_topics_marked_for_deletion():
                return False
            assignment = await zk.get_topic_assignment(info.name)
            return assignment is not None and assignment.topic_id == topic_id

        try:
            alive = asyncio.run_coroutine_threadsafe(live(), self._loop).result(30)
        except Exception as e:  # ZooKeeper's errors, a timeout: ask again later
            raise RemoteStorageError(f"cannot read the topic {info.name} in ZooKeeper: {e}") from e
        return info if alive else None

    # -- leadership (core's LeadershipListener) -----------------------------------------
    @staticmethod
    def _tiered(partitions: Sequence[Partition]) -> list[tuple[TopicIdPartition, PartitionLog]]:
        return [
            (TopicIdPartition(p.topic_id, p.topic, p.index), p.log)
            for p in partitions
            if p.log.config.remote_storage_enable
        ]

    def _apply_roles(self, leaders: Sequence[Partition], followers: Sequence[Partition]) -> None:
        """On the leadership thread: tasks and RLMM assignment for the tiered partitions."""
        rlm = self.rlm
        if rlm is None:
            return
        led, followed = dict(self._tiered(leaders)), dict(self._tiered(followers))
        if not led and not followed:
            return
        rlmm = self.rlmm
        if isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
            # A former leader's last events on a partition this broker now leads still apply.
            cache = self.broker.replica_manager.metadata_cache
            others = {b.broker_id for b in cache.alive_brokers()}
            for p in [*leaders, *followers]:
                state = cache.partition(p.tp)
                if state is not None:
                    others.update(state.replicas)
            rlmm.set_other_brokers(others)
        for attempt in range(1, LEADERSHIP_ATTEMPTS + 1):
            try:
                rlm.on_leadership_change(led, followed)
                return
            except (RemoteStorageError, CoreError, OSError) as e:
                # The metadata topic's leaders may be moving (a broker just died): retry,
                # in order with the changes queued behind this one.
                if attempt == LEADERSHIP_ATTEMPTS or self.rlm is not rlm:
                    log.exception("remote tier: leadership change failed")
                    return
                log.warning("remote tier: leadership change failed (%s); retrying", e)
                time.sleep(1.0)

    def on_partitions_changed(
        self, leaders: Sequence[Partition], followers: Sequence[Partition]
    ) -> None:
        """LeaderAndIsr applied: lead or follow the tiered ones (on the leadership thread),
        and follow the metadata partitions led here."""
        led = {p.index for p in leaders if p.topic == METADATA_TOPIC}
        followed = {p.index for p in followers if p.topic == METADATA_TOPIC}
        if self._in_cluster and (led or followed):
            self._led_metadata = (self._led_metadata | led) - followed
            if self.rlm is not None:
                self._leadership.submit(self._follow_metadata)
        if self.rlm is not None:
            self._leadership.submit(self._apply_roles, list(leaders), list(followers))

    def on_partitions_stopped(self, stopped: Sequence[TopicPartition], deleted: bool) -> None:
        """StopReplica applied: the partitions' tasks stop and their metadata is released
        (a deleted topic's remote data is the remover's, see ``mark_topic_deleted``)."""
        gone = {index for topic, index in stopped if topic == METADATA_TOPIC}
        if self._in_cluster and gone & self._led_metadata:
            self._led_metadata -= gone
            if self.rlm is not None:
                self._leadership.submit(self._follow_metadata)
        rlm = self.rlm
        if rlm is None:
            return
        cache = self.broker.replica_manager.metadata_cache
        tps = []
        for topic, index in stopped:
            # The remote tier's own record first: a topic deletion's UpdateMetadata has
            # removed the topic from the metadata cache before its StopReplica arrives.
            hosted = rlm.hosted_partition(topic, index)
            if hosted is not None:
                tps.append(hosted)
                continue
            topic_id = cache.topic_id(topic)
            if topic_id is None:
                info = self.broker.topics.get(topic)
                topic_id = info.topic_id if info is not None else None
            if topic_id is not None:
                tps.append(TopicIdPartition(topic_id, topic, index))
        if tps:
            self._leadership.submit(self._stop, tps, deleted)

    def _stop(self, tps: list[TopicIdPartition], deleted: bool) -> None:
        rlm = self.rlm
        if rlm is None:
            return
        try:
            rlm.on_stop_partitions(tps, delete=deleted)
        except (RemoteStorageError, CoreError, OSError):
            log.exception("remote tier: stopping %s failed", tps)

    def _partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        p = self.broker.replica_manager.partition(topic, partition)
        return p.log if p is not None else None

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

    async def remote_log_aux_state(
        self, topic_id: object, topic: str, partition: int, epoch: int, offset: int
    ) -> RemoteLogAuxState:
        tp = TopicIdPartition(topic_id, topic, partition)  # type: ignore[arg-type]
        rlm = self._running()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, rlm.remote_log_aux_state, tp, epoch, offset)

    async def remote_log_start(
        self, topic_id: object, topic: str, partition: int, timeout_s: float
    ) -> RemoteLogStart | None:
        tp = TopicIdPartition(topic_id, topic, partition)  # type: ignore[arg-type]
        rlm = self._running()
        loop = asyncio.get_running_loop()
        # The RLMM loads the partition's metadata once the leadership thread assigns it:
        # wait on the loop (no executor thread held per waiting partition).
        deadline = loop.time() + timeout_s
        pause = 0.01
        while not rlm.is_ready(tp):
            if loop.time() >= deadline or self.rlm is not rlm:
                raise KafkaStorageError(
                    f"{tp}: the remote log metadata did not catch up within {timeout_s:g} s"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        return await loop.run_in_executor(None, rlm.remote_log_start, tp)

    def on_topic_created(self, topic: TopicInfo) -> None:
        """A topic was created or reconfigured (tiering may begin on partitions already
        hosted): its hosted partitions take their roles' tasks."""
        if self.manifests is not None:
            self.manifests.topic_changed(topic)
        if self.rlm is None:
            return
        manager = self.broker.replica_manager
        hosted = [
            p for p in (manager.partition(topic.name, i) for i in range(topic.partitions)) if p
        ]
        self._leadership.submit(
            self._apply_roles,
            [p for p in hosted if p.is_leader],
            [p for p in hosted if not p.is_leader],
        ).result()

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        """A topic was deleted (in a cluster: it left this broker's metadata): its manifest
        goes. Alone, this broker is also the controller: the partitions stop here and are
        marked for the deletion of their remote data."""
        if self.manifests is not None:
            self.manifests.topic_deleted(topic)
        if self._in_cluster or self.rlm is None:
            return
        indexes = list(range(topic.partitions))
        if self.broker.topics.effective_config(topic).remote_storage_enable:
            self.mark_topic_deleted(topic.name, topic.topic_id, indexes)
        tps = [TopicIdPartition(topic.topic_id, topic.name, p) for p in indexes]
        self.rlm.on_stop_partitions(tps, delete=True)

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        if self.manifests is not None:
            await loop.run_in_executor(None, self.manifests.close)
        if self._configuring is not None:
            self._configuring.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._configuring
            self._configuring = None
        if self.remover is not None:
            await loop.run_in_executor(None, self.remover.stop)
        if self.rlm is not None:
            self.broker.replica_manager.remote = None
            await loop.run_in_executor(self._leadership, lambda: None)  # pending changes done
            await loop.run_in_executor(None, self.rlm.shutdown)
        self._leadership.shutdown(wait=False)
        self._leadership = ThreadPoolExecutor(1, thread_name_prefix="rlm-leadership")
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
        bound = await self.broker.start()
        try:
            await self.remote_tier.start()
            port = self.broker.config.get("metrics.prometheus.port")
            if port >= 0:
                host = self.broker.config.get("metrics.prometheus.host")
                quotas = QuotaCollector(self.broker.quotas.metrics)
                replication = ReplicationCollector(self._replication_metrics)
                endpoint = PrometheusEndpoint(
                    host, port, self._tiering_metrics, [quotas, replication]
                )
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

    def _replication_metrics(self):
        manager = getattr(self.broker, "replica_manager", None)
        if manager is None:
            return []
        # Read from the endpoint's thread: peek_rate and the counters change nothing.
        now = manager.clock_ms()
        return [
            ("LeaderReplication", manager.leader_quota.peek_rate(now),
             manager.leader_quota.throttled_fetches),
            ("FollowerReplication", manager.follower_quota.peek_rate(now),
             manager.follower_quota.throttled_fetches),
        ]  # fmt: skip

    def _tiering_metrics(self):
        rlm = self.remote_tier.rlm
        return rlm.metrics if rlm is not None else None

    async def stop(self) -> None:
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
            self.metrics_endpoint = None
        await self.remote_tier.stop()
        await self.broker.stop()
