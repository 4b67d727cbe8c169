"""The cluster's control APIs: LeaderAndIsr, UpdateMetadata, StopReplica and
ControlledShutdown (from the controller, or to it) and ElectLeaders.

The controller's requests are accepted only from a request that acts as a broker
(``BrokerTrust``; CLUSTER_ACTION on the cluster too when an authorizer is set, as Kafka
asks): anyone else gets CLUSTER_AUTHORIZATION_FAILED. Then, as Kafka's KafkaApis:

- a request carrying an older broker epoch than this broker's registration (it was meant
  for this broker before it re-registered) gets STALE_BROKER_EPOCH;
- one from an older controller gets STALE_CONTROLLER_EPOCH;
- otherwise the ReplicaManager and the MetadataCache apply it; LeaderAndIsr and
  StopReplica answer an error code per partition.

ControlledShutdown and ElectLeaders are served by the active controller; another broker
answers NOT_CONTROLLER (AdminClients send ElectLeaders to the controller Metadata names).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from core.errors import CoreError
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation
from core.server.cluster_types import (
    leader_and_isr_request_states,
    leader_and_isr_response,
    stop_replica_request_partitions,
    stop_replica_response,
    update_metadata_request_brokers,
    update_metadata_request_states,
)
from core.server.controller.elections import ElectionType
from core.server.handler_support import (
    NO_THROTTLE,
    BrokerServices,
    Handler,
    cluster_allowed,
    error_code,
    error_of,
)
from core.server.interbroker_schema import (
    ControlledShutdownResponse,
    RemainingPartition,
    UpdateMetadataResponse,
)
from core.server.kio_build import make, nested
from core.server.metadata_cache import StaleControllerEpochError
from core.server.protocol import RequestContext

log = logging.getLogger(__name__)

UNKNOWN_AUTHORIZED_OPERATIONS = -(2**31)


def _refusal(broker: BrokerServices, ctx: RequestContext, broker_epoch: int) -> int:
    """The top-level error of a controller request, or 0 to serve it."""
    if not broker.broker_trust.admits(ctx) or not cluster_allowed(
        broker, ctx, Operation.CLUSTER_ACTION
    ):
        log.warning(
            "refused %s from %s (%s on %s): not a broker",
            ApiKey(ctx.api_key).name,
            ctx.client_address,
            ctx.principal,
            ctx.listener,
        )
        return ErrorCode.cluster_authorization_failed
    # Kafka's isBrokerEpochStale: -1 means "not given" (an old controller); a newer epoch
    # than ours cannot be (the controller read it from our registration).
    if broker_epoch != -1 and broker_epoch < broker.broker_epoch:
        log.info(
            "ignored %s with broker epoch %d (ours is %d)",
            ApiKey(ctx.api_key).name,
            broker_epoch,
            broker.broker_epoch,
        )
        return ErrorCode.stale_broker_epoch
    return ErrorCode.none


# -- LeaderAndIsr -----------------------------------------------------------------------------
async def handle_leader_and_isr(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    states = leader_and_isr_request_states(request)
    topic_ids = {s.topic: s.topic_id for s in states}
    refusal = _refusal(broker, ctx, request.broker_epoch)
    if refusal:
        return leader_and_isr_response(dict.fromkeys((s.tp for s in states), refusal), topic_ids,
                                       refusal)  # fmt: skip
    try:
        errors = await broker.become_leader_or_follower(
            request.controller_id, request.controller_epoch, states
        )
    except StaleControllerEpochError as e:
        log.info("LeaderAndIsr refused: %s", e)
        errors = dict.fromkeys((s.tp for s in states), ErrorCode.stale_controller_epoch)
    if errors and all(code == ErrorCode.stale_controller_epoch for code in errors.values()):
        # Kafka answers an old controller at the top level.
        return leader_and_isr_response(errors, topic_ids, ErrorCode.stale_controller_epoch)
    return leader_and_isr_response(errors, topic_ids)


# -- UpdateMetadata ---------------------------------------------------------------------------
async def handle_update_metadata(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    refusal = _refusal(broker, ctx, request.broker_epoch)
    if refusal:
        return UpdateMetadataResponse(error_code=ErrorCode(refusal))
    try:
        brokers = update_metadata_request_brokers(request)
    except ValueError as e:
        log.warning("UpdateMetadata from controller %d refused: %s", request.controller_id, e)
        return UpdateMetadataResponse(error_code=ErrorCode.invalid_request)
    try:
        await broker.update_metadata(
            request.controller_id,
            request.controller_epoch,
            brokers,
            update_metadata_request_states(request),
        )
    except StaleControllerEpochError as e:
        log.info("UpdateMetadata refused: %s", e)
        return UpdateMetadataResponse(error_code=ErrorCode.stale_controller_epoch)
    return UpdateMetadataResponse(error_code=ErrorCode.none)


# -- StopReplica ------------------------------------------------------------------------------
async def handle_stop_replica(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    partitions = stop_replica_request_partitions(request)
    refusal = _refusal(broker, ctx, request.broker_epoch)
    if refusal:
        return stop_replica_response({}, refusal)
    try:
        errors = await broker.stop_replicas(
            request.controller_id, request.controller_epoch, partitions
        )
    except StaleControllerEpochError as e:
        log.info("StopReplica refused: %s", e)
        return stop_replica_response({}, ErrorCode.stale_controller_epoch)
    if errors and all(code == ErrorCode.stale_controller_epoch for code in errors.values()):
        return stop_replica_response({}, ErrorCode.stale_controller_epoch)
    return stop_replica_response(errors)


# -- ControlledShutdown -----------------------------------------------------------------------
async def handle_controlled_shutdown(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    def answer(code: int, remaining: set[tuple[str, int]] = frozenset()) -> Any:  # type: ignore[assignment]
        return ControlledShutdownResponse(
            error_code=ErrorCode(code),
            remaining_partitions=tuple(
                RemainingPartition(topic_name=t, partition_index=p) for t, p in sorted(remaining)
            ),
        )

    if not broker.broker_trust.admits(ctx) or not cluster_allowed(
        broker, ctx, Operation.CLUSTER_ACTION
    ):
        return answer(ErrorCode.cluster_authorization_failed)
    try:
        remaining = await broker.controller.controlled_shutdown(
            request.broker_id, request.broker_epoch
        )
    except CoreError as e:
        log.info("controlled shutdown of broker %d refused: %s", request.broker_id, e)
        return answer(e.error_code)
    return answer(0, remaining)


# -- ElectLeaders -----------------------------------------------------------------------------
async def handle_elect_leaders(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "ReplicaElectionResult")
    partition_cls = nested(response_type, "PartitionResult")
    raw_type = int(getattr(request, "election_type", ElectionType.PREFERRED))
    asked = None
    if request.topic_partitions is not None:
        asked = {(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions}
    top = ErrorCode.none
    if raw_type not in {t.value for t in ElectionType}:
        # Kafka's ElectionType.valueOf refuses it; answered as a bad request, not raised.
        top = ErrorCode.invalid_request
        message = f"unknown election type {raw_type} (0 preferred, 1 unclean)"
        results = dict.fromkeys(asked or (), (int(top), message))
    elif not cluster_allowed(broker, ctx, Operation.ALTER):
        top = ErrorCode.cluster_authorization_failed
        results = dict.fromkeys(asked or (), (int(top), None))
    else:
        try:
            results = await broker.controller.elect_leaders(ElectionType(raw_type), asked)
        except CoreError as e:
            top = error_of(e)
            results = dict.fromkeys(asked or (), (e.error_code, str(e)))
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            make(
                partition_cls,
                partition_id=partition,
                error_code=error_code(code),
                error_message=message,
            )
        )
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=top,
        replica_election_results=tuple(
            make(topic_cls, topic=topic, partition_result=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


# -- AlterPartitionReassignments / ListPartitionReassignments ----------------------------------
async def handle_alter_partition_reassignments(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    """Served by the controller (NOT_CONTROLLER elsewhere); ALTER on the cluster."""
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "ReassignableTopicResponse")
    partition_cls = nested(response_type, "ReassignablePartitionResponse")
    requested = {
        (t.name, int(p.partition_index)): (
            None if p.replicas is None else tuple(int(r) for r in p.replicas)
        )
        for t in request.topics
        for p in t.partitions
    }
    top, top_message = ErrorCode.none, None
    results: dict[tuple[str, int], tuple[int, str | None]] = {}
    if not cluster_allowed(broker, ctx, Operation.ALTER):
        top = ErrorCode.cluster_authorization_failed
    else:
        try:
            results = await broker.controller.alter_partition_reassignments(requested)
        except CoreError as e:
            top, top_message = error_of(e), str(e)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), _ in sorted(requested.items()):
        code, message = results.get((topic, partition), (int(top), top_message))
        by_topic.setdefault(topic, []).append(
            make(partition_cls, partition_index=partition, error_code=error_code(code),
                 error_message=message)
        )  # fmt: skip
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=top,
        error_message=top_message,
        responses=tuple(
            make(topic_cls, name=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


async def handle_list_partition_reassignments(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    """Served by the controller (NOT_CONTROLLER elsewhere); DESCRIBE on the cluster."""
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "OngoingTopicReassignment")
    partition_cls = nested(response_type, "OngoingPartitionReassignment")
    asked = None
    if request.topics is not None:
        asked = {(t.name, int(p)) for t in request.topics for p in t.partition_indexes}
    top, top_message = ErrorCode.none, None
    ongoing: dict[tuple[str, int], Any] = {}
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        top = ErrorCode.cluster_authorization_failed
    else:
        try:
            ongoing = await broker.controller.list_partition_reassignments(asked)
        except CoreError as e:
            top, top_message = error_of(e), str(e)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), assignment in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append(
            make(
                partition_cls,
                partition_index=partition,
                replicas=tuple(assignment.replicas),
                adding_replicas=tuple(assignment.adding_replicas),
                removing_replicas=tuple(assignment.removing_replicas),
            )
        )
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=top,
        error_message=top_message,
        topics=tuple(
            make(topic_cls, name=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.LEADER_AND_ISR: handle_leader_and_isr,
    ApiKey.UPDATE_METADATA: handle_update_metadata,
    ApiKey.STOP_REPLICA: handle_stop_replica,
    ApiKey.CONTROLLED_SHUTDOWN: handle_controlled_shutdown,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
}
