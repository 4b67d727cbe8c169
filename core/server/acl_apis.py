"""CreateAcls, DescribeAcls, DeleteAcls (the check every handler makes is
``core.server.handler_support.allowed``).

Without ``authorizer.class.name`` the ACL APIs answer SECURITY_DISABLED and every request is
allowed (Kafka's behaviour). CreateAcls and DeleteAcls need ALTER on the cluster,
DescribeAcls DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from core.server.api_keys import ApiKey
from core.server.authorizer import (
    AclBinding,
    AclFilter,
    AclStoreError,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from core.server.handler_support import NO_THROTTLE, BrokerServices, Handler, cluster_allowed
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext


def _enum(cls: type, value: int) -> Any:
    try:
        return cls(int(value))
    except ValueError:
        return cls(0)  # UNKNOWN


def _filter(f: Any) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        _enum(PatternType, getattr(f, "pattern_type_filter", PatternType.LITERAL)),
        f.principal_filter,
        f.host_filter,
        _enum(Operation, f.operation),
        _enum(Permission, f.permission_type),
    )


async def handle_create_acls(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "AclCreationResult")
    results: list[list[Any]] = []
    bindings = []
    for c in request.creations:
        error, message = ErrorCode.none, None
        if broker.authorizer is None:
            error, message = ErrorCode.security_disabled, "no authorizer is configured"
        elif not cluster_allowed(broker, ctx, Operation.ALTER):
            error = ErrorCode.cluster_authorization_failed
        else:
            try:
                binding = AclBinding(
                    _enum(ResourceType, c.resource_type),
                    c.resource_name,
                    _enum(PatternType, getattr(c, "resource_pattern_type", 3)),
                    c.principal,
                    c.host,
                    _enum(Operation, c.operation),
                    _enum(Permission, c.permission_type),
                )
                broker.authorizer.check_storable(binding)
                bindings.append(binding)
            except InvalidAclError as e:
                error, message = ErrorCode.invalid_request, str(e)
        results.append([error, message])
    if bindings:
        try:
            await broker.authorizer.create_acls(bindings)
        except AclStoreError as e:
            # Kafka answers each creation of a failed write with the error.
            for result in results:
                if result[0] == ErrorCode.none:
                    result[:] = [ErrorCode.unknown_server_error, str(e)]
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        results=tuple(make(result_cls, error_code=e, error_message=m) for e, m in results),
    )


async def handle_describe_acls(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    resource_cls = nested(response_type, "DescribeAclsResource")
    acl_cls = nested(response_type, "AclDescription")
    if broker.authorizer is None:
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.security_disabled,
            error_message="no authorizer is configured",
            resources=(),
        )
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=None,
            resources=(),
        )
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in broker.authorizer.describe(_filter(request)):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        grouped.setdefault(key, []).append(acl)
    resources = tuple(
        make(
            resource_cls,
            resource_type=i8(rtype),
            resource_name=name,
            pattern_type=i8(pattern),
            acls=tuple(
                make(
                    acl_cls,
                    principal=a.principal,
                    host=a.host,
                    operation=i8(a.operation),
                    permission_type=i8(a.permission),
                )
                for a in acls
            ),
        )
        for (rtype, name, pattern), acls in grouped.items()
    )
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        resources=resources,
    )


async def handle_delete_acls(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "DeleteAclsFilterResult")
    match_cls = nested(response_type, "DeleteAclsMatchingAcl")
    if broker.authorizer is None or not cluster_allowed(broker, ctx, Operation.ALTER):
        error = (
            ErrorCode.security_disabled
            if broker.authorizer is None
            else ErrorCode.cluster_authorization_failed
        )
        results = tuple(
            make(result_cls, error_code=error, error_message=None, matching_acls=())
            for _ in request.filters
        )
        return make(response_type, throttle_time=NO_THROTTLE, filter_results=results)
    try:
        removed = await broker.authorizer.delete_acls([_filter(f) for f in request.filters])
    except AclStoreError as e:
        results = tuple(
            make(
                result_cls,
                error_code=ErrorCode.unknown_server_error,
                error_message=str(e),
                matching_acls=(),
            )
            for _ in request.filters
        )
        return make(response_type, throttle_time=NO_THROTTLE, filter_results=results)
    results = tuple(
        make(
            result_cls,
            error_code=ErrorCode.none,
            error_message=None,
            matching_acls=tuple(
                make(
                    match_cls,
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=i8(a.resource_type),
                    resource_name=a.resource_name,
                    pattern_type=i8(a.pattern_type),
                    principal=a.principal,
                    host=a.host,
                    operation=i8(a.operation),
                    permission_type=i8(a.permission),
                )
                for a in gone
            ),
        )
        for gone in removed
    )
    return make(response_type, throttle_time=NO_THROTTLE, filter_results=results)


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
}
