"""DescribeCluster: the brokers, the controller and the cluster id (KIP-700).

As a Kafka broker answers it: the live brokers as seen on the request's listener (here this
one broker, never fenced), the controller (this broker, as Metadata says), the cluster id of
the log dirs, and when asked for, the cluster's authorized operations: the bits of every
cluster operation the principal may perform (all of them without an authorizer), or 0 when
it may not DESCRIBE the cluster. A broker serves endpoint type 1 (brokers) only: type 2
(controllers) is MISMATCHED_ENDPOINT_TYPE, any other UNSUPPORTED_ENDPOINT_TYPE (both
INVALID_REQUEST at v0, which has no such field).
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
    node = broker.config.node_id
    host, port = broker.advertised_endpoint(ctx.listener)
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=EndpointType.BROKER,
        cluster_id=broker.cluster_id,
        controller_id=node,
        brokers=(
            make(
                broker_cls,
                broker_id=node,
                host=host,
                port=port,
                rack=broker.config.broker_rack,
                is_fenced=False,
            ),
        ),
        cluster_authorized_operations=operations,
    )


HANDLERS: dict[int, Handler] = {ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster}
