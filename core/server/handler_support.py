"""What every request handler is given and shares: the broker's services, the handler
signature, error codes and the ACL checks.

Handlers (``apis``, ``admin_apis``, ``group_apis``, ``membership_apis``, ``acl_apis``,
``sasl_apis``) receive a ``BrokerServices``: the members of the broker they use, and nothing
else. They never import ``core.server.broker``, which imports their tables (through
``core.server.handlers``); this is Kafka's shape, where KafkaApis is handed its
collaborators and never sees the server that built it. import-linter holds the rule
(``pyproject.toml``). The test fakes implement the same Protocol, so handlers read every
member directly, without defaults.

Adding a member: declare it in the group it belongs to, with one line saying what handlers
use it for, then give it to ``core.server.broker.Broker`` and to the fakes.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from kio.schema.errors import ErrorCode

from core.errors import CoreError
from core.log.config import LogConfig
from core.server.authorizer import CLUSTER_NAME, Authorizer, Operation, ResourceType
from core.server.cluster_types import (
    BrokerInfo,
    PartitionState,
    StopReplicaPartition,
    TopicPartition,
)
from core.server.config import BrokerConfig
from core.server.controller.elections import ElectionType
from core.server.group_coordinator import GroupCoordinator
from core.server.group_offsets import GroupOffsetStore
from core.server.internal_topics import BrokerTrust
from core.server.metadata_cache import MetadataCache, MetadataSnapshot
from core.server.protocol import ProtocolCodec, RequestContext
from core.server.quotas import ClientQuotas
from core.server.replica_manager import ReplicaManager
from core.server.scram_credentials import ScramCredentialStore
from core.server.topics import TopicInfo, TopicRegistry
from core.server.transaction_coordinator import TransactionCoordinator
from core.server.transaction_marker_channel import TxnMarker
from core.server.zookeeper.topic_data import ReplicaAssignment

NO_THROTTLE = datetime.timedelta(0)


ElectionResults = dict[TopicPartition, tuple[int, str | None]]


class ControllerPort(Protocol):
    """The controller as the request handlers reach it: ``ZkController`` in a cluster, a
    stand-in answering for the one broker otherwise (``core.server.single_controller``)."""

    @property
    def is_active(self) -> bool:
        """Whether this broker is the controller."""
        ...

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        """Move leaderships off a stopping broker; the partitions it still leads.

        Raises:
            CoreError subclasses with Kafka's codes (NOT_CONTROLLER, STALE_BROKER_EPOCH,
            BROKER_NOT_AVAILABLE).
        """
        ...

    async def elect_leaders(
        self, election_type: ElectionType, partitions: set[TopicPartition] | None
    ) -> ElectionResults:
        """Preferred or unclean elections: (error code, message) per partition.

        Raises:
            NotControllerError.
        """
        ...

    async def alter_partition_reassignments(
        self, requested: dict[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Start, replace or (None) cancel reassignments: (error code, message) each.

        Raises:
            NotControllerError.
        """
        ...

    async def list_partition_reassignments(
        self, partitions: set[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """The reassignments in progress.

        Raises:
            NotControllerError.
        """
        ...


@runtime_checkable
class BrokerServices(Protocol):
    """The broker as request handlers see it."""

    # -- the wire ------------------------------------------------------------------------
    @property
    def codec(self) -> ProtocolCodec:
        """The response class of each (api key, version) served."""
        ...

    # -- this broker -----------------------------------------------------------------------
    @property
    def config(self) -> BrokerConfig:
        """The broker's configuration (node id, topic defaults, limits)."""
        ...

    @property
    def cluster_id(self) -> str:
        """The cluster id of the log dirs (``meta.properties``)."""
        ...

    def advertised_endpoint(self, listener: str) -> tuple[str, int]:
        """Host and port clients of ``listener`` should use (Metadata, FindCoordinator)."""
        ...

    # -- topics and partitions ---------------------------------------------------------------
    @property
    def topics(self) -> TopicRegistry:
        """Topic names, ids, partition counts and config overrides."""
        ...

    @property
    def replica_manager(self) -> ReplicaManager:
        """The partitions: appends, fetches, offsets, waits for durability."""
        ...

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
        """Create a topic (CreateTopics, auto-creation): alone, its partitions opened off
        the event loop; in a cluster, written to ZooKeeper and answered once led or after
        ``timeout_ms`` (REQUEST_TIMED_OUT; 0: at once)."""
        ...

    async def delete_topic(self, name: str, *, timeout_ms: int = 0) -> TopicInfo:
        """Delete a topic and its partitions (DeleteTopics); in a cluster, answered once the
        topic left the metadata or after ``timeout_ms``."""
        ...

    async def create_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> tuple[TopicInfo, asyncio.Future[TopicInfo] | None]:
        """Raise a topic's partition count (CreatePartitions), placing the new partitions'
        replicas on ``assignments`` (checked by the handler) or as Kafka does: the topic as
        registered, and the opening of the new partitions, done when they are served (None
        when only validating)."""
        ...

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> LogConfig:
        """Replace a topic's overrides and apply them (IncrementalAlterConfigs); in a
        cluster every broker applies them."""
        ...

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before in the cluster (InitProducerId)."""
        ...

    # -- the cluster ---------------------------------------------------------------------------
    @property
    def metadata_cache(self) -> MetadataCache:
        """What this broker knows of the cluster: live brokers, controller, each partition's
        leader, replicas and ISR (Metadata, FindCoordinator, DescribeCluster)."""
        ...

    @property
    def broker_epoch(self) -> int:
        """This broker's registration epoch (-1 running alone); controller requests carrying
        an older one are refused (STALE_BROKER_EPOCH)."""
        ...

    @property
    def controller(self) -> ControllerPort:
        """The controller, for ControlledShutdown and ElectLeaders."""
        ...

    async def become_leader_or_follower(
        self, controller_id: int, controller_epoch: int, states: list[PartitionState]
    ) -> dict[TopicPartition, int]:
        """LeaderAndIsr: lead or follow the partitions; an error code per partition.

        Raises:
            StaleControllerEpochError: the request is from an older controller.
        """
        ...

    async def update_metadata(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: list[BrokerInfo],
        states: list[PartitionState],
    ) -> None:
        """UpdateMetadata: the MetadataCache (and what follows from it).

        Raises:
            StaleControllerEpochError.
        """
        ...

    async def stop_replicas(
        self, controller_id: int, controller_epoch: int, partitions: list[StopReplicaPartition]
    ) -> dict[TopicPartition, int]:
        """StopReplica: stop (and maybe delete) replicas; an error code per partition.

        Raises:
            StaleControllerEpochError.
        """
        ...

    # -- security ------------------------------------------------------------------------------
    @property
    def authorizer(self) -> Authorizer | None:
        """The ACLs, or None without ``authorizer.class.name`` (everything is allowed)."""
        ...

    @property
    def broker_trust(self) -> BrokerTrust:
        """Who acts as a broker: may write the internal topics (``internal_topics``)."""
        ...

    @property
    def scram_credentials(self) -> ScramCredentialStore:
        """SCRAM credentials managed at run time (Describe/AlterUserScramCredentials)."""
        ...

    @property
    def quotas(self) -> ClientQuotas:
        """Client quota configs and their enforcement: throttle times (``quotas``)."""
        ...

    # -- groups ----------------------------------------------------------------------------------
    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` if it does not exist yet (in a cluster, when a group
        first asks for its coordinator); failures are logged, the caller answers
        COORDINATOR_NOT_AVAILABLE meanwhile."""
        ...

    async def ensure_transaction_state_topic(self) -> None:
        """Create ``__transaction_state`` if it does not exist yet (in a cluster, when a
        transactional producer first asks for its coordinator); as
        ``ensure_offsets_topic``."""
        ...

    @property
    def group_coordinator(self) -> GroupCoordinator:
        """Group membership: joins, syncs, heartbeats, generations."""
        ...

    @property
    def transaction_coordinator(self) -> TransactionCoordinator:
        """Transactional ids, their producers and transactions (the transaction APIs)."""
        ...

    def on_marker_written(self, tp: tuple[str, int], marker: TxnMarker) -> None:
        """A transaction marker was appended here (completes transactional offset commits
        of ``__consumer_offsets`` partitions; WriteTxnMarkers)."""
        ...

    @property
    def group_offsets(self) -> GroupOffsetStore:
        """Committed offsets and group metadata, journaled in ``__consumer_offsets``."""
        ...


# Every handler: ``async handler(broker, context, request) -> response`` (None: no response).
Handler = Callable[[BrokerServices, RequestContext, Any], Awaitable[Any]]


def error_code(code: int) -> ErrorCode:
    """Kafka's error code ``code``; UNKNOWN_SERVER_ERROR for a code kio does not know."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


def error_of(e: BaseException) -> ErrorCode:
    """The error code a client is answered for ``e``."""
    return error_code(e.error_code) if isinstance(e, CoreError) else ErrorCode.unknown_server_error


def client_host(ctx: RequestContext) -> str:
    """The client's IP, as ACL hosts name it (``client_address`` is ``host:port``)."""
    host = ctx.client_address.rsplit(":", 1)[0]
    return host.strip("[]")


def allowed(
    broker: BrokerServices,
    ctx: RequestContext,
    operation: Operation,
    resource: ResourceType,
    name: str,
) -> bool:
    """Whether the request's principal may perform ``operation`` on the resource; True
    when no authorizer is configured."""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(ctx.principal, client_host(ctx), operation, resource, name)


def cluster_allowed(broker: BrokerServices, ctx: RequestContext, operation: Operation) -> bool:
    """``allowed`` on the cluster resource."""
    return allowed(broker, ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


# Kafka's AclEntry.supportedOperations: what authorized-operation fields report.
SUPPORTED_OPERATIONS: Mapping[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
}
# The schemas' default of authorized-operation fields: not asked for.
UNKNOWN_AUTHORIZED_OPERATIONS = -(2**31)


def authorized_operations(
    broker: BrokerServices, ctx: RequestContext, resource: ResourceType, name: str
) -> int:
    """Kafka's 32-bit field: bit ``op`` set for each operation of the resource type the
    principal may perform (all of them without an authorizer)."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource]:
        if allowed(broker, ctx, operation, resource, name):
            bits |= 1 << operation
    return bits


def cluster_authorized_operations(broker: BrokerServices, ctx: RequestContext) -> int:
    """The cluster's field as Kafka fills it: 0 without DESCRIBE on the cluster."""
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        return 0
    return authorized_operations(broker, ctx, ResourceType.CLUSTER, CLUSTER_NAME)


def live_brokers(
    broker: BrokerServices, listener: str, snapshot: MetadataSnapshot
) -> list[tuple[int, str, int, str | None]]:
    """(id, host, port, rack) of the live brokers reachable on ``listener``, in id order, as
    Metadata and DescribeCluster list them: brokers without that listener are left out (Kafka),
    this broker is given with its advertised endpoint (the bound port for port 0), and is
    listed alone while the controller has not told it of any broker yet."""
    node = broker.config.node_id
    out = []
    for info in snapshot.alive_brokers():
        if info.broker_id == node:
            host, port = broker.advertised_endpoint(listener)
            out.append((node, host, port, broker.config.broker_rack))
            continue
        endpoint = info.endpoint(listener)
        if endpoint is not None:
            out.append((info.broker_id, endpoint.host, endpoint.port, info.rack))
    if not snapshot.brokers:
        host, port = broker.advertised_endpoint(listener)
        out.append((node, host, port, broker.config.broker_rack))
    return out


def is_broker_request(broker: BrokerServices, ctx: RequestContext) -> bool:
    """Whether a request may act as another broker's: a follower's Fetch, ListOffsets or
    OffsetsForLeaderEpoch (``replica_id >= 0``), a controller's request: those whose
    principal or connection ``BrokerTrust`` admits (core/server/internal_topics.py); with an
    authorizer, ``cluster_action_allowed`` asks CLUSTER_ACTION on top."""
    return broker.broker_trust.admits(ctx)


def cluster_action_allowed(broker: BrokerServices, ctx: RequestContext) -> bool:
    """A replica's request: a broker's (``is_broker_request``) with CLUSTER_ACTION on the
    cluster when an authorizer is set (Kafka's check of followers' fetches)."""
    return is_broker_request(broker, ctx) and cluster_allowed(broker, ctx, Operation.CLUSTER_ACTION)
