"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546.

Kafka's semantics (KafkaApis / ControllerApis, ClientQuotasImage, ClientQuotaControlManager):

- Describe needs DESCRIBE_CONFIGS on the cluster, Alter ALTER_CONFIGS on the cluster, when
  an authorizer is set; otherwise CLUSTER_AUTHORIZATION_FAILED (for Describe as the
  response's error, for Alter on every entry).
- Describe filters by components: per entity type, an exact name, the default (``<default>``)
  or any specified name; ``strict`` leaves out entities with types the filter does not
  name. A malformed filter is INVALID_REQUEST, an unknown entity type UNSUPPORTED_VERSION.
- Alter answers each entry on its own: INVALID_REQUEST for an invalid entity, an unknown
  key (``Invalid configuration key``), a non-integral byte rate, a key twice in an entry or
  an entity twice in the request. The valid entries are persisted together, then enforced
  at once; ``validate_only`` checks without changing anything.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from core.errors import CoreError
from core.server.api_keys import ApiKey
from core.server.authorizer import ClusterAuthorizationError, Operation
from core.server.handler_support import (
    NO_THROTTLE,
    BrokerServices,
    Handler,
    cluster_allowed,
    error_of,
)
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext
from core.server.quotas import FilterComponent, QuotaAlteration, QuotaOp

log = logging.getLogger(__name__)


async def handle_describe_client_quotas(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    entry_cls = nested(response_type, "EntryData")
    entity_cls = nested(response_type, "EntityData")
    value_cls = nested(response_type, "ValueData")

    def failed(code: ErrorCode, message: str) -> Any:
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            entries=None,
        )

    if not cluster_allowed(broker, ctx, Operation.DESCRIBE_CONFIGS):
        return failed(
            ErrorCode.cluster_authorization_failed,
            "Cluster authorization failed: DESCRIBE_CONFIGS on the cluster is required.",
        )
    components = [
        FilterComponent(c.entity_type, int(c.match_type), c.match) for c in request.components
    ]
    try:
        found = broker.quotas.describe(components, bool(request.strict))
    except CoreError as e:
        return failed(error_of(e), str(e))
    entries = tuple(
        make(
            entry_cls,
            entity=tuple(make(entity_cls, entity_type=t, entity_name=n) for t, n in entity.parts),
            values=tuple(make(value_cls, key=k, value=v) for k, v in sorted(values.items())),
        )
        for entity, values in found
    )
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        entries=entries,
    )


async def handle_alter_client_quotas(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    entry_cls = nested(response_type, "EntryData")
    entity_cls = nested(response_type, "EntityData")
    alterations = [
        QuotaAlteration(
            entity=tuple((e.entity_type, e.entity_name) for e in entry.entity),
            ops=tuple(QuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops),
        )
        for entry in request.entries
    ]
    if cluster_allowed(broker, ctx, Operation.ALTER_CONFIGS):
        errors = await broker.quotas.alter(alterations, bool(request.validate_only))
        if not request.validate_only and any(e is None for e in errors):
            log.info("%s altered client quotas from %s", ctx.principal, ctx.client_address)
    else:
        denied = ClusterAuthorizationError(
            "Cluster authorization failed: ALTER_CONFIGS on the cluster is required."
        )
        errors = [denied] * len(alterations)

    def result(alteration: QuotaAlteration, error: CoreError | None) -> Any:
        code = ErrorCode.none if error is None else error_of(error)
        return make(
            entry_cls,
            error_code=code,
            error_message=None if error is None else str(error),
            entity=tuple(
                make(entity_cls, entity_type=t, entity_name=n) for t, n in alteration.entity
            ),
        )

    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        entries=tuple(result(a, e) for a, e in zip(alterations, errors, strict=True)),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
}
