"""Broker: the core broker composed from its parts, started and stopped as one.

Start-up: open the log dirs (recovering if needed), load the topic registry and reconcile
it with the partition directories, begin a new leader epoch for every partition, start the
housekeeping tasks, then listen. Shutdown reverses it and leaves the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping
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
from core.server.authorizer import AclAuthorizer
from core.server.config import BrokerConfig
from core.server.group_coordinator import Group, GroupCoordinator
from core.server.group_offsets import GroupOffsetStore
from core.server.handler_support import error_code
from core.server.handlers import HANDLERS, SERVED_INTER_BROKER_VERSIONS, api_versions_response
from core.server.internal_topics import TRANSACTION_STATE_TOPIC, BrokerTrust
from core.server.network import BoundListener, ListenerSpec, SocketServer
from core.server.offsets_topic import OFFSETS_TOPIC, OffsetsTopic, ensure_offsets_topic
from core.server.protocol import ProtocolCodec, RequestContext
from core.server.quota_enforcement import handle_with_quotas
from core.server.quota_store import LocalQuotaStore
from core.server.quotas import ClientQuotas
from core.server.replica_manager import Partition, ReplicaManager
from core.server.sasl import ScramCredentialSource
from core.server.scram_credentials import LocalScramCredentialStore, ScramCredentialCache
from core.server.security import ListenerSecurity, listener_security, with_runtime_scram
from core.server.timing_wheel import Timer
from core.server.topics import (
    InvalidReplicationFactorError,
    TopicInfo,
    TopicRegistry,
    UnknownTopicError,
    read_partition_metadata,
)
from core.server.transaction_coordinator import CoordinatorSettings, TransactionCoordinator
from core.server.transaction_marker_channel import MarkerChannel, TxnMarker
from core.server.transaction_state_topic import (
    TransactionStateLog,
    ensure_transaction_state_topic,
)
from core.server.transaction_verification import abort_hanging_transactions

log = logging.getLogger(__name__)


def listeners_security(
    config: BrokerConfig, runtime_scram: ScramCredentialSource
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
    trust = BrokerTrust.from_config(config, security)
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
    """A single tierlog broker; request handlers see it as a ``BrokerServices``
    (core.server.handler_support)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.handlers = HANDLERS
        # An inter-broker api is decoded only once it has a handler: a request that decodes
        # must get an answer.
        self.codec = ProtocolCodec(SUPPORTED_VERSIONS, SERVED_INTER_BROKER_VERSIONS)
        self._group_offsets: GroupOffsetStore | None = None
        self.authorizer: AclAuthorizer | None = None  # authorizer.class.name set
        self.quotas: ClientQuotas  # loaded with the storage
        # Who may write the internal topics; the listener rule needs the listeners' security.
        self.broker_trust = BrokerTrust.from_config(config)
        self._group_coordinator: GroupCoordinator | None = None
        self._transaction_coordinator: TransactionCoordinator | None = None
        self._hanging_check: asyncio.TimerHandle | None = None
        self._offset_expiry: asyncio.TimerHandle | None = None
        self.log_manager: LogManager | None = None
        self.topics: TopicRegistry
        self.replica_manager: ReplicaManager
        self.timer: Timer | None = None
        self.server: SocketServer | None = None
        self.bound: list[BoundListener] = []
        self._stopped = asyncio.Event()
        self._topic_locks = NameLocks()
        self._topic_tasks: set[asyncio.Future[TopicInfo]] = set()
        # What the SCRAM servers of the SASL listeners check, filled from the store when
        # the log dirs are open (before any listener accepts a connection).
        self._scram_cache = ScramCredentialCache()
        self.scram_credentials: LocalScramCredentialStore

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> list[BoundListener]:
        """Open the logs and listen; returns the bound listeners (real ports)."""
        loop = asyncio.get_running_loop()
        # TLS material and SASL accounts first: a bad setting stops start-up naming its key
        # before any disk work.
        security, self.broker_trust = listeners_security(self.config, self._scram_cache)
        # Loading and recovery do blocking disk work: keep them off the event loop.
        await loop.run_in_executor(None, self._open_storage)
        self.timer = Timer(loop)
        self._group_coordinator = GroupCoordinator(
            self.timer,
            initial_rebalance_delay_ms=self.config.get("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=self.config.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=self.config.get("group.max.session.timeout.ms"),
            max_size=self.config.get("group.max.size"),
            on_change=self._store_group,
        )
        self.replica_manager = ReplicaManager(self.log_manager, self.topics, self.timer)
        for info in self.topics.all():
            self.replica_manager.open_topic(info)
        await self._load_groups()
        self._schedule_offset_expiry()
        self._transaction_coordinator = self._create_transaction_coordinator()
        await self._load_transactions()
        assert self.log_manager is not None
        self.log_manager.startup()
        self.server = SocketServer(
            self.codec,
            self.handle,
            self._unsupported_version,
            max_request_bytes=self.config.socket_request_max_bytes,
            max_connections=self.config.max_connections,
            idle_timeout_s=self.config.connections_max_idle_ms / 1000,
            queued_max_request_bytes=self.config.queued_max_request_bytes,
            send_buffer_bytes=self.config.socket_send_buffer_bytes,
            receive_buffer_bytes=self.config.socket_receive_buffer_bytes,
            listen_backlog=self.config.socket_listen_backlog_size,
        )
        specs = [
            ListenerSpec(x.name, x.host, x.port, security[x.name])
            for x in self.config.broker_listeners
        ]
        self.bound = await self.server.start(specs)
        return self.bound

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

    async def _load_groups(self) -> None:
        """Replay ``__consumer_offsets`` into the offset store and the coordinator."""
        loop = asyncio.get_running_loop()
        info = self.topics.get(OFFSETS_TOPIC)
        assert info is not None
        fetches = self.replica_manager.fetch_purgatory

        def wake_fetches(index: int) -> None:
            # Called from flushes on executor threads; one may outlive the loop at shutdown.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fetches.check_and_complete, (OFFSETS_TOPIC, index))

        journal = OffsetsTopic(
            lambda i: self.replica_manager.partition(OFFSETS_TOPIC, i),
            info.partitions,
            on_append=wake_fetches,
        )
        first_dir = Path(self.config.log_dirs[0])
        self._group_offsets = await loop.run_in_executor(
            None, lambda: GroupOffsetStore(journal, legacy_dir=first_dir)
        )
        self.group_coordinator.restore(self.group_offsets.group_metadata())

    # -- transactions ----------------------------------------------------------------------
    def _create_transaction_coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator over ``__transaction_state`` (not loaded yet)."""
        replica_manager = self.replica_manager

        async def written(partition: Partition, offset: int) -> None:
            await replica_manager.wait_durable_always(partition)
            await replica_manager.wait_replicated(partition, offset, 30_000)

        state_log = TransactionStateLog(
            lambda i: replica_manager.partition(TRANSACTION_STATE_TOPIC, i), written
        )
        markers = MarkerChannel(
            replica_manager,
            on_written=self.on_marker_written,
            exists=lambda t, i: (
                (info := self.topics.get(t)) is not None and 0 <= i < info.partitions
            ),
        )
        config = self.config
        return TransactionCoordinator(
            lambda: info.partitions if (info := self.topics.get(TRANSACTION_STATE_TOPIC)) else 1,
            state_log,
            markers,
            self.topics.allocate_producer_id,
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

    async def _load_transactions(self) -> None:
        """Alone, this broker leads every ``__transaction_state`` partition: load them all
        (their leader epoch is the coordinator epoch), then start the timeouts."""
        coordinator = self.transaction_coordinator
        info = self.topics.get(TRANSACTION_STATE_TOPIC)
        assert info is not None
        for index in range(info.partitions):
            partition = self.replica_manager.partition(TRANSACTION_STATE_TOPIC, index)
            if partition is not None:
                await coordinator.load(index, partition.leader_epoch)
        coordinator.start()
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
            list(replica_manager.partitions.values()),
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

    def _open_storage(self) -> None:
        first_dir = Path(self.config.log_dirs[0])
        first_dir.mkdir(parents=True, exist_ok=True)
        self.topics = TopicRegistry(first_dir, self.config.log_config_defaults())
        self.scram_credentials = LocalScramCredentialStore(first_dir, self._scram_cache)
        ensure_offsets_topic(
            self.topics,
            self.config.get("offsets.topic.num.partitions"),
            self.config.get("offsets.topic.segment.bytes"),
        )
        ensure_transaction_state_topic(
            self.topics,
            self.config.get("transaction.state.log.num.partitions"),
            self.config.get("transaction.state.log.segment.bytes"),
            self.config.get("transaction.state.log.replication.factor"),
            self.config.get("transaction.state.log.min.isr"),
        )
        self.quotas = ClientQuotas.open(
            LocalQuotaStore(first_dir),
            samples=self.config.get("quota.window.num"),
            window_seconds=self.config.get("quota.window.size.seconds"),
        )
        if self.config.get("authorizer.class.name"):
            self.authorizer = AclAuthorizer(
                first_dir,
                self.broker_trust.super_users,
                allow_if_no_acl=self.config.get("allow.everyone.if.no.acl.found"),
            )
        self.log_manager = LogManager(
            self.config.log_manager_config(), topic_config=self.topics.log_config
        )
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
        if self.server is not None:
            await self.server.stop()
        if self._topic_tasks:
            # Creations stop at their next step (the next start opens the rest); deletions
            # finish: one cut short would leave partition dirs that the next start adopts
            # as a topic again.
            self.replica_manager.stopping = True
            await asyncio.wait(list(self._topic_tasks))
        if self._offset_expiry is not None:
            self._offset_expiry.cancel()
        if self._group_coordinator is not None:
            self._group_coordinator.shutdown()
        if self._transaction_coordinator is not None:
            self._transaction_coordinator.shutdown()
        if self._hanging_check is not None:
            self._hanging_check.cancel()
        if self.timer is not None:
            self.timer.shutdown()
        if self.log_manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
            self.log_manager = None
        self._stopped.set()

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

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        *,
        replication_factor: int = 1,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Create a topic and open its partitions, off the event loop: registered first (a
        second creation of the name gets TOPIC_ALREADY_EXISTS at once), then its partition
        logs opened on executor threads a step at a time, each step served as it opens.

        Raises:
            InvalidTopicError, TopicExistsError, InvalidPartitionsError,
            InvalidReplicationFactorError, InvalidConfigError.
        """
        if replication_factor != 1:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target "
                f"replication factor of {replication_factor} cannot be reached because only "
                "1 broker(s) are registered."
            )
        create = functools.partial(
            self.topics.create, name, partitions, configs, validate_only=validate_only
        )
        info = await asyncio.get_running_loop().run_in_executor(None, create)
        if not validate_only:
            await self._topic_change(self._open_topic(info))
        return info

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
            complete = await self.replica_manager.open_topic_in_steps(info)
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
        self, name: str, count: int, *, validate_only: bool = False
    ) -> tuple[TopicInfo, asyncio.Future[TopicInfo] | None]:
        """Raise a topic's partition count to ``count`` (CreatePartitions): the registry
        first, then the new partitions' logs opened on executor threads a step at a time,
        as for a new topic. Returns the topic as registered and the opening, which runs as
        the broker's own task (None with ``validate_only``).

        Raises:
            UnknownTopicError, InvalidPartitionsError.
        """
        add = functools.partial(
            self.topics.add_partitions, name, count, validate_only=validate_only
        )
        before, after = await asyncio.get_running_loop().run_in_executor(None, add)
        if validate_only:
            return after, None
        opening = self._topic_change_task(self._open_topic(after, added_from=before.partitions))
        return after, opening

    async def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic: unregistered and no longer served at once, its partition logs
        deleted on executor threads a step at a time.

        Raises:
            UnknownTopicError: no such topic (also when a concurrent deletion won).
        """
        return await self._topic_change(self._delete_topic(name))

    async def _delete_topic(self, name: str) -> TopicInfo:
        loop = asyncio.get_running_loop()
        async with self._topic_locks.hold(name):
            info = await loop.run_in_executor(None, self.topics.delete, name)
            await self.replica_manager.remove_topic_in_steps(info)
        log.info("deleted topic %s", name)
        self._tell_remote_tier("on_topic_deleted", info)
        return info

    async def _topic_change(self, change: Coroutine[Any, Any, TopicInfo]) -> TopicInfo:
        """Run a topic's creation or deletion as the broker's own task: a request cancelled
        because its client went away does not cut it short, and ``stop`` waits for it."""
        return await asyncio.shield(self._topic_change_task(change))

    def _topic_change_task(
        self, change: Coroutine[Any, Any, TopicInfo]
    ) -> asyncio.Future[TopicInfo]:
        task = asyncio.ensure_future(change)
        self._topic_tasks.add(task)
        task.add_done_callback(self._topic_change_done)
        return task

    def _topic_change_done(self, task: asyncio.Future[TopicInfo]) -> None:
        self._topic_tasks.discard(task)
        error = None if task.cancelled() else task.exception()
        # Logged here, as its requester may be gone; a deletion that another one beat to
        # it is answered UNKNOWN_TOPIC_OR_PARTITION and is no news.
        if isinstance(error, UnknownTopicError):
            log.debug("topic change refused: %s", error)
        elif error is not None:
            log.error("topic change failed: %s", error)

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> LogConfig:
        """Replace a topic's overrides, persist them and apply them to its open logs."""
        info = self.topics.set_configs(name, configs)
        config = self.topics.effective_config(info)
        assert self.log_manager is not None
        self.log_manager.update_topic_config(name, config)
        # Enabling remote.storage.enable on an existing topic starts tiering it.
        self._tell_remote_tier("on_topic_created", info)
        return config

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
