"""DescribeCluster: the brokers, the controller and the cluster id (KIP-700).

As a Kafka broker answers it, from the MetadataCache as Metadata does: the live brokers with
their endpoint on the request's listener (never fenced: ZooKeeper-mode brokers are not), the
controller (-1 while none is known), the cluster id, and when asked for, the cluster's
authorized operations: the bits of every cluster operation the principal may perform (all
of them without an authorizer), or 0 when it may not DESCRIBE the cluster. A broker serves
endpoint type 1 (brokers) only: type 2 (controllers) is MISMATCHED_ENDPOINT_TYPE, any other
UNSUPPORTED_ENDPOINT_TYPE (both INVALID_REQUEST at v0, which has no such field).
"""

from __future__ import annotations

import enum
from typing import Any

from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.handler_support import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    BrokerServices,
    Handler,
    cluster_authorized_operations,
    live_brokers,
)
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext


class EndpointType(enum.IntEnum):
    """Kafka's EndpointType ids."""

    UNKNOWN = 0
    BROKER = 1
    CONTROLLER = 2


async def handle_describe_cluster(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    broker_cls = nested(response_type, "DescribeClusterBroker")
    requested = getattr(request, "endpoint_type", EndpointType.BROKER)
    if requested != EndpointType.BROKER:
        if requested == EndpointType.CONTROLLER:
            error = ErrorCode.mismatched_endpoint_type
            message = (
                "The request was sent to an endpoint of type BROKER, but we wanted an "
                "endpoint of type CONTROLLER"
            )
        else:
            error = ErrorCode.unsupported_endpoint_type
            message = f"Unsupported endpoint type {requested}"
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.invalid_request if ctx.api_version == 0 else error,
            error_message=message,
            cluster_id="",
            brokers=(),
        )
    operations = UNKNOWN_AUTHORIZED_OPERATIONS
    if request.include_cluster_authorized_operations:
        operations = cluster_authorized_operations(broker, ctx)
    snapshot = broker.metadata_cache.snapshot()
    controller = snapshot.controller_id
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=EndpointType.BROKER,
        cluster_id=broker.cluster_id,
        controller_id=controller if controller is not None else -1,
        brokers=tuple(
            make(broker_cls, broker_id=node, host=host, port=port, rack=rack, is_fenced=False)
            for node, host, port, rack in live_brokers(broker, ctx.listener, snapshot)
        ),
        cluster_authorized_operations=operations,
    )


HANDLERS: dict[int, Handler] = {ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster}
