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
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from kio.schema.errors import ErrorCode

from core.errors import CoreError
from core.log.config import LogConfig
from core.server.authorizer import CLUSTER_NAME, AclAuthorizer, Operation, ResourceType
from core.server.config import BrokerConfig
from core.server.group_coordinator import GroupCoordinator
from core.server.group_offsets import GroupOffsetStore
from core.server.internal_topics import BrokerTrust
from core.server.protocol import ProtocolCodec, RequestContext
from core.server.quotas import ClientQuotas
from core.server.replica_manager import ReplicaManager
from core.server.scram_credentials import ScramCredentialStore
from core.server.topics import TopicInfo, TopicRegistry
from core.server.transaction_coordinator import TransactionCoordinator
from core.server.transaction_marker_channel import TxnMarker

NO_THROTTLE = datetime.timedelta(0)


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
        validate_only: bool = False,
    ) -> TopicInfo:
        """Create a topic and open its partitions, off the event loop (CreateTopics,
        auto-creation)."""
        ...

    async def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic and its partitions, off the event loop (DeleteTopics)."""
        ...

    async def create_partitions(
        self, name: str, count: int, *, validate_only: bool = False
    ) -> tuple[TopicInfo, asyncio.Future[TopicInfo] | None]:
        """Raise a topic's partition count (CreatePartitions): the topic as registered, and
        the opening of the new partitions, done when they are served (None when only
        validating)."""
        ...

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> LogConfig:
        """Replace a topic's overrides and apply them (IncrementalAlterConfigs)."""
        ...

    # -- security ------------------------------------------------------------------------------
    @property
    def authorizer(self) -> AclAuthorizer | None:
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
