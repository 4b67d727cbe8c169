"""KafkaApis: the data-path and topic handlers, in a table keyed by api key.

Every handler has the signature ``async handler(broker, context, request) -> response``
(None for no response), ``broker`` being the ``BrokerServices`` it is handed. The
network layer hands a connection's requests over one at a time (core.server.network);
produce still appends before its first ``await`` (handle_produce).
``core.server.handlers`` merges this table with the others.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from core.errors import CoreError, KafkaStorageError, RecordValidationError
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation, ResourceType, TopicAuthorizationError
from core.server.cluster_types import PartitionState
from core.server.handler_support import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    BrokerServices,
    Handler,
    allowed,
    authorized_operations,
    cluster_action_allowed,
    cluster_allowed,
    cluster_authorized_operations,
    error_code,
    error_of,
    live_brokers,
)
from core.server.internal_topics import (
    PROTECTED_TOPICS,
    PolicyViolationError,
    protected_message,
    refused_for,
)
from core.server.kio_build import make, nested, nested_optional
from core.server.leader_hints import FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, LeaderHints
from core.server.metadata_cache import MetadataSnapshot
from core.server.produce_response import PartitionAnswer, ProduceAnswer
from core.server.produce_validation import produce_records_refusal
from core.server.protocol import RequestContext
from core.server.quota_enforcement import fetch_quota_bytes, fetch_throttle_ms, produce_throttle_ms
from core.server.replica_manager import (
    FetchParams,
    FetchRequestPartition,
)
from core.server.throttle import ThrottledResponse
from core.server.topics import (
    INTERNAL_TOPICS,
    InvalidTopicError,
    TopicExistsError,
    validate_topic_name,
)
from core.server.transaction_verification import (
    remote_verifications,
    verification_error,
    verification_message,
)

log = logging.getLogger(__name__)


class TooManyPartitionsError(CoreError):
    """POLICY_VIOLATION: a CreateTopics request asking for more partitions than
    ``max.partitions.per.request`` (Kafka's controller answers it so)."""

    error_code = 44


# -- Metadata ---------------------------------------------------------------------------------
def _partition_metadata(
    broker: BrokerServices, ctx: RequestContext, snapshot: MetadataSnapshot, state: PartitionState
) -> dict[str, Any]:
    """One partition as Kafka's MetadataCache describes it: LEADER_NOT_AVAILABLE (leader -1)
    while the leader is none, not alive, or not reachable on the request's listener (or is
    this broker before it has taken the partition on); from v1 replicas and ISR are listed
    whole, v0 keeps the live ones and says REPLICA_NOT_AVAILABLE when some are missing."""
    node = broker.config.node_id
    leader = state.leader
    reachable = leader >= 0 and (
        leader == node or snapshot.endpoint(leader, ctx.listener) is not None
    )
    if leader == node:
        local = broker.replica_manager.partition(state.topic, state.partition)
        reachable = local is not None and local.is_leader
    replicas, isr = state.replicas, state.isr
    error = ErrorCode.none
    if ctx.api_version == 0:
        replicas = tuple(r for r in replicas if snapshot.is_alive(r))
        isr = tuple(r for r in isr if snapshot.is_alive(r))
        if len(replicas) < len(state.replicas) or len(isr) < len(state.isr):
            error = ErrorCode.replica_not_available
    if not reachable:
        error, leader = ErrorCode.leader_not_available, -1
    return {
        "error_code": error,
        "partition_index": state.partition,
        "leader_id": leader,
        "leader_epoch": state.leader_epoch,
        "replica_nodes": replicas,
        "isr_nodes": isr,
        "offline_replicas": state.offline_replicas,
    }


async def _auto_create(broker: BrokerServices, name: str) -> ErrorCode | None:
    """Kafka's auto-creation on Metadata: None once created here or elsewhere (the caller
    describes the topic if it is already known), else the error to answer."""
    try:
        await broker.create_topic(
            name,
            broker.config.num_partitions,
            {},
            replication_factor=broker.config.default_replication_factor,
        )
    except TopicExistsError:
        return None  # another request or broker created it meanwhile
    except CoreError as e:
        return error_of(e)
    return None


async def handle_metadata(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "MetadataResponseTopic")
    partition_cls = nested(response_type, "MetadataResponsePartition")
    broker_cls = nested(response_type, "MetadataResponseBroker")
    requested = request.topics
    if ctx.api_version == 0 and not requested:
        requested = None  # v0: an empty list means every topic
    # Before v4 the request had no flag: auto-creation followed the broker config alone.
    allow_auto = getattr(request, "allow_auto_topic_creation", True)

    def describe(name: str | None, topic_id: Any, error: ErrorCode) -> Any:
        return make(
            topic_cls,
            error_code=error,
            name=name,
            topic_id=topic_id,
            is_internal=bool(name in INTERNAL_TOPICS),
            partitions=(),
            topic_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
        )

    def may(operation: Operation, name: str) -> bool:
        return allowed(broker, ctx, operation, ResourceType.TOPIC, name)

    topics: list[Any] = []
    names: list[str] = []  # topics to describe from the metadata, in answer order
    cache = broker.metadata_cache
    if requested is None:
        # Topics the principal may not DESCRIBE are left out, as if absent (Kafka's way).
        names = sorted(t for t in cache.topic_names() if may(Operation.DESCRIBE, t))
    else:
        for req in requested:
            name = req.name
            topic_id = getattr(req, "topic_id", None)
            if name is None and topic_id is not None and topic_id.int != 0:
                found = cache.topic_name(topic_id)
                if found is None or not may(Operation.DESCRIBE, found):
                    topics.append(describe(None, topic_id, ErrorCode.unknown_topic_id))
                else:
                    names.append(found)
                continue
            if name is not None and not may(Operation.DESCRIBE, name):
                # Existing or not: an unauthorized principal learns nothing about it.
                topics.append(describe(name, None, ErrorCode.topic_authorization_failed))
                continue
            if name is not None and cache.contains_topic(name):
                names.append(name)
                continue
            try:
                validate_topic_name(name or "")
            except InvalidTopicError:
                topics.append(describe(name, None, ErrorCode.invalid_topic_exception))
                continue
            if not (
                allow_auto
                and broker.config.auto_create_topics_enable
                and (name not in PROTECTED_TOPICS)  # the broker creates those itself
                and (cluster_allowed(broker, ctx, Operation.CREATE) or may(Operation.CREATE, name))
            ):
                topics.append(describe(name, None, ErrorCode.unknown_topic_or_partition))
                continue
            failed = await _auto_create(broker, name)
            if failed is not None:
                topics.append(describe(name, None, failed))
            elif cache.contains_topic(name):
                names.append(name)
            else:
                # Created, its leaders not elected yet: clients ask again (Kafka's answer).
                topics.append(describe(name, None, ErrorCode.leader_not_available))
    snapshot = cache.snapshot()
    for name in names:
        states = snapshot.partitions_of(name)
        if not states:  # deleted meanwhile
            topics.append(describe(name, None, ErrorCode.unknown_topic_or_partition))
            continue
        partitions = tuple(
            make(partition_cls, **_partition_metadata(broker, ctx, snapshot, state))
            for state in states
        )
        topics.append(
            make(
                topic_cls,
                error_code=ErrorCode.none,
                name=name,
                topic_id=snapshot.topic_id(name),
                is_internal=name in INTERNAL_TOPICS,
                partitions=partitions,
                topic_authorized_operations=authorized_operations(
                    broker, ctx, ResourceType.TOPIC, name
                )
                if getattr(request, "include_topic_authorized_operations", False)
                else UNKNOWN_AUTHORIZED_OPERATIONS,
            )
        )
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        brokers=tuple(
            make(broker_cls, node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in live_brokers(broker, ctx.listener, snapshot)
        ),
        cluster_id=broker.cluster_id,
        controller_id=snapshot.controller_id if snapshot.controller_id is not None else -1,
        topics=tuple(topics),
        # Metadata v8-v10 (librdkafka's describe_cluster and describe_topics ask here).
        cluster_authorized_operations=cluster_authorized_operations(broker, ctx)
        if getattr(request, "include_cluster_authorized_operations", False)
        else UNKNOWN_AUTHORIZED_OPERATIONS,
        error_code=ErrorCode.none,
    )


# -- Produce ----------------------------------------------------------------------------------
async def handle_produce(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    # Everything up to the append runs before any await: a request's appends land
    # together, with no other connection's request in between, and stay done even if the
    # client goes away while this waits (the network layer cancels it then).
    # The answer is a ProduceAnswer of plain tuples, encoded without kio's classes
    # (core.server.produce_response): building those was a large part of a small request.
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    acks = request.acks
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    replica_manager = broker.replica_manager
    # KIP-951 leader hints, made at the first error (metadata as of then): most answers
    # have none.
    hints: LeaderHints | None = None
    topics = []
    # (partition, its topic's result list, slot in it, offset the high watermark must reach)
    waits: list[tuple[Any, list[PartitionAnswer], int, int]] = []
    # KIP-890 answers from a coordinator on another broker; suspends only if it asks one.
    remote = await remote_verifications(
        broker.transaction_coordinator, request, replica_manager.partition
    )
    for topic_data in request.topic_data:
        name = topic_data.name
        results: list[PartitionAnswer] = []
        for pdata in topic_data.partition_data:
            error, message, base_offset, start, append_time = ErrorCode.none, None, -1, -1, -1
            record_errors: tuple[tuple[int, str | None], ...] = ()
            partition = replica_manager.partition(name, pdata.index)
            try:
                if acks not in (0, 1, -1):
                    error = ErrorCode.invalid_required_acks
                elif not allowed(broker, ctx, Operation.WRITE, ResourceType.TOPIC, name):
                    error = ErrorCode.topic_authorization_failed
                elif refused_for(broker.broker_trust, ctx, name):
                    # Whatever the ACLs say (core/server/internal_topics.py).
                    error = ErrorCode.topic_authorization_failed
                    message = protected_message(name, "produce to")
                elif partition is None:
                    error = error_code(replica_manager.missing_partition_error((name, pdata.index)))
                elif not pdata.records:
                    error = ErrorCode.invalid_record
                    message = "the produce request carries no records"
                elif refusal := produce_records_refusal(ctx.api_version, pdata.records):
                    error, message = refusal
                elif code := verification_error(
                    request.transactional_id,
                    lambda txn: allowed(
                        broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn
                    ),
                    partition,
                    pdata.records,
                    lambda txn, pid, epoch, tp: (
                        remote[tp]
                        if tp in remote
                        else broker.transaction_coordinator.verify(txn, pid, epoch, [tp])[tp]
                    ),
                ):
                    # KIP-890: no transactional batch the coordinator does not know of.
                    error = error_code(code)
                    message = verification_message(code)
                else:
                    info = replica_manager.append(partition, _writable(pdata.records), acks)
                    base_offset, start = info.first_offset, info.log_start_offset
                    waits.append((partition, results, len(results), info.last_offset + 1))
                    if info.log_append_time >= 0:
                        append_time = info.log_append_time
            except RecordValidationError as e:
                # KIP-467: the batch is refused whole, its bad records named (v8+), and the
                # partition's log start offset given, as Kafka's ReplicaManager does.
                error, message = error_of(e), str(e)
                start = partition.log.log_start_offset if partition is not None else -1
                record_errors = tuple((r.batch_index, r.message) for r in e.record_errors)
                log.debug("produce to %s-%d refused: %s", name, pdata.index, e)
            except CoreError as e:
                error, message = error_of(e), str(e)
                if isinstance(e, KafkaStorageError):
                    # The disk failed under an append: operators need to see this.
                    log.warning("produce to %s-%d failed: %s", name, pdata.index, e)
                else:
                    log.debug("produce to %s-%d failed: %s", name, pdata.index, e)
            leader = None
            if error:
                if hints is None:
                    hints = LeaderHints(replica_manager.metadata_cache, response_type, ctx.listener)
                leader = hints.current_leader((name, pdata.index), error)
            results.append(
                PartitionAnswer(
                    pdata.index,
                    error,
                    base_offset,
                    append_time,
                    start,
                    record_errors,
                    message,
                    leader,
                )
            )
        topics.append((name, results))
    # Every append of the request is done; only now wait (fsync per flush.messages, then
    # the high watermark for acks=-1).
    for partition, results, slot, required in waits:
        try:
            await replica_manager.wait_durable(partition)
        except KafkaStorageError as e:
            # Written but not durable (flush.messages): not acknowledged.
            log.warning("fsync of %s-%d failed: %s", partition.topic, partition.index, e)
            results[slot] = PartitionAnswer(
                partition.index, ErrorCode.kafka_storage_error, error_message=str(e)
            )
            continue
        if acks == -1:
            code = await replica_manager.wait_replicated(partition, required, timeout_ms)
            if code:
                if hints is None:
                    hints = LeaderHints(replica_manager.metadata_cache, response_type, ctx.listener)
                results[slot] = PartitionAnswer(
                    partition.index,
                    error_code(code),
                    current_leader=hints.current_leader(partition.tp, code),
                )
    # producer_byte_rate counts the request once it is answered (acks=0 too: Kafka mutes
    # the connection of a throttled acks=0 producer though it sends no answer).
    throttle_ms = produce_throttle_ms(broker, ctx)
    if acks == 0:
        return ThrottledResponse(None, throttle_ms) if throttle_ms else None
    return ProduceAnswer(
        tuple((name, tuple(results)) for name, results in topics),
        datetime.timedelta(milliseconds=throttle_ms) if throttle_ms else NO_THROTTLE,
        () if hints is None else hints.node_endpoints(),
    )


def _writable(records: bytes | bytearray | memoryview) -> bytearray | memoryview:
    """The records as the log patches them in place: the view into the request frame the
    network layer decoded them as (core.server.produce_request), else a copy."""
    if isinstance(records, memoryview) and not records.readonly:
        return records
    return bytearray(records)


# -- Fetch ------------------------------------------------------------------------------------
async def handle_fetch(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "FetchableTopicResponse")
    partition_cls = nested(response_type, "PartitionData")
    aborted_cls = nested(response_type, "AbortedTransaction")
    diverging_cls = nested_optional(response_type, "EpochEndOffset")  # v12+
    by_id = ctx.api_version >= 13
    replica_state = getattr(request, "replica_state", None)  # v15+
    replica_id = replica_state.replica_id if replica_state else getattr(request, "replica_id", -1)
    # A follower's fetch (replica_id >= 0) reads every partition or none (Kafka's rule).
    follower_allowed = replica_id >= 0 and cluster_action_allowed(broker, ctx)
    hints = LeaderHints(
        broker.replica_manager.metadata_cache,
        response_type,
        ctx.listener,
        (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH),
    )
    # Kafka bounds a fetch by what consumer_byte_rate allows in one quota span.
    max_bytes = min(
        getattr(request, "max_bytes", 2**31 - 1),
        broker.config.fetch_max_bytes,
        fetch_quota_bytes(broker, ctx, request),
    )
    params = FetchParams(
        max_wait_ms=int(request.max_wait.total_seconds() * 1000),
        min_bytes=min(request.min_bytes, max_bytes),
        max_bytes=max_bytes,
        isolation_level=getattr(request, "isolation_level", 0),
        replica_id=replica_id if follower_allowed else -1,
    )
    unknown_ids: list[tuple[Any, int]] = []
    denied: list[tuple[Any, int]] = []  # (topic key, partition): no READ on the topic
    layout: list[tuple[Any, list[int]]] = []  # response topics in request order
    for topic in request.topics:
        name = _topic_name(broker, topic.topic_id) if by_id else topic.topic
        indexes = []
        if replica_id >= 0:
            may_read = name is not None and follower_allowed
        else:
            may_read = name is not None and allowed(
                broker, ctx, Operation.READ, ResourceType.TOPIC, name
            )
        for p in topic.partitions:
            if name is None:
                unknown_ids.append((topic.topic_id, p.partition))
                continue
            if not may_read:
                denied.append((topic.topic_id if by_id else name, p.partition))
                continue
            params.partitions.append(
                FetchRequestPartition(
                    topic=name,
                    partition=p.partition,
                    fetch_offset=p.fetch_offset,
                    max_bytes=p.partition_max_bytes,
                    current_leader_epoch=getattr(p, "current_leader_epoch", -1),
                    last_fetched_epoch=getattr(p, "last_fetched_epoch", -1),
                    log_start_offset=getattr(p, "log_start_offset", -1),
                )
            )
            indexes.append(len(params.partitions) - 1)
        if name is not None and may_read:
            layout.append((topic.topic_id if by_id else name, indexes))
    results = await broker.replica_manager.fetch(params)
    size = sum(len(r.records) for r in results if r.records is not None)
    throttle_ms = fetch_throttle_ms(broker, ctx, request, size)
    if throttle_ms:
        # Over consumer_byte_rate: no data, only the throttle time (Kafka's throttled
        # fetch response); the client fetches the same offsets again after it.
        return make(
            response_type,
            throttle_time=datetime.timedelta(milliseconds=throttle_ms),
            error_code=ErrorCode.none,
            session_id=0,
            responses=(),
            node_endpoints=(),
        )

    def partition_data(req: FetchRequestPartition, result: Any) -> Any:
        aborted = None
        if result.aborted is not None:
            aborted = tuple(
                make(aborted_cls, producer_id=pid, first_offset=first)
                for pid, first in result.aborted
            )
        extra = hints.partition_fields((req.topic, req.partition), result.error)
        if result.diverging_epoch is not None and diverging_cls is not None:
            epoch, end_offset = result.diverging_epoch
            extra["diverging_epoch"] = make(diverging_cls, epoch=epoch, end_offset=end_offset)
        return make(
            partition_cls,
            partition_index=req.partition,
            error_code=error_code(result.error),
            high_watermark=result.high_watermark,
            last_stable_offset=result.last_stable_offset,
            log_start_offset=result.log_start_offset,
            aborted_transactions=aborted,
            preferred_read_replica=-1,
            records=result.records if result.records is not None else b"",
            **extra,
        )

    topics = []
    for key, indexes in layout:
        parts = tuple(partition_data(params.partitions[i], results[i]) for i in indexes)
        topics.append(make(topic_cls, topic=key, topic_id=key, partitions=parts))
    failed = [(key, i, ErrorCode.unknown_topic_id) for key, i in unknown_ids]
    failed += [(key, i, ErrorCode.topic_authorization_failed) for key, i in denied]
    for key, index, code in failed:
        empty = make(
            partition_cls,
            partition_index=index,
            error_code=code,
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=b"",
        )
        topics.append(make(topic_cls, topic=key, topic_id=key, partitions=(empty,)))
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,  # no fetch sessions: clients keep sending full fetches (KIP-227)
        responses=tuple(topics),
        node_endpoints=hints.node_endpoints(),
    )


def _topic_name(broker: BrokerServices, topic_id: Any) -> str | None:
    """The name of a topic id: the cluster's metadata, else the local topic registry (a
    topic whose creation has not reached the metadata yet)."""
    name = broker.replica_manager.metadata_cache.topic_name(topic_id)
    if name is None:
        info = broker.topics.by_id(topic_id)
        name = info.name if info is not None else None
    return name


# -- ListOffsets ------------------------------------------------------------------------------
async def handle_list_offsets(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "ListOffsetsTopicResponse")
    partition_cls = nested(response_type, "ListOffsetsPartitionResponse")
    isolation = getattr(request, "isolation_level", 0)
    # A follower (replica_id >= 0) sees the log end offset, not only what is committed.
    from_follower = request.replica_id >= 0 and cluster_action_allowed(broker, ctx)
    topics = []
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            error, ts, offset, epoch = ErrorCode.none, -1, -1, -1
            partition = broker.replica_manager.partition(topic.name, p.partition_index)
            try:
                if not allowed(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
                    error = ErrorCode.topic_authorization_failed
                elif partition is None:
                    error = error_code(
                        broker.replica_manager.missing_partition_error(
                            (topic.name, p.partition_index)
                        )
                    )
                else:
                    found = await broker.replica_manager.list_offset(
                        partition,
                        p.timestamp,
                        isolation,
                        getattr(p, "current_leader_epoch", -1),
                        from_follower=from_follower,
                    )
                    if found is not None:
                        ts, offset = found.timestamp, found.offset
                        epoch = found.leader_epoch if found.leader_epoch is not None else -1
            except CoreError as e:
                error = error_of(e)
            results.append(
                make(
                    partition_cls,
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch,
                    old_style_offsets=(offset,) if offset >= 0 else (),
                )
            )
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(results)))
    return make(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))


# -- CreateTopics -----------------------------------------------------------------------------
def _partitions_asked(broker: BrokerServices, topic: Any) -> int:
    """Partitions one CreateTopics entry asks for, counted as Kafka's controller does."""
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return int(broker.config.num_partitions)
    return max(0, int(topic.num_partitions))


async def handle_create_topics(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "CreatableTopicResult")
    config_cls = nested_optional(response_type, "CreatableTopicConfigs")  # v5+
    validate_only = getattr(request, "validate_only", False)

    def may_create(name: str) -> bool:
        return cluster_allowed(broker, ctx, Operation.CREATE) or allowed(
            broker, ctx, Operation.CREATE, ResourceType.TOPIC, name
        )

    # Kafka's controller refuses a request whose topics (those the principal may create)
    # ask for more partitions together than its limit, before creating any: every topic of
    # the request gets POLICY_VIOLATION.
    limit = broker.config.get("max.partitions.per.request")
    asked = sum(_partitions_asked(broker, t) for t in request.topics if may_create(t.name))
    refusal = None
    if asked > limit:
        refusal = (
            "Excessively large number of partitions per request "
            f"({asked} asked, max.partitions.per.request={limit})."
        )
        log.info("refused CreateTopics from %s: %s", ctx.client_address, refusal)
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    results = []
    for topic in request.topics:
        error, message, info = ErrorCode.none, None, None
        partitions = topic.num_partitions
        replication = topic.replication_factor
        assignments = None
        try:
            if refusal is not None:
                raise TooManyPartitionsError(refusal)
            if not may_create(topic.name):
                raise TopicAuthorizationError(f"not authorized to create topic {topic.name}")
            if refused_for(broker.broker_trust, ctx, topic.name):
                # A client creating __remote_log_metadata first could give it a short
                # retention; the broker creates these topics itself, with their settings.
                raise PolicyViolationError(protected_message(topic.name, "create"))
            if topic.assignments:
                if partitions != -1 or replication != -1:
                    raise CoreError(
                        "Both numPartitions or replicationFactor and "
                        "replicasAssignments were set. Both cannot be used "
                        "at the same time."
                    )
                partitions = len(topic.assignments)
                replication = max(len(a.broker_ids) for a in topic.assignments)
                assignments = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
            if partitions == -1:
                partitions = broker.config.num_partitions
            if replication == -1:
                replication = broker.config.default_replication_factor
            configs = {c.name: c.value for c in topic.configs}
            info = await broker.create_topic(
                topic.name,
                partitions,
                configs,
                replication_factor=replication,
                assignments=assignments,
                validate_only=validate_only,
                timeout_ms=timeout_ms,
            )
        except CoreError as e:
            error, message = error_of(e), str(e)
            if type(e) is CoreError:
                error = ErrorCode.invalid_request
        described = ()
        if info is not None and config_cls is not None:
            described = tuple(
                make(
                    config_cls,
                    name=k,
                    value=v,
                    read_only=False,
                    config_source=1 if k in info.configs else 5,
                    is_sensitive=False,
                )
                for k, v in sorted(broker.topics.effective_config(info).to_props().items())
            )
        results.append(
            make(
                result_cls,
                name=topic.name,
                topic_id=info.topic_id if info is not None and not validate_only else None,
                error_code=error,
                error_message=message,
                topic_config_error_code=ErrorCode.none,
                num_partitions=info.partitions if info is not None else -1,
                replication_factor=replication if info is not None else -1,
                configs=described if info is not None else None,
            )
        )
    return make(response_type, throttle_time=NO_THROTTLE, topics=tuple(results))


HANDLERS: dict[int, Handler] = {
    ApiKey.METADATA: handle_metadata,
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.CREATE_TOPICS: handle_create_topics,
}
