"""The group-membership APIs over ``GroupCoordinator``: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, ListGroups, DescribeGroups, DeleteGroups (the classic protocol, at the versions
librdkafka, kafka-python and aiokafka negotiate). Group resources are checked against ACLs
as Kafka does: READ on the group to join, sync, heartbeat or leave; DESCRIBE to list and
describe; DELETE to delete.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from core.errors import CoreError
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation, ResourceType
from core.server.group_apis import flush_offsets
from core.server.group_coordinator import GroupError, GroupState
from core.server.handler_support import (
    NO_THROTTLE,
    BrokerServices,
    Handler,
    allowed,
    client_host,
)
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext

log = logging.getLogger(__name__)


def _code(error: GroupError) -> ErrorCode:
    return ErrorCode(error.value)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _may(broker: BrokerServices, ctx: RequestContext, op: Operation, group: str) -> bool:
    return allowed(broker, ctx, op, ResourceType.GROUP, group)


async def handle_join_group(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    member_cls = nested(response_type, "JoinGroupResponseMember")
    if not _may(broker, ctx, Operation.READ, request.group_id):
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None,
            leader="",
            skip_assignment=False,
            member_id=request.member_id,
            members=(),
        )
    status = broker.group_coordinator.status(request.group_id)
    if status is not GroupError.NONE:
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=_code(status),
            generation_id=-1,
            protocol_type=None,
            protocol_name=None,
            leader="",
            skip_assignment=False,
            member_id=request.member_id,
            members=(),
        )
    session = _ms(request.session_timeout)
    rebalance = _ms(getattr(request, "rebalance_timeout", session))  # v0: the session timeout
    result = await broker.group_coordinator.join(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        ctx.client_id or "",
        client_host(ctx),
        session,
        rebalance,
        request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols],
        # KIP-394: from v4 a new member first gets its id with MEMBER_ID_REQUIRED.
        require_known_member_id=ctx.api_version >= 4,
    )
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=_code(result.error),
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name or "",
        leader=result.leader,
        skip_assignment=False,
        member_id=result.member_id,
        members=tuple(
            make(member_cls, member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in result.members
        ),
    )


async def handle_sync_group(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    if not _may(broker, ctx, Operation.READ, request.group_id):
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            assignment=b"",
        )
    status = broker.group_coordinator.status(request.group_id)
    if status is not GroupError.NONE:
        return make(
            response_type, throttle_time=NO_THROTTLE, error_code=_code(status), assignment=b""
        )
    result = await broker.group_coordinator.sync(
        request.group_id,
        request.generation_id,
        request.member_id,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=_code(result.error),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle_heartbeat(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    if not _may(broker, ctx, Operation.READ, request.group_id):
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
        )
    error = broker.group_coordinator.status(request.group_id)
    if error is GroupError.NONE:
        error = broker.group_coordinator.heartbeat(
            request.group_id, request.generation_id, request.member_id
        )
    return make(response_type, throttle_time=NO_THROTTLE, error_code=_code(error))


async def handle_leave_group(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    if not _may(broker, ctx, Operation.READ, request.group_id):
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            members=(),
        )
    coord = broker.group_coordinator
    status = coord.status(request.group_id)
    if status is not GroupError.NONE:
        return make(response_type, throttle_time=NO_THROTTLE, error_code=_code(status), members=())
    if ctx.api_version < 3:
        error = coord.leave(request.group_id, request.member_id, None)
        return make(response_type, throttle_time=NO_THROTTLE, error_code=_code(error))
    member_cls = nested(response_type, "MemberResponse")
    members = []
    for m in request.members:
        error = coord.leave(request.group_id, m.member_id, m.group_instance_id)
        members.append(
            make(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=_code(error),
            )
        )
    return make(
        response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, members=tuple(members)
    )


def _all_groups(broker: BrokerServices) -> dict[str, tuple[str, str]]:
    """Group id -> (state, protocol type) of every group: with members, or offsets only."""
    out = {
        gid: (g.state.value, g.protocol_type or "")
        for gid, g in broker.group_coordinator.groups.items()
    }
    for gid in broker.group_offsets.groups():
        out.setdefault(gid, (GroupState.EMPTY.value, ""))
    return out


async def handle_list_groups(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    listed_cls = nested(response_type, "ListedGroup")
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    if broker.group_coordinator.loading:
        # Kafka: the listing would be incomplete while a partition loads.
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.coordinator_load_in_progress,
            groups=(),
        )
    groups = []
    for gid, (state, protocol_type) in sorted(_all_groups(broker).items()):
        if states and state.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        if not _may(broker, ctx, Operation.DESCRIBE, gid):
            continue
        groups.append(
            make(
                listed_cls,
                group_id=gid,
                protocol_type=protocol_type,
                group_state=state,
                group_type="classic",
            )
        )
    return make(
        response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(groups)
    )


async def handle_describe_groups(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    group_cls = nested(response_type, "DescribedGroup")
    member_cls = nested(response_type, "DescribedGroupMember")
    known = _all_groups(broker)
    out = []
    for gid in request.groups:
        if not _may(broker, ctx, Operation.DESCRIBE, gid):
            out.append(
                make(
                    group_cls,
                    error_code=ErrorCode.group_authorization_failed,
                    group_id=gid,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=-2147483648,
                )
            )
            continue
        status = broker.group_coordinator.status(gid)
        if status is not GroupError.NONE:
            out.append(
                make(
                    group_cls,
                    error_code=_code(status),
                    group_id=gid,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=-2147483648,
                )
            )
            continue
        group = broker.group_coordinator.groups.get(gid)
        state, protocol_type = known.get(gid, (GroupState.DEAD.value, ""))
        members = ()
        protocol = ""
        if group is not None:
            protocol = group.protocol_name or ""
            members = tuple(
                make(
                    member_cls,
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata(protocol) if protocol else b"",
                    member_assignment=m.assignment,
                )
                for m in group.members.values()
            )
        out.append(
            make(
                group_cls,
                error_code=ErrorCode.none,
                group_id=gid,
                group_state=state,
                protocol_type=protocol_type,
                protocol_data=protocol,
                members=members,
                authorized_operations=-2147483648,
            )
        )
    return make(response_type, throttle_time=NO_THROTTLE, groups=tuple(out))


async def handle_delete_groups(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "DeletableGroupResult")
    store = broker.group_offsets
    results = []
    version = 0
    for gid in request.groups_names:
        status = broker.group_coordinator.status(gid)
        if not _may(broker, ctx, Operation.DELETE, gid):
            error = ErrorCode.group_authorization_failed
        elif status is not GroupError.NONE:
            error = _code(status)
        elif gid in broker.group_coordinator.groups:
            error = _code(broker.group_coordinator.delete(gid))
        else:
            error = ErrorCode.none if store.has_group(gid) else ErrorCode.group_id_not_found
        if error is ErrorCode.none:
            version = store.delete_group(gid)  # offset and metadata tombstones
        results.append(make(result_cls, group_id=gid, error_code=error))
    if version:
        try:
            await flush_offsets(store, version)
        except (OSError, CoreError) as e:
            log.error("cannot persist the deletion of groups %s: %s", request.groups_names, e)
    return make(response_type, throttle_time=NO_THROTTLE, results=tuple(results))


HANDLERS: dict[int, Handler] = {
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
}
