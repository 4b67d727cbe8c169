"""Kafka's ZooKeeper mode: the znodes a controller and its brokers share, laid out as Kafka
3.x's KafkaZkClient (``core/src/main/scala/kafka/zk``) lays them out.

``KafkaZkClient`` is a thin typed layer over ``ZooKeeperClient`` (asyncio over kazoo). The
formats are in ``data`` and ``topic_data``, the paths in ``paths``, the watch
semantics in ``watch``. Paths are relative to the chroot of ``zookeeper.connect``
(``host:port/kafka``), which ``connect`` creates if it is missing, as a Kafka broker does.

=============================================  =====  ========================================
znode                                          kind   holds
=============================================  =====  ========================================
/brokers/ids/<id>                              E      a broker's registration (listeners, rack);
                                                      its czxid is the broker epoch
/brokers/topics/<topic>                        P      replica assignment and topic id
/brokers/topics/<topic>/partitions/<p>/state   P      leader, ISR, leader epoch, controller
                                                      epoch; its version = partition epoch
/brokers/seqid                                 P      broker id generation (parent only here)
/controller                                    E      the elected controller's broker id
/controller_epoch                              P      election count; its znode version
                                                      fences controller writes
/config/<type>/<name>                          P      overrides for topics, clients, users
                                                      (SCRAM credentials, quotas), brokers, ips
/config/changes/config_change_<seq>            S      "config of <type>/<name> changed"
/admin/delete_topics/<topic>                   P      a topic deletion request (no data)
/admin/reassign_partitions                     P      legacy reassignment request (codec only)
/admin/preferred_replica_election              P      legacy election request (codec only)
/isr_change_notification/isr_change_<seq>      S      partitions whose ISR a leader changed
/log_dir_event_notification                    P      parent only (log dir failure events)
/cluster/id                                    P      the cluster id, made by the first broker
/latest_producer_id_block                      P      the last producer-id block handed out
/consumers                                     P      parent only (pre-0.9 consumers)
=============================================  =====  ========================================

E: ephemeral (gone with the session that created it), P: persistent, S: persistent sequential.

Controller writes take ``controller_epoch_zk_version``: the ``/controller_epoch`` version the
controller got when elected (``ControllerEpoch.zk_version``). They are fenced on it (see
``store``) and raise ``ZkControllerMovedError`` once another controller was elected.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from core.kafka_uuid import uuid_to_base64
from core.server.zookeeper import paths
from core.server.zookeeper.client import (
    DEFAULT_MAX_IN_FLIGHT_REQUESTS,
    DEFAULT_SESSION_TIMEOUT_MS,
    StateListener,
    ZooKeeperClient,
)
from core.server.zookeeper.data import (
    INT64_MAX,
    PRODUCER_ID_BLOCK_SIZE,
    BrokerRegistration,
    ControllerRegistration,
    ProducerIdBlock,
    decode_broker_registration,
    decode_cluster_id,
    decode_controller,
    decode_controller_epoch,
    decode_producer_id_block,
    encode_broker_registration,
    encode_cluster_id,
    encode_controller,
    encode_controller_epoch,
    encode_producer_id_block,
)
from core.server.zookeeper.errors import (
    ZkBadVersionError,
    ZkBrokerIdInUseError,
    ZkDataError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkProducerIdsExhaustedError,
)
from core.server.zookeeper.notifications import NotificationZnodes
from core.server.zookeeper.ops import CreateOp, DeleteOp, SetDataOp, ZnodeData, ZnodeStat
from core.server.zookeeper.topics import TopicZnodes
from core.server.zookeeper.watch import ZkWatch

# The epoch /controller_epoch is created with (Kafka's KafkaController.InitialControllerEpoch).
INITIAL_CONTROLLER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """The controller epoch, and the version of ``/controller_epoch`` holding it (the token
    that fences the controller's writes)."""

    epoch: int
    zk_version: int


def split_chroot(connect_string: str) -> tuple[str, str | None]:
    """``host:port[,host:port]/chroot`` -> (hosts, ``/chroot`` or None).

    Raises:
        ValueError: a chroot ZooKeeper would refuse (trailing or double slash, ``.``, ``..``).
    """
    hosts, slash, rest = connect_string.partition("/")
    if not slash or rest == "":
        return hosts, None
    if rest.endswith("/") or any(part in ("", ".", "..") for part in rest.split("/")):
        raise ValueError(f"invalid ZooKeeper chroot '/{rest}' in {connect_string!r}")
    return hosts, "/" + rest


class KafkaZkClient(TopicZnodes, NotificationZnodes):
    """Kafka's znode operations for the controller, the brokers and the tests (all async).

    Topic, partition-state, config and deletion operations come from ``TopicZnodes``, the
    config and ISR change notifications from ``NotificationZnodes``.
    """

    def __init__(self, zookeeper: ZooKeeperClient):
        super().__init__(zookeeper)
        # The session that created our broker registration (Kafka's KAFKA-7165 work-around).
        self._registration_owner: int | None = None

    @classmethod
    async def connect(
        cls,
        connect_string: str,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS,
        create_chroot: bool = True,
    ) -> KafkaZkClient:
        """Connect to ``zookeeper.connect``, creating its chroot first if it is missing.

        Raises:
            ValueError: a malformed chroot.
            ZkConnectionTimeoutError: no session within the connection timeout.
        """
        hosts, chroot = split_chroot(connect_string)

        async def open_client(target: str) -> ZooKeeperClient:
            return await ZooKeeperClient.connect(
                target,
                session_timeout_ms=session_timeout_ms,
                connection_timeout_ms=connection_timeout_ms,
                max_in_flight_requests=max_in_flight_requests,
            )

        if chroot is not None and create_chroot:
            # As Kafka: a client without the chroot creates it, then the real client starts.
            bootstrap = await open_client(hosts)
            try:
                if await bootstrap.exists(chroot) is None:
                    await bootstrap.ensure_path(chroot)
            finally:
                await bootstrap.close()
        return cls(await open_client(connect_string))

    async def close(self) -> None:
        """End the session: ZooKeeper deletes its ephemeral znodes at once."""
        await self.zookeeper.close()

    def add_state_listener(self, listener: StateListener) -> None:
        self.zookeeper.add_state_listener(listener)

    async def ensure_persistent_paths(self) -> None:
        """Create the persistent parents a Kafka broker creates at start (``PERSISTENT_PATHS``)."""
        for path in paths.PERSISTENT_PATHS:
            await self.zookeeper.ensure_path(path)

    # -- brokers -----------------------------------------------------------------------------
    async def register_broker(self, registration: BrokerRegistration) -> int:
        """Create ``/brokers/ids/<id>`` (ephemeral); returns the broker epoch (its czxid).

        As Kafka's checkedEphemeralCreate: if the znode exists and this session owns it (a
        create retried after a lost connection), its epoch is returned; if an earlier session
        of this client owns it (ZooKeeper kept it after expiry, ZOOKEEPER-2985), it is
        replaced.

        Raises:
            ZkBrokerIdInUseError: another session, another broker, holds this broker id.
        """
        path = paths.broker(registration.broker_id)
        data = encode_broker_registration(registration)
        while True:
            try:
                _, stat = await self.zookeeper.create(path, data, ephemeral=True)
                self._registration_owner = stat.ephemeral_owner
                return stat.czxid
            except ZkNodeExistsError:
                node = await self._get_or_none(path)
            if node is None:
                continue  # deleted between our create and our read
            owner = node.stat.ephemeral_owner
            if owner == self.zookeeper.session_id:
                self._registration_owner = owner
                return node.stat.czxid
            if owner != self._registration_owner:
                raise ZkBrokerIdInUseError(
                    f"broker id {registration.broker_id} is already registered "
                    f"({path} belongs to ZooKeeper session 0x{owner:x})",
                    path=path,
                )
            # Gone or changed meanwhile: the next round sees what is there now.
            with contextlib.suppress(ZkNoNodeError, ZkBadVersionError):
                await self.zookeeper.delete(path, node.stat.version)

    async def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        """The broker's registration with its epoch, or None if it is not registered."""
        node = await self._get_or_none(paths.broker(broker_id))
        if node is None:
            return None
        return decode_broker_registration(broker_id, node.data, czxid=node.stat.czxid)

    async def get_broker_ids(self) -> list[int]:
        """The ids of the registered (live) brokers, sorted."""
        children = await self._children_or_empty(paths.BROKER_IDS)
        return sorted(int(c) for c in children if c.isdigit())

    async def get_live_brokers(self) -> dict[int, BrokerRegistration]:
        """The registrations (with epochs) of the live brokers, read in parallel."""
        ids = await self.get_broker_ids()
        found = await asyncio.gather(*(self.get_broker(i) for i in ids))
        return {r.broker_id: r for r in found if r is not None}

    async def watch_broker_ids(
        self, callback: Callable[[list[str]], Awaitable[None] | None]
    ) -> ZkWatch:
        """Children watch on ``/brokers/ids`` (delivery semantics in ``watch``)."""
        return await self.zookeeper.watch_children(paths.BROKER_IDS, callback)

    # -- controller --------------------------------------------------------------------------
    async def get_controller(self) -> ControllerRegistration | None:
        node = await self._get_or_none(paths.CONTROLLER)
        return None if node is None else decode_controller(node.data, zk_version=node.stat.version)

    async def watch_controller(
        self, callback: Callable[[ControllerRegistration | None], Awaitable[None] | None]
    ) -> ZkWatch:
        """Data watch on ``/controller``: the callback gets the controller, or None while
        there is none (time for an election)."""

        def deliver(node: ZnodeData | None) -> Awaitable[None] | None:
            if node is None:
                return callback(None)
            return callback(decode_controller(node.data, zk_version=node.stat.version))

        return await self.zookeeper.watch_data(paths.CONTROLLER, deliver)

    async def get_controller_epoch(self) -> ControllerEpoch | None:
        node = await self._get_or_none(paths.CONTROLLER_EPOCH)
        if node is None:
            return None
        return ControllerEpoch(decode_controller_epoch(node.data), node.stat.version)

    async def try_create_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Try to become the controller (Kafka's registerControllerAndIncrementControllerEpoch).

        Creates the ephemeral ``/controller`` and increments ``/controller_epoch`` in one
        transaction. Returns the new epoch and its znode version (truthy), or None if another
        broker is or just became the controller.
        """
        current = await self.get_controller_epoch() or await self._create_controller_epoch()
        new_epoch = current.epoch + 1
        controller = encode_controller(ControllerRegistration(broker_id))
        epoch_data = encode_controller_epoch(new_epoch)
        try:
            results = await self.zookeeper.multi(
                [
                    CreateOp(paths.CONTROLLER, controller, ephemeral=True),
                    SetDataOp(paths.CONTROLLER_EPOCH, epoch_data, current.zk_version),
                ]
            )
        except (ZkNodeExistsError, ZkBadVersionError):
            # Lost, unless it is our own transaction, applied before a lost connection.
            registered = await self.get_controller()
            epoch = await self.get_controller_epoch()
            ours = registered is not None and registered.broker_id == broker_id
            return epoch if ours and epoch is not None and epoch.epoch == new_epoch else None
        stat = results[1]
        assert isinstance(stat, ZnodeStat)
        return ControllerEpoch(new_epoch, stat.version)

    async def _create_controller_epoch(self) -> ControllerEpoch:
        try:
            initial = encode_controller_epoch(INITIAL_CONTROLLER_EPOCH)
            await self.zookeeper.create(paths.CONTROLLER_EPOCH, initial)
            return ControllerEpoch(INITIAL_CONTROLLER_EPOCH, 0)
        except ZkNodeExistsError:
            epoch = await self.get_controller_epoch()
            if epoch is None:
                raise ZkDataError(f"{paths.CONTROLLER_EPOCH} vanished while read") from None
            return epoch

    async def increment_controller_epoch(self, expected: ControllerEpoch) -> ControllerEpoch:
        """Write ``expected.epoch + 1`` if ``/controller_epoch`` is at ``expected.zk_version``.

        Raises:
            ZkBadVersionError: the epoch moved on since ``expected`` was read.
        """
        data = encode_controller_epoch(expected.epoch + 1)
        stat = await self.zookeeper.set(paths.CONTROLLER_EPOCH, data, expected.zk_version)
        return ControllerEpoch(expected.epoch + 1, stat.version)

    async def delete_controller(self, *, controller_epoch_zk_version: int) -> None:
        """Resign: delete ``/controller`` (fenced), which starts a new election."""
        with contextlib.suppress(ZkNoNodeError):
            await self._write(DeleteOp(paths.CONTROLLER), controller_epoch_zk_version)

    # -- topic configs -----------------------------------------------------------------------
    async def set_topic_config(
        self, topic: str, config: Mapping[str, str], *, notify: bool = True
    ) -> None:
        """Replace a topic's overrides and, as Kafka's AdminZkClient does, notify the brokers
        with a config change notification ``topics/<topic>``."""
        await self.set_entity_config(paths.CONFIG_TOPICS, topic, config)
        if notify:
            entity_path = paths.config_change_entity_path(paths.CONFIG_TOPICS, topic)
            await self.create_config_change_notification(entity_path)

    # -- cluster id and producer ids ---------------------------------------------------------
    async def get_cluster_id(self) -> str | None:
        node = await self._get_or_none(paths.CLUSTER_ID)
        return None if node is None else decode_cluster_id(node.data)

    async def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        """The id in ``/cluster/id``, created by the first broker to ask (with ``proposed`` or
        a random base64url uuid), as Kafka's ZooKeeper-mode brokers do. Checking it against
        the log dirs' ``meta.properties`` is the broker's job."""
        existing = await self.get_cluster_id()
        if existing is not None:
            return existing
        cluster_id = proposed or _random_cluster_id()
        try:
            await self.zookeeper.create_recursive(paths.CLUSTER_ID, encode_cluster_id(cluster_id))
            return cluster_id
        except ZkNodeExistsError:
            existing = await self.get_cluster_id()
            if existing is None:
                raise ZkDataError(f"{paths.CLUSTER_ID} vanished while read") from None
            return existing

    async def allocate_producer_id_block(
        self, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE
    ) -> ProducerIdBlock:
        """Claim the next block of producer ids (Kafka's ZkProducerIdManager).

        Reads ``/latest_producer_id_block`` and writes the following block conditionally on
        the version read; if another broker wrote first it reads again. No block is handed
        out twice (a write retried after a lost connection may skip one).

        Raises:
            ZkProducerIdsExhaustedError: the next block would pass the largest int64.
        """
        while True:
            node = await self._get_or_none(paths.PRODUCER_ID_BLOCK)
            first = 0
            if node is not None and node.data:
                current = decode_producer_id_block(node.data)
                if current.last_producer_id > INT64_MAX - block_size:
                    raise ZkProducerIdsExhaustedError(
                        f"producer ids exhausted: the last block ends at {current.last_producer_id}"
                    )
                first = current.next_block_first_id
            block = ProducerIdBlock(broker_id, first, block_size)
            if await self._write_producer_id_block(node, block):
                return block
            # another broker claimed a block first: read again

    async def reserve_producer_ids_through(self, broker_id: int, producer_id: int) -> int:
        """Hand out no block holding ``producer_id`` or any id below it from now on: when
        the latest block ends below it, write a block ending at it (conditionally, as
        ``allocate_producer_id_block``), so that the next block starts above. For producer
        state restored into a cluster whose ZooKeeper is newer than the state (Kafka has no
        topic restore; this is tierlog's). Blocks brokers claimed before keep their ids.

        Returns:
            The last id of the blocks claimed before (-1: none was).
        """
        while True:
            node = await self._get_or_none(paths.PRODUCER_ID_BLOCK)
            first = 0
            previous = -1
            if node is not None and node.data:
                current = decode_producer_id_block(node.data)
                previous = current.last_producer_id
                if previous >= producer_id:
                    return previous
                first = current.next_block_first_id
            block = ProducerIdBlock(broker_id, first, producer_id - first + 1)
            if await self._write_producer_id_block(node, block):
                return previous
            # a broker claimed a block meanwhile: read again

    async def _write_producer_id_block(
        self, read: ZnodeData | None, block: ProducerIdBlock
    ) -> bool:
        """Write ``block`` to ``/latest_producer_id_block`` if it is still as ``read`` (None:
        absent); False when another write came first."""
        data = encode_producer_id_block(block)
        try:
            if read is None:
                await self.zookeeper.create_recursive(paths.PRODUCER_ID_BLOCK, data)
            else:
                await self.zookeeper.set(paths.PRODUCER_ID_BLOCK, data, read.stat.version)
        except (ZkBadVersionError, ZkNodeExistsError):
            return False
        return True


def _random_cluster_id() -> str:
    # Kafka's Uuid.randomUuid avoids ids starting with '-' (they read as command-line options).
    while True:
        text = uuid_to_base64(uuid.uuid4())
        if not text.startswith("-"):
            return text
