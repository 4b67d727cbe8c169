"""Broker: the core broker composed from its parts, started and stopped as one.

Running alone (no ``zookeeper.connect``): open the log dirs (recovering if needed), load the
topic registry and reconcile it with the partition directories, begin a new leader epoch for
every partition, lead them all, start the housekeeping tasks, then listen. Shutdown reverses
it and leaves the clean-shutdown marker.

In a cluster (``zookeeper.connect``, ``core.server.cluster_mode``): join ZooKeeper first (the
cluster id must match the log dirs'), mirror the cluster's topics and configs from it, open
the log dirs, listen, then register and campaign for the controller; from then on the
controller's LeaderAndIsr, UpdateMetadata and StopReplica say which partitions this broker
leads or follows. Topic changes go through ZooKeeper (``core.server.zk_admin``), topic config
changes reach every broker through its notifications (``core.server.config_sync``). SIGTERM
first moves this broker's leaderships away (controlled shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.clock import now_ms
from core.errors import CoreError
from core.log.config import LogConfig
from core.log.log_manager import LogManager
from core.log.producer_state import OpenTxn
from core.records.builder import build_control_batch
from core.records.record import ControlRecordType
from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.authorizer import AclAuthorizer, Authorizer
from core.server.cluster_mode import ClusterMode
from core.server.cluster_types import (
    LEADER_DURING_DELETE,
    BrokerEndpoint,
    BrokerInfo,
    PartitionState,
    StopReplicaPartition,
    TopicPartition,
)
from core.server.config import BrokerConfig
from core.server.config_sync import ConfigChangeSync
from core.server.controller.errors import NotControllerError
from core.server.group_coordinator import Group, GroupCoordinator
from core.server.group_loader import GroupLoader
from core.server.group_offsets import GroupOffsetStore
from core.server.handler_support import ControllerPort, error_code
from core.server.handlers import HANDLERS, SERVED_INTER_BROKER_VERSIONS, api_versions_response
from core.server.internal_topics import TRANSACTION_STATE_TOPIC, BrokerTrust
from core.server.isr_writer import ZkIsrWriter
from core.server.local_controller import LocalController
from core.server.metadata_cache import MetadataCache
from core.server.network import BoundListener, ListenerSpec, SocketServer
from core.server.node_client import BrokerEndpoint as NodeEndpoint
from core.server.node_client import ClientSettings, NodeClient
from core.server.offsets_topic import (
    OFFSETS_TOPIC,
    OffsetsTopic,
    ensure_offsets_topic,
    offsets_topic_configs,
)
from core.server.partition import Partition
from core.server.producer_ids import ProducerIdSource, RegistryProducerIds, ZkProducerIds
from core.server.protocol import ProtocolCodec, RequestContext
from core.server.quota_enforcement import handle_with_quotas
from core.server.quota_store import ClientQuotaStore, LocalQuotaStore
from core.server.quotas import ClientQuotas
from core.server.replica_assignment import InvalidReplicaAssignmentError
from core.server.replica_manager import ReplicaManager
from core.server.replication_settings import ReplicationSettings
from core.server.sasl import ScramCredentialSource
from core.server.scram_credentials import (
    LocalScramCredentialStore,
    ScramCredentialCache,
    ScramCredentialStore,
)
from core.server.security import ListenerSecurity, listener_security, with_runtime_scram
from core.server.single_controller import SingleBrokerController
from core.server.timing_wheel import Timer
from core.server.topics import (
    InvalidReplicationFactorError,
    TopicExistsError,
    TopicInfo,
    TopicRegistry,
    UnknownTopicError,
    read_partition_metadata,
)
from core.server.transaction_coordinator import CoordinatorSettings, TransactionCoordinator
from core.server.transaction_loader import TransactionLoader
from core.server.transaction_marker_channel import MarkerChannel, TxnMarker
from core.server.transaction_state_topic import (
    TransactionStateLog,
    ensure_transaction_state_topic,
    transaction_state_topic_configs,
)
from core.server.transaction_verification import abort_hanging_transactions, verify_remotely
from core.server.zk_admin import MetadataWaiters, RequestTimedOutError, ZkClusterAdmin
from core.server.zk_authorizer import ZkAclAuthorizer
from core.server.zk_entity_configs import ZkEntityConfigs
from core.server.zk_quota_store import ZkQuotaStore
from core.server.zk_scram_store import ZkScramCredentialStore
from core.server.zookeeper import paths as zk_paths
from core.server.zookeeper.client import ZkConnectionState
from core.server.zookeeper.data import EndPoint
from core.server.zookeeper.errors import ZkError

log = logging.getLogger(__name__)

# How long a write to __consumer_offsets waits for the event loop to take it (from the
# flushing thread); only a broker stopping under it makes it wait this long.
OFFSETS_APPEND_TIMEOUT_S = 30.0
NOT_ENOUGH_REPLICAS = 19
# How long the opening of CreatePartitions' new partitions waits for their leaders in a
# cluster; the request answers REQUEST_TIMED_OUT at its own timeout, usually shorter.
CREATE_PARTITIONS_WAIT_MS = 120_000


def listeners_security(
    config: BrokerConfig, runtime_scram: ScramCredentialSource, *, cluster: bool = False
) -> tuple[dict[str, ListenerSecurity], BrokerTrust]:
    """What each broker listener requires, and who acts as a broker.

    Run-time SCRAM credentials (AlterUserScramCredentials) authenticate on every SASL
    listener except the one whose connections act as brokers (``internal_topics``, rule 2):
    the accounts that listener accepts must stay the brokers' own, those of its JAAS entry,
    or whoever may create a SCRAM user could write the internal topics.

    Raises:
        InvalidConfigError: a listener's setting, naming the key.
    """
    security = {x.name: listener_security(config, x) for x in config.broker_listeners}
    trust = BrokerTrust.from_config(config, security, cluster=cluster)
    for name, listener in security.items():
        if name != trust.broker_listener:
            security[name] = with_runtime_scram(listener, runtime_scram)
    return security, trust


class NameLocks:
    """One asyncio lock per topic name, dropped when nobody holds or waits for it: the
    disk work of a topic's creation and deletion runs one at a time, in arrival order."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(name, (asyncio.Lock(), 0))
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)


class Broker:
    """A tierlog broker; request handlers see it as a ``BrokerServices``
    (core.server.handler_support)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.handlers = HANDLERS
        # An inter-broker api is decoded only once it has a handler: a request that decodes
        # must get an answer.
        self.codec = ProtocolCodec(SUPPORTED_VERSIONS, SERVED_INTER_BROKER_VERSIONS)
        self._group_offsets: GroupOffsetStore | None = None
        self.authorizer: Authorizer | None = None  # authorizer.class.name set
        self.quotas: ClientQuotas  # loaded with the storage
        # Who may write the internal topics; the listener rule needs the listeners' security.
        self.broker_trust = BrokerTrust.from_config(config)
        self._group_coordinator: GroupCoordinator | None = None
        self._transaction_coordinator: TransactionCoordinator | None = None
        self._hanging_check: asyncio.TimerHandle | None = None
        self._group_loader: GroupLoader | None = None
        self._transaction_loader: TransactionLoader | None = None
        self._transaction_state_creation: asyncio.Future[None] | None = None
        self._offset_expiry: asyncio.TimerHandle | None = None
        self.log_manager: LogManager | None = None
        self.topics: TopicRegistry
        self.replica_manager: ReplicaManager
        self.metadata_cache = MetadataCache(config.node_id)
        self._waiters = MetadataWaiters(self.metadata_cache)
        # zookeeper.connect: a cluster member, else a broker running alone.
        self.cluster: ClusterMode | None = None
        if config.get("zookeeper.connect"):
            self.cluster = ClusterMode(config, self.metadata_cache)
        self._admin: ZkClusterAdmin | None = None
        self._config_sync: ConfigChangeSync | None = None
        # In a cluster: users', clients' and ips' configs (SCRAM credentials, quotas).
        self._entity_configs: ZkEntityConfigs | None = None
        self._zk_scram: ZkScramCredentialStore | None = None
        # The remote tier's marking of a deleted tiered topic's partitions for the deletion
        # of their remote data (topic, topic id, partition indexes); set by the remote tier.
        self.remote_deletion_marker: Callable[[str, uuid.UUID, list[int]], None] | None = None
        self._producer_ids: ProducerIdSource | None = None
        self._offsets_creation: asyncio.Task[None] | None = None
        self.local_controller: LocalController | None = None  # running alone
        self._isr_writer: ZkIsrWriter | None = None  # in a cluster
        self._fetcher_client: NodeClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.timer: Timer | None = None
        self.server: SocketServer | None = None
        self.bound: list[BoundListener] = []
        self._stopped = asyncio.Event()
        self._topic_locks = NameLocks()
        self._topic_tasks: set[asyncio.Future[TopicInfo]] = set()
        self._background: set[asyncio.Future[Any]] = set()
        # What the SCRAM servers of the SASL listeners check, filled from the store when
        # the log dirs are open (before any listener accepts a connection).
        self._scram_cache = ScramCredentialCache()
        self.scram_credentials: ScramCredentialStore

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> list[BoundListener]:
        """Open the logs and listen; returns the bound listeners (real ports). In a cluster,
        then register and campaign for the controller.

        Raises:
            CoreError (InvalidConfigError, ClusterStartError, InconsistentClusterIdError,
            ...): naming what is wrong; ZkError: ZooKeeper cannot be reached.
        """
        loop = self._loop = asyncio.get_running_loop()
        config = self.config
        # TLS material and SASL accounts first: a bad setting stops start-up naming its key
        # before any disk work.
        cluster = self.cluster
        security, self.broker_trust = listeners_security(
            config, self._scram_cache, cluster=cluster is not None
        )
        for warning in (self.broker_trust.cluster_warning, self.broker_trust.super_user_warning):
            if warning:
                log.warning("%s", warning)
        cluster_id = ""
        if cluster is not None:
            cluster_id = await cluster.connect()
            if config.get("authorizer.class.name"):
                # Every broker decides from the ACLs in ZooKeeper, loaded before it serves.
                zk_authorizer = ZkAclAuthorizer(
                    cluster.connected_zk.zookeeper,
                    self.broker_trust.super_users,
                    allow_if_no_acl=config.get("allow.everyone.if.no.acl.found"),
                )
                await zk_authorizer.start()
                self.authorizer = zk_authorizer
            zk = cluster.connected_zk
            self._config_sync = ConfigChangeSync(
                zk, self._apply_topic_config, self._on_entity_change
            )
            # Before anything is loaded from ZooKeeper: no change made meanwhile is missed.
            await self._config_sync.mark()
            self._entity_configs = ZkEntityConfigs(zk, loop)
            # SCRAM users of the cluster, known before the listeners accept anyone.
            self._zk_scram = ZkScramCredentialStore(self._entity_configs, self._scram_cache)
            await self._zk_scram.load()
            self.topics = TopicRegistry.in_memory(config.log_config_defaults())
            # Kafka's LogManager reads the topics' overrides from ZooKeeper before it opens
            # the logs (a compacted topic must not be opened with the default policy).
            await self._mirror_all_topics()
        # Loading and recovery do blocking disk work: keep them off the event loop.
        await loop.run_in_executor(None, self._open_storage, cluster_id)
        self.timer = Timer(loop)
        self._group_coordinator = GroupCoordinator(
            self.timer,
            initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
            max_size=config.get("group.max.size"),
            on_change=self._store_group,
        )
        assert self.log_manager is not None
        self.replica_manager = ReplicaManager(
            self.log_manager,
            self.timer,
            self.metadata_cache,
            ReplicationSettings.from_config(config),
        )
        self._open_group_store()
        self._open_transaction_coordinator()
        if cluster is None:
            await self._start_alone()
        else:
            self._start_in_cluster(cluster)
        self._schedule_offset_expiry()
        self._start_transaction_timers()
        self.log_manager.startup()
        self.server = SocketServer(
            self.codec,
            self.handle,
            self._unsupported_version,
            max_request_bytes=config.socket_request_max_bytes,
            max_connections=config.max_connections,
            idle_timeout_s=config.connections_max_idle_ms / 1000,
            queued_max_request_bytes=config.queued_max_request_bytes,
            send_buffer_bytes=config.socket_send_buffer_bytes,
            receive_buffer_bytes=config.socket_receive_buffer_bytes,
            listen_backlog=config.socket_listen_backlog_size,
        )
        specs = [
            ListenerSpec(x.name, x.host, x.port, security[x.name]) for x in config.broker_listeners
        ]
        self.bound = await self.server.start(specs)
        # Only now can clients reach the coordinator: the restored members' sessions count
        # from here (see GroupCoordinator.restore).
        self.group_coordinator.start_restored_sessions()
        self.replica_manager.startup()
        if self.local_controller is not None:
            self.local_controller.set_broker_info(self._broker_info())
        if cluster is not None:
            await self._join_cluster(cluster)
        return self.bound

    def _open_group_store(self) -> None:
        """The offset store over ``__consumer_offsets``, empty: the partitions this broker
        leads are loaded as their leadership arrives (``GroupLoader``)."""
        loop = asyncio.get_running_loop()
        fetches = self.replica_manager.fetch_purgatory

        def wake_fetches(index: int) -> None:
            # Called from flushes on executor threads; one may outlive the loop at shutdown.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fetches.check_and_complete, (OFFSETS_TOPIC, index))

        journal = OffsetsTopic(
            lambda i: self.replica_manager.partition(OFFSETS_TOPIC, i),
            self.config.get("offsets.topic.num.partitions"),
            on_append=wake_fetches,
            appender=self._append_offsets_batch,
        )
        self._group_offsets = GroupOffsetStore(journal, load=False)
        self._group_loader = GroupLoader(
            self._group_offsets,
            self.group_coordinator,
            self._offsets_partition_count,
        )

    def _offsets_partition_count(self) -> int:
        """``__consumer_offsets``' partition count (0 before it exists): from the registry,
        which knows a topic before its leadership is applied (the MetadataCache follows)."""
        info = self.topics.get(OFFSETS_TOPIC)
        return info.partitions if info is not None else 0

    def _append_offsets_batch(self, index: int, batch: bytearray) -> int:
        """The journal's appender, called from the flushing thread: the append runs on the
        event loop, through the replica manager, as a produce would."""
        loop = self._loop
        assert loop is not None

        async def append() -> int:
            # Kafka's coordinator writes with acks=all: NOT_ENOUGH_REPLICAS below
            # min.insync.replicas, before anything is appended.
            partition = self.replica_manager.leader_partition(OFFSETS_TOPIC, index)
            self.replica_manager.append(partition, batch, required_acks=-1)
            return partition.log.log_end_offset

        return asyncio.run_coroutine_threadsafe(append(), loop).result(OFFSETS_APPEND_TIMEOUT_S)

    async def _start_alone(self) -> None:
        """A broker running alone leads every partition it has, from its registry, through
        its in-process controller (``LocalController``)."""
        self._producer_ids = RegistryProducerIds(self.topics)
        loader = self._group_loader
        assert loader is not None
        self.replica_manager.add_leadership_listener(loader)
        self.local_controller = LocalController(
            self.topics, self.replica_manager, self.metadata_cache, self._broker_info()
        )
        await self.local_controller.startup()
        # The groups and transactions are back before the first request.
        await loader.wait_idle()
        assert self._transaction_loader is not None
        await self._transaction_loader.wait_idle()
        first_dir = Path(self.config.log_dirs[0])
        await asyncio.get_running_loop().run_in_executor(
            None, self.group_offsets.import_legacy, first_dir
        )

    def _start_in_cluster(self, cluster: ClusterMode) -> None:
        zk = cluster.connected_zk
        config = self.config
        manager = self.replica_manager
        assert self._group_loader is not None
        manager.add_leadership_listener(self._group_loader)
        self._isr_writer = ZkIsrWriter(zk)
        manager.set_isr_writer(self._isr_writer)
        self._fetcher_client = NodeClient(
            ClientSettings.from_config(
                config, request_timeout_ms=config.get("replica.socket.timeout.ms")
            )
        )
        manager.set_node_client(self._fetcher_client, config.inter_broker_listener_name)
        self._wire_transactions_to_cluster(self._fetcher_client)
        self._producer_ids = ZkProducerIds(zk, self.config.node_id)
        self._admin = ZkClusterAdmin(zk, self._waiters, self.config.log_config_defaults())
        cluster.add_session_listener(self._on_session_state)

    async def _join_cluster(self, cluster: ClusterMode) -> None:
        """Register with the listeners' real ports, follow config changes, campaign."""
        advertised = []
        protocols = self.config.listener_security_protocol_map
        for listener in self.config.advertised_listeners:
            host, port = self.advertised_endpoint(listener.name)
            advertised.append(
                EndPoint(listener.name, host, port, protocols.get(listener.name, listener.name))
            )
        assert self._config_sync is not None
        await self._config_sync.start()
        await cluster.register(advertised)
        await cluster.start_controller(self._deletion_started)

    async def _on_entity_change(self, entity_path: str) -> None:
        """A user, client or ip config changed in ZooKeeper (on this broker or another):
        reload the user's SCRAM credentials and the entity's quotas."""
        parts = entity_path.split("/")
        if (
            self._zk_scram is not None
            and len(parts) == 2
            and parts[0] == zk_paths.CONFIG_USERS
            and parts[1] != zk_paths.DEFAULT_ENTITY
        ):
            await self._zk_scram.reload(parts[1])
        store = self.quotas.store
        if isinstance(store, ZkQuotaStore):
            await store.reload(entity_path, self.quotas.apply)

    def _broker_info(self) -> BrokerInfo:
        """This broker as other brokers and clients reach it (the bound ports once bound)."""
        endpoints = []
        for adv in self.config.advertised_listeners:
            host, port = self.advertised_endpoint(adv.name) if self.bound else (adv.host, adv.port)
            endpoints.append(BrokerEndpoint(adv.name, host, port, adv.security_protocol))
        return BrokerInfo(self.config.node_id, tuple(endpoints), self.config.broker_rack)

    def _schedule_offset_expiry(self) -> None:
        interval = self.config.get("offsets.retention.check.interval.ms") / 1000
        loop = asyncio.get_running_loop()
        self._offset_expiry = loop.call_later(interval, self._expire_offsets)

    def _expire_offsets(self) -> None:
        """offsets.retention.minutes: drop the offsets of groups empty for that long (and of
        simple groups, each offset that long after its commit)."""
        self._schedule_offset_expiry()
        retention_ms = self.config.get("offsets.retention.minutes") * 60_000
        empty, active = self.group_coordinator.offset_expiry_inputs()
        version, dropped = self.group_offsets.expire(now_ms(), retention_ms, empty, active)
        if dropped:
            log.info("expired %d committed offsets (offsets.retention.minutes)", dropped)
        # Also when only group metadata expired: its tombstones are queued too.
        self._flush_in_background(version, "expired offsets")

    def _flush_in_background(self, version: int, what: str) -> None:
        """Persist the offset store up to ``version`` on an executor thread; a failure is
        logged (nobody waits for the answer)."""
        store = self.group_offsets
        future = asyncio.get_running_loop().run_in_executor(None, store.flush, version)
        future.add_done_callback(
            lambda f: f.exception() and log.error("cannot persist %s: %s", what, f.exception())
        )

    # -- transactions ----------------------------------------------------------------------
    def _open_transaction_coordinator(self) -> None:
        """The transaction coordinator over ``__transaction_state``, empty: the partitions
        this broker leads are loaded as their leadership arrives (``TransactionLoader``)."""
        replica_manager = self.replica_manager
        config = self.config

        async def written(partition: Partition, offset: int) -> int:
            # Kafka's coordinator writes with acks=all, and fsyncs: a state it acted on
            # survives a crash of the leader and of the whole cluster.
            await replica_manager.wait_durable_always(partition)
            return await replica_manager.wait_replicated(
                partition, offset, config.get("request.timeout.ms")
            )

        def leader(index: int) -> Partition | None:
            partition = replica_manager.partition(TRANSACTION_STATE_TOPIC, index)
            return partition if partition is not None and partition.is_leader else None

        state_log = TransactionStateLog(
            leader, written, append=lambda p, batch: replica_manager.append(p, batch, -1)
        )
        markers = MarkerChannel(
            replica_manager,
            leader_of=self._marker_leader,
            on_written=self.on_marker_written,
            exists=lambda t, i: self.metadata_cache.partition((t, i)) is not None,
        )
        self._transaction_coordinator = TransactionCoordinator(
            lambda: info.partitions if (info := self.topics.get(TRANSACTION_STATE_TOPIC)) else 1,
            state_log,
            markers,
            self.allocate_producer_id,
            CoordinatorSettings(
                max_timeout_ms=config.get("transaction.max.timeout.ms"),
                abort_interval_ms=config.get(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms"
                ),
                id_expiration_ms=config.get("transactional.id.expiration.ms"),
                remove_interval_ms=config.get(
                    "transaction.remove.expired.transaction.cleanup.interval.ms"
                ),
            ),
        )
        self._transaction_loader = TransactionLoader(self._transaction_coordinator)
        replica_manager.add_leadership_listener(self._transaction_loader)

    def _marker_leader(self, tp: tuple[str, int]) -> NodeEndpoint | None:
        """Where a marker of ``tp`` goes: None for this broker (or no leader known: the
        local write answers NOT_LEADER_OR_FOLLOWER and the channel retries), else the
        leader's inter-broker endpoint."""
        leader = self.metadata_cache.leader(tp)
        if leader is None or leader == self.config.node_id:
            return None
        return self.replica_manager.leader_endpoint(leader)

    def _wire_transactions_to_cluster(self, client: NodeClient) -> None:
        """Markers for partitions led elsewhere go over WriteTxnMarkers, and KIP-890
        verification of an id coordinated elsewhere over AddPartitionsToTxn v4."""
        coordinator = self.transaction_coordinator
        coordinator.markers.set_node_client(client)

        async def remote(
            txn_id: str, pid: int, epoch: int, partitions: list[TopicPartition]
        ) -> dict[TopicPartition, int]:
            index = coordinator.partition_for(txn_id)
            leader = self.metadata_cache.leader((TRANSACTION_STATE_TOPIC, index))
            if leader == self.config.node_id:
                return coordinator.verify(txn_id, pid, epoch, partitions)
            endpoint = None if leader is None else self.replica_manager.leader_endpoint(leader)
            if endpoint is None:
                # No coordinator now: NOT_ENOUGH_REPLICAS makes the producer retry (Kafka's
                # answer when the verification cannot reach the coordinator).
                return dict.fromkeys(partitions, NOT_ENOUGH_REPLICAS)
            return await verify_remotely(client, endpoint, txn_id, pid, epoch, partitions)

        coordinator.remote = remote

    async def ensure_transaction_state_topic(self) -> None:
        """Create ``__transaction_state`` in the cluster when a transactional producer first
        asks for its coordinator, with ``transaction.state.log.replication.factor``
        replicas, or one per live broker when fewer are alive (logged as a WARNING)."""
        if self._admin is None or self.metadata_cache.contains_topic(TRANSACTION_STATE_TOPIC):
            return
        creation = self._transaction_state_creation
        if creation is None or creation.done():
            creation = asyncio.ensure_future(self._create_transaction_state_topic())
            self._transaction_state_creation = creation
            self._background.add(creation)
            creation.add_done_callback(self._background.discard)

    async def _create_transaction_state_topic(self) -> None:
        assert self._admin is not None
        config = self.config
        wanted = config.get("transaction.state.log.replication.factor")
        live = len(self.metadata_cache.alive_brokers())
        replication = min(wanted, max(live, 1))
        if replication < wanted:
            log.warning(
                "creating %s with replication factor %d: transaction.state.log.replication."
                "factor=%d but only %d brokers are alive; it keeps %d replicas per partition",
                TRANSACTION_STATE_TOPIC, replication, wanted, live, replication,
            )  # fmt: skip
        configs = transaction_state_topic_configs(
            config.get("transaction.state.log.segment.bytes"),
            min(config.get("transaction.state.log.min.isr"), replication),
        )
        try:
            await self._admin.create_topic(
                TRANSACTION_STATE_TOPIC,
                config.get("transaction.state.log.num.partitions"),
                configs,
                replication_factor=replication,
            )
        except CoreError as e:
            if e.error_code != 36:  # TOPIC_ALREADY_EXISTS: another broker was quicker
                log.error("cannot create %s: %s", TRANSACTION_STATE_TOPIC, e)

    def _start_transaction_timers(self) -> None:
        self.transaction_coordinator.start()
        self._schedule_hanging_check()

    def _schedule_hanging_check(self) -> None:
        interval = self.config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms")
        loop = asyncio.get_running_loop()
        self._hanging_check = loop.call_later(interval / 1000, self._abort_hanging)

    def _abort_hanging(self) -> None:
        self._schedule_hanging_check()
        coordinator = self.transaction_coordinator
        replica_manager = self.replica_manager

        def write_abort(partition: Partition, txn: OpenTxn) -> None:
            log.warning(
                "aborting a transaction of producer %d open in %s-%d since offset %d that "
                "no coordinator knows of (older than transaction.max.timeout.ms)",
                txn.producer_id,
                partition.topic,
                partition.index,
                txn.first_offset,
            )
            batch = build_control_batch(
                ControlRecordType.ABORT,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                coordinator_epoch=max(txn.coordinator_epoch, 0),
            )
            try:
                replica_manager.append_marker(partition.topic, partition.index, batch)
            except (LookupError, CoreError) as e:
                log.warning("cannot abort that transaction: %s", e)

        abort_hanging_transactions(
            [p for p in replica_manager.partitions.values() if p.is_leader],
            coordinator.knows_open_transaction,
            write_abort,
            self.config.get("transaction.max.timeout.ms"),
            now_ms(),
        )

    def on_marker_written(self, tp: tuple[str, int], marker: TxnMarker) -> None:
        """Transactional offset commits of ``__consumer_offsets`` complete at the marker."""
        if tp[0] == OFFSETS_TOPIC and self._group_offsets is not None:
            self._group_offsets.complete_txn(marker.producer_id, tp[1], marker.commit)

    @property
    def transaction_coordinator(self) -> TransactionCoordinator:
        assert self._transaction_coordinator is not None, "the broker is not started"
        return self._transaction_coordinator

    def _store_group(self, group: Group) -> None:
        """The coordinator's hook: journal the group's metadata in the background (a lost
        record only makes the group's members rejoin after a restart)."""
        if self._group_offsets is None:
            return  # start-up has not opened the store yet
        metadata = GroupCoordinator.metadata_of(group)
        version = self.group_offsets.store_group(group.group_id, metadata)
        self._flush_in_background(version, f"the metadata of group {group.group_id}")

    def _open_storage(self, cluster_id: str = "") -> None:
        config = self.config
        first_dir = Path(config.log_dirs[0])
        first_dir.mkdir(parents=True, exist_ok=True)
        # SCRAM credentials and client quotas: in the first log dir of a broker running
        # alone, in ZooKeeper for the brokers of a cluster (every broker sees the same).
        quota_store: ClientQuotaStore
        if self._entity_configs is not None and self._zk_scram is not None:
            self.scram_credentials = self._zk_scram
            quota_store = ZkQuotaStore(self._entity_configs)
        else:
            self.scram_credentials = LocalScramCredentialStore(first_dir, self._scram_cache)
            quota_store = LocalQuotaStore(first_dir)
        self.quotas = ClientQuotas.open(
            quota_store,
            samples=config.get("quota.window.num"),
            window_seconds=config.get("quota.window.size.seconds"),
        )
        if self.cluster is None:
            self.topics = TopicRegistry(first_dir, config.log_config_defaults())
            ensure_offsets_topic(
                self.topics,
                config.get("offsets.topic.num.partitions"),
                config.get("offsets.topic.segment.bytes"),
            )
            ensure_transaction_state_topic(
                self.topics,
                config.get("transaction.state.log.num.partitions"),
                config.get("transaction.state.log.segment.bytes"),
                config.get("transaction.state.log.replication.factor"),
                config.get("transaction.state.log.min.isr"),
            )
            if config.get("authorizer.class.name"):
                self.authorizer = AclAuthorizer(
                    first_dir,
                    self.broker_trust.super_users,
                    allow_if_no_acl=config.get("allow.everyone.if.no.acl.found"),
                )
        self.log_manager = LogManager(
            config.log_manager_config(cluster_id=cluster_id), topic_config=self.topics.log_config
        )
        if self.cluster is None:
            self._reconcile_topics()
            self.topics.bump_leader_epochs()

    def _reconcile_topics(self) -> None:
        """Adopt topics whose partitions exist on disk but not in the registry."""
        assert self.log_manager is not None
        found: dict[str, tuple[Any, int]] = {}
        for plog in self.log_manager.all_logs():
            if self.topics.get(plog.topic) is not None:
                continue
            topic_id = read_partition_metadata(plog.dir)
            if topic_id is None:
                log.warning("%s has no partition.metadata; it is not served", plog.dir)
                continue
            _, count = found.get(plog.topic, (topic_id, 0))
            found[plog.topic] = (topic_id, max(count, plog.partition + 1))
        for name, (topic_id, count) in found.items():
            self.topics.adopt(name, topic_id, count)

    async def stop(self) -> None:
        cluster = self.cluster
        if (
            cluster is not None
            and cluster.zk is not None
            and cluster.broker_epoch >= 0
            and self.config.get("controlled.shutdown.enable")
            and self.server is not None
        ):
            # Kafka's order: leaderships move away while this broker still serves.
            client = self._shutdown_client()
            try:
                await cluster.controlled_shutdown(client)
            finally:
                await client.close()
        if self._config_sync is not None:
            self._config_sync.stop()
        if isinstance(self.authorizer, ZkAclAuthorizer):
            self.authorizer.stop()
        if self.server is not None:
            await self.server.stop()
        if self._topic_tasks:
            # Creations stop at their next step (the next start opens the rest); deletions
            # finish: one cut short would leave partition dirs that the next start adopts
            # as a topic again.
            self.replica_manager.stopping = True
            await asyncio.wait(list(self._topic_tasks))
        for task in list(self._background):
            task.cancel()
        if self._offset_expiry is not None:
            self._offset_expiry.cancel()
        # No marker or state write of the coordinator after the replicas shut down.
        if self._transaction_coordinator is not None:
            self._transaction_coordinator.shutdown()
        if self._hanging_check is not None:
            self._hanging_check.cancel()
        replica_manager = getattr(self, "replica_manager", None)
        if replica_manager is not None:  # started
            await replica_manager.shutdown()
        if self._isr_writer is not None:
            with contextlib.suppress(CoreError, ZkError):
                await self._isr_writer.close()
        if self._fetcher_client is not None:
            await self._fetcher_client.close()
        if cluster is not None:
            await cluster.close()
        if self._group_coordinator is not None:
            self._group_coordinator.shutdown()
        if self.timer is not None:
            self.timer.shutdown()
        if self.log_manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
            self.log_manager = None
        self._stopped.set()

    def _shutdown_client(self) -> NodeClient:
        return NodeClient(ClientSettings.from_config(self.config))

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # -- requests --------------------------------------------------------------------------
    async def handle(self, context: RequestContext, request: Any) -> Any:
        handler = self.handlers.get(context.api_key)
        if handler is None:  # advertised but not wired: a bug, logged by the network layer
            raise RuntimeError(f"no handler for api key {context.api_key}")
        return await handle_with_quotas(self, handler, context, request)

    def _unsupported_version(self, context: RequestContext) -> Any:
        response_type = self.codec.response_type(ApiKey.API_VERSIONS, 0)
        return api_versions_response(response_type, error_code(35))

    # -- what handlers use (BrokerServices) -------------------------------------------------
    @property
    def group_coordinator(self) -> GroupCoordinator:
        assert self._group_coordinator is not None, "the broker is not started"
        return self._group_coordinator

    @property
    def group_offsets(self) -> GroupOffsetStore:
        assert self._group_offsets is not None, "the broker is not started"
        return self._group_offsets

    @property
    def cluster_id(self) -> str:
        assert self.log_manager is not None
        return self.log_manager.cluster_id

    @property
    def broker_epoch(self) -> int:
        return self.cluster.broker_epoch if self.cluster is not None else -1

    @property
    def controller(self) -> ControllerPort:
        if self.cluster is not None and self.cluster.controller is not None:
            return self.cluster.controller
        if self.cluster is not None:
            return _NoController(self.config.node_id)
        return SingleBrokerController(self.metadata_cache)

    def advertised_endpoint(self, listener: str) -> tuple[str, int]:
        """Host and port clients should use for ``listener`` (the bound port for port 0)."""
        for adv in self.config.advertised_listeners:
            if adv.name == listener:
                if adv.port == 0:
                    for bound in self.bound:
                        if bound.name == listener:
                            return adv.host, bound.port
                return adv.host, adv.port
        bound = next(b for b in self.bound if b.name == listener)
        return bound.host, bound.port

    async def allocate_producer_id(self) -> int:
        assert self._producer_ids is not None, "the broker is not started"
        return await self._producer_ids.allocate()

    # -- topics ------------------------------------------------------------------------------
    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        *,
        replication_factor: int = 1,
        assignments: Mapping[int, Sequence[int]] | None = None,
        validate_only: bool = False,
        timeout_ms: int = 0,
    ) -> TopicInfo:
        """Create a topic. Alone: registered first (a second creation of the name gets
        TOPIC_ALREADY_EXISTS at once), then its partition logs opened on executor threads
        a step at a time, each step served as it opens. In a cluster: written to ZooKeeper
        (``ZkClusterAdmin.create_topic``).

        Raises:
            InvalidTopicError, TopicExistsError, InvalidPartitionsError,
            InvalidReplicationFactorError, InvalidReplicaAssignmentError,
            InvalidConfigError, RequestTimedOutError.
        """
        if self._admin is not None:
            return await self._admin.create_topic(
                name,
                partitions,
                configs,
                replication_factor=replication_factor,
                assignments=assignments,
                validate_only=validate_only,
                timeout_ms=timeout_ms,
            )
        if assignments:
            replication_factor = max(len(r) for r in assignments.values())
            if any(set(r) != {self.config.node_id} for r in assignments.values()):
                raise InvalidReplicaAssignmentError(
                    f"Unknown broker(s) in replica assignment: this broker ("
                    f"{self.config.node_id}) runs alone."
                )
            partitions = len(assignments)
        if replication_factor != 1:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target "
                f"replication factor of {replication_factor} cannot be reached because only "
                "1 broker(s) are registered."
            )
        create = functools.partial(
            self.topics.create, name, partitions, configs, validate_only=validate_only
        )
        if validate_only:
            return await asyncio.get_running_loop().run_in_executor(None, create)
        # Registration and opening are one broker task: a request cancelled (its client gone)
        # after the registry write but before the opening would otherwise leave the topic
        # registered and never served, answered LEADER_NOT_AVAILABLE until a restart.
        return await self._topic_change(self._register_and_open(create))

    async def _register_and_open(self, register: Callable[[], TopicInfo]) -> TopicInfo:
        info = await asyncio.get_running_loop().run_in_executor(None, register)
        return await self._open_topic(info)

    async def _open_topic(self, info: TopicInfo, *, added_from: int | None = None) -> TopicInfo:
        """Open the partitions of a registered topic not open yet (all of a new topic's,
        or those CreatePartitions added from index ``added_from``), then tell the remote
        tier, which starts tiering the new partitions of a tiered topic."""
        async with self._topic_locks.hold(info.name):
            current = self.topics.get(info.name)
            if current is None or current.topic_id != info.topic_id:
                # Deleted between its registration and here: nothing to open.
                log.info("topic %s was deleted before its partitions were opened", info.name)
                return info
            assert self.local_controller is not None
            if added_from is None:
                complete = await self.local_controller.topic_created(info)
            else:
                complete = await self.local_controller.partitions_added(info, added_from)
        if not complete:
            log.info("creation of topic %s interrupted by shutdown; resumed at start", info.name)
            return info
        if added_from is None:
            log.info(
                "created topic %s (%d partitions, id %s)", info.name, info.partitions, info.topic_id
            )
        else:
            log.info(
                "added partitions %d..%d to topic %s",
                added_from,
                info.partitions - 1,
                info.name,
            )
        self._tell_remote_tier("on_topic_created", info)
        return info

    async def create_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> tuple[TopicInfo, asyncio.Future[Any] | None]:
        """Raise a topic's partition count to ``count`` (CreatePartitions). Alone: the
        registry first, then the new partitions' logs opened on executor threads a step at
        a time, as for a new topic. In a cluster: the new assignment written to ZooKeeper
        (``assignments`` or Kafka's placement), which the controller carries out. Returns
        the topic as registered and the opening, done when the new partitions are served
        (alone) or led (in a cluster); None with ``validate_only``.

        Raises:
            UnknownTopicError, InvalidPartitionsError, InvalidReplicaAssignmentError.
        """
        if self._admin is not None:
            return await self._create_partitions_in_cluster(name, count, assignments, validate_only)
        add = functools.partial(
            self.topics.add_partitions, name, count, validate_only=validate_only
        )
        if validate_only:
            _, after = await asyncio.get_running_loop().run_in_executor(None, add)
            return after, None
        # As for a new topic: the registry write and the opening of the new partitions are
        # one broker task, so a cancelled request cannot leave partitions registered but
        # never opened. The task settles ``registered`` as soon as the registry is written.
        registered: asyncio.Future[TopicInfo] = asyncio.get_running_loop().create_future()
        # A refusal is the requester's to report; if it has gone, nobody reads it.
        registered.add_done_callback(lambda f: f.cancelled() or f.exception())

        async def grow() -> TopicInfo | None:
            try:
                before, after = await asyncio.get_running_loop().run_in_executor(None, add)
            except CoreError as e:  # a refusal: answered to the requester
                registered.set_exception(e)
                return None
            except BaseException as e:
                registered.set_exception(e)
                raise
            registered.set_result(after)
            return await self._open_topic(after, added_from=before.partitions)

        opening = self._topic_change_task(grow())
        return await asyncio.shield(registered), opening

    async def _create_partitions_in_cluster(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> tuple[TopicInfo, asyncio.Future[TopicInfo] | None]:
        assert self._admin is not None
        new = await self._admin.create_partitions(
            name, count, assignments, validate_only=validate_only
        )
        current = self.topics.get(name)
        if current is None:
            raise UnknownTopicError(f"The topic '{name}' does not exist.")
        grown = replace(current, partitions=count)
        if validate_only:
            return grown, None

        async def led() -> TopicInfo:
            # The request's own timeout bounds its wait; this one only ends the waiter of
            # a request that stopped waiting.
            if not await self._waiters.wait_for(
                lambda snapshot: all(
                    (s := snapshot.partition((name, p))) is not None and s.leader >= 0 for p in new
                ),
                CREATE_PARTITIONS_WAIT_MS,
            ):
                raise RequestTimedOutError(f"the new partitions of {name} have no leader yet")
            return grown

        return grown, asyncio.ensure_future(led())

    async def delete_topic(self, name: str, *, timeout_ms: int = 0) -> TopicInfo:
        """Delete a topic. Alone: unregistered and no longer served at once, its partition
        logs deleted on executor threads a step at a time. In a cluster: marked for deletion
        in ZooKeeper, which the controller carries out.

        Raises:
            UnknownTopicError: no such topic (also when a concurrent deletion won).
            RequestTimedOutError: in a cluster, not gone from the metadata in time.
        """
        if self._admin is not None:
            return await self._admin.delete_topic(name, timeout_ms=timeout_ms)
        return await self._topic_change(self._delete_topic(name))

    async def _delete_topic(self, name: str) -> TopicInfo:
        loop = asyncio.get_running_loop()
        async with self._topic_locks.hold(name):
            info = await loop.run_in_executor(None, self.topics.delete, name)
            assert self.local_controller is not None
            await self.local_controller.topic_deleted(info)
        log.info("deleted topic %s", name)
        self._tell_remote_tier("on_topic_deleted", info)
        return info

    async def _topic_change(self, change: Coroutine[Any, Any, TopicInfo]) -> TopicInfo:
        """Run a topic's creation or deletion as the broker's own task: a request cancelled
        because its client went away does not cut it short, and ``stop`` waits for it."""
        info = await asyncio.shield(self._topic_change_task(change))
        assert info is not None
        return info

    def _topic_change_task(
        self, change: Coroutine[Any, Any, TopicInfo | None]
    ) -> asyncio.Future[TopicInfo | None]:
        task = asyncio.ensure_future(change)
        self._topic_tasks.add(task)
        task.add_done_callback(self._topic_change_done)
        return task

    def _topic_change_done(self, task: asyncio.Future[TopicInfo | None]) -> None:
        self._topic_tasks.discard(task)
        error = None if task.cancelled() else task.exception()
        # Logged here, as its requester may be gone. A refusal (a deletion another one beat
        # to it, a name already taken by a concurrent creation) is answered to the requester
        # and is no news.
        if isinstance(error, (UnknownTopicError, TopicExistsError)):
            log.debug("topic change refused: %s", error)
        elif error is not None:
            log.error("topic change failed: %s", error)

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> LogConfig:
        """Replace a topic's overrides, persist them (alone: the registry; in a cluster:
        ZooKeeper, which tells every broker) and apply them to its open logs here."""
        if self._admin is not None:
            await self._admin.set_topic_configs(name, configs)
        info = self.topics.set_configs(name, configs)
        config = self.topics.effective_config(info)
        assert self.log_manager is not None
        self.log_manager.update_topic_config(name, config)
        # Enabling remote.storage.enable on an existing topic starts tiering it.
        self._tell_remote_tier("on_topic_created", info)
        return config

    async def _apply_topic_config(self, name: str, configs: dict[str, str]) -> None:
        """A topic config change notification (cluster): apply the overrides here."""
        info = self.topics.get(name)
        if info is None or dict(info.configs) == configs:
            return
        try:
            info = self.topics.set_configs(name, configs)
        except CoreError as e:
            log.error("topic %s: config change not applied: %s", name, e)
            return
        assert self.log_manager is not None
        self.log_manager.update_topic_config(name, self.topics.effective_config(info))
        log.info("topic %s configs now %s", name, configs)
        self._tell_remote_tier("on_topic_created", info)

    def _tell_remote_tier(self, event: str, info: TopicInfo) -> None:
        """Pass a topic event to the remote tier on a thread: it writes metadata events
        and waits for them, which must never happen on the event loop."""
        remote = self.replica_manager.remote
        if remote is None:
            return
        future = asyncio.get_running_loop().run_in_executor(None, getattr(remote, event), info)

        def report(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is not None:
                log.error("remote tier %s(%s) failed: %s", event, info.name, done.exception())

        future.add_done_callback(report)

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` in the cluster when a group first needs it, with
        ``offsets.topic.replication.factor`` replicas, or one per live broker when fewer are
        alive (logged as a WARNING)."""
        if self._admin is None or self.metadata_cache.contains_topic(OFFSETS_TOPIC):
            return
        if self._offsets_creation is None or self._offsets_creation.done():
            self._offsets_creation = asyncio.ensure_future(self._create_offsets_topic())
            self._background.add(self._offsets_creation)
            self._offsets_creation.add_done_callback(self._background.discard)

    async def _create_offsets_topic(self) -> None:
        assert self._admin is not None
        config = self.config
        wanted = config.get("offsets.topic.replication.factor")
        live = len(self.metadata_cache.alive_brokers())
        replication = min(wanted, max(live, 1))
        if replication < wanted:
            log.warning(
                "creating %s with replication factor %d: offsets.topic.replication.factor=%d "
                "but only %d brokers are alive; it keeps %d replicas per partition",
                OFFSETS_TOPIC, replication, wanted, live, replication,
            )  # fmt: skip
        try:
            await self._admin.create_topic(
                OFFSETS_TOPIC,
                config.get("offsets.topic.num.partitions"),
                offsets_topic_configs(config.get("offsets.topic.segment.bytes")),
                replication_factor=replication,
            )
        except CoreError as e:
            if e.error_code != 36:  # TOPIC_ALREADY_EXISTS: another broker was quicker
                log.error("cannot create %s: %s", OFFSETS_TOPIC, e)

    # -- the cluster (controller requests) --------------------------------------------------
    async def become_leader_or_follower(
        self, controller_id: int, controller_epoch: int, states: list[PartitionState]
    ) -> dict[TopicPartition, int]:
        await self._mirror_topics({s.topic for s in states})
        errors = await self.replica_manager.become_leader_or_follower(
            controller_id, controller_epoch, states
        )
        self._waiters.changed()
        return errors

    async def update_metadata(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: list[BrokerInfo],
        states: list[PartitionState],
    ) -> None:
        before = self.metadata_cache.topic_names()
        self.metadata_cache.update(controller_id, controller_epoch, brokers, states)
        after = self.metadata_cache.topic_names()
        if self.cluster is not None:
            await self._mirror_topics(after - set(t.name for t in self.topics.all()))
            # A topic leaves the cache, or arrives already being deleted (leader -2): a
            # broker that was down when the deletion started learnt the topic from
            # ZooKeeper at start-up but never had it in its cache; it must forget it too,
            # or a new topic of the same name would get the old one's id and configs here.
            deleting = {s.topic for s in states if s.leader == LEADER_DURING_DELETE}
            registered = {t.name for t in self.topics.all()}
            for name in sorted((before - after) | ((deleting & registered) - after)):
                self._topic_deleted(name)
        self._waiters.changed()

    def _deletion_started(
        self, name: str, topic_id: uuid.UUID, partitions: list[int], overrides: dict[str, str]
    ) -> None:
        """This broker's controller started deleting a topic: a tiered one has its remote
        partitions marked DELETE_PARTITION_MARKED (KIP-405), on a thread."""
        try:
            tiered = LogConfig.from_props(
                overrides, defaults=self.topics.broker_defaults
            ).remote_storage_enable
        except (CoreError, ValueError) as e:
            log.error("topic %s: invalid config (%s); marking its remote data anyway", name, e)
            tiered = True  # marking a topic that was not tiered deletes nothing
        if not tiered:
            return
        marker = self.remote_deletion_marker
        if marker is None or not self.config.remote_log_storage_system_enable:
            log.error(
                "topic %s (%s) is tiered but this controller's broker %d has no remote tier "
                "(remote.log.storage.system.enable=false): its remote partitions are not "
                "marked for deletion and their remote data stays in the remote storage",
                name,
                topic_id,
                self.config.node_id,
            )
            return
        future = asyncio.get_running_loop().run_in_executor(
            None, marker, name, topic_id, partitions
        )

        def report(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is not None:
                log.error(
                    "topic %s: marking its remote partitions for deletion failed: %s",
                    name,
                    done.exception(),
                )

        future.add_done_callback(report)

    def _topic_deleted(self, name: str) -> None:
        """A topic left the cluster: forget it here, and its groups' committed offsets
        (Kafka's handleDeletedPartitions); the remote tier forgets its manifest."""
        info = self.topics.get(name)
        self.topics.remove(name)
        if info is not None:
            self._tell_remote_tier("on_topic_deleted", info)
        if self._group_offsets is not None:
            version = self.group_offsets.delete_topic(name)
            self._flush_in_background(version, f"the offsets of deleted topic {name}")

    async def stop_replicas(
        self, controller_id: int, controller_epoch: int, partitions: list[StopReplicaPartition]
    ) -> dict[TopicPartition, int]:
        errors = await self.replica_manager.stop_replicas(
            controller_id, controller_epoch, partitions
        )
        self._waiters.changed()
        return errors

    async def _mirror_all_topics(self) -> None:
        """Every topic of the cluster with its id, partition count and overrides."""
        assert self.cluster is not None
        zk = self.cluster.connected_zk
        await self._mirror_topics(await zk.get_all_topics(), refresh=True)

    async def _mirror_topics(self, names: set[str], *, refresh: bool = False) -> None:
        """Learn the topics among ``names`` that the registry does not know (all of them with
        ``refresh``), from ZooKeeper; partition counts follow the MetadataCache."""
        if self.cluster is None:
            return
        zk = self.cluster.connected_zk
        unknown = sorted(n for n in names if refresh or self.topics.get(n) is None)
        # Topics new here or changed: the remote tier hears of them as of a creation (their
        # topic manifest is written, tiering starts on hosted partitions), as alone.
        changed: list[TopicInfo] = []
        if unknown:
            assignments = await zk.get_topic_assignments(unknown)
            configs = await asyncio.gather(*(zk.get_topic_config(n) for n in assignments))
            for (name, assignment), overrides in zip(assignments.items(), configs, strict=True):
                if assignment.topic_id is None:
                    continue  # the controller gives it an id first
                count = max(
                    len(assignment.partitions), len(self.metadata_cache.partitions_of(name))
                )
                before = self.topics.get(name)
                info = TopicInfo(name, assignment.topic_id, count, overrides)
                self.topics.put(info)
                if before != info:
                    changed.append(info)
                if self.log_manager is not None:
                    effective = self.topics.log_config(name)
                    self.log_manager.update_topic_config(name, effective)
        for name in names:
            info = self.topics.get(name)
            count = len(self.metadata_cache.partitions_of(name))
            if info is not None and count > info.partitions:
                grown = replace(info, partitions=count)
                self.topics.put(grown)
                changed = [c for c in changed if c.name != name] + [grown]
        if hasattr(self, "replica_manager"):  # not yet at start-up: the remote tier is not up
            for info in changed:
                self._tell_remote_tier("on_topic_created", info)

    def _on_session_state(self, state: ZkConnectionState) -> None:
        """Losing the ZooKeeper session: stop leading at once (see cluster_mode)."""
        if state is ZkConnectionState.EXPIRED:
            task = asyncio.ensure_future(self._stop_leading())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _stop_leading(self) -> None:
        led = [
            StopReplicaPartition(tp, -1, False)
            for tp, partition in self.replica_manager.partitions.items()
            if partition.is_leader
        ]
        if not led:
            return
        log.warning("no ZooKeeper session: no longer leading %d partitions", len(led))
        cache = self.metadata_cache
        await self.replica_manager.stop_replicas(
            cache.controller_id if cache.controller_id is not None else -1,
            cache.controller_epoch,
            led,
        )


class _NoController:
    """A cluster broker before its controller campaign started: not the controller."""

    def __init__(self, broker_id: int) -> None:
        self._broker_id = broker_id

    @property
    def is_active(self) -> bool:
        return False

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        raise NotControllerError(f"broker {self._broker_id} is not the controller")

    async def elect_leaders(self, election_type: Any, partitions: Any) -> Any:
        raise NotControllerError(f"broker {self._broker_id} is not the controller")

    async def alter_partition_reassignments(self, requested: Any) -> Any:
        raise NotControllerError(f"broker {self._broker_id} is not the controller")

    async def list_partition_reassignments(self, partitions: Any) -> Any:
        raise NotControllerError(f"broker {self._broker_id} is not the controller")
