"""Admin APIs: DeleteTopics, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
DeleteRecords and OffsetForLeaderEpoch, with Kafka's error codes.

Config resources follow Kafka's ConfigResource types: 2 TOPIC and 4 BROKER. DescribeConfigs
shows what ``core.server.config_entries`` builds (Kafka's entries, order, sources and
synonyms). AlterConfigs replaces a topic's overrides whole, IncrementalAlterConfigs applies
SET/DELETE/APPEND/SUBTRACT to them; both validate with LogConfig and refuse the internal
topics to non-brokers. Broker configs are static: described read-only, never altered
(Kafka answers INVALID_REQUEST for a broker key it cannot update dynamically).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from core.config import ConfigType
from core.errors import CoreError, InvalidConfigError
from core.log.config import TOPIC_CONFIG, LogConfig
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation
from core.server.authorizer import ResourceType as AclResource
from core.server.config_entries import (
    ConfigEntry,
    ConfigSource,
    broker_entries,
    topic_entries,
)
from core.server.group_apis import flush_offsets
from core.server.handler_support import (
    NO_THROTTLE,
    BrokerServices,
    Handler,
    allowed,
    cluster_action_allowed,
    cluster_allowed,
    error_code,
    error_of,
)
from core.server.internal_topics import PROTECTED_TOPICS, protected_message, refused_for
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext
from core.server.topics import TopicInfo

log = logging.getLogger(__name__)


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids."""

    TOPIC = 2
    BROKER = 4


class AlterOp(enum.IntEnum):
    """Kafka's AlterConfigOp.OpType ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# -- DeleteTopics -----------------------------------------------------------------------------
def _deletion_refused(
    broker: BrokerServices, version: int, name: str | None, topic_id: Any, duplicate: bool
) -> tuple[ErrorCode, str | None, TopicInfo | None]:
    """Kafka's checks of one DeleteTopics entry: (error, message, topic to delete)."""
    by_id = name is None and topic_id is not None and topic_id.int != 0
    if name is not None and topic_id is not None and topic_id.int != 0:
        return ErrorCode.invalid_request, "You may not specify both topic name and topic id.", None
    if name is None and not by_id:
        return ErrorCode.invalid_request, "Neither topic name nor id were specified.", None
    if duplicate:
        message = "Duplicate topic id." if by_id else "Duplicate topic name."
        return ErrorCode.invalid_request, message, None
    if not broker.config.delete_topic_enable:
        # TOPIC_DELETION_DISABLED exists from v3; older clients get INVALID_REQUEST.
        error = ErrorCode.topic_deletion_disabled if version >= 3 else ErrorCode.invalid_request
        return error, "Topic deletion is disabled.", None
    info = broker.topics.by_id(topic_id) if by_id else broker.topics.get(name or "")
    if info is None:
        if by_id:
            return ErrorCode.unknown_topic_id, "This server does not host this topic ID.", None
        return (
            ErrorCode.unknown_topic_or_partition,
            "This server does not host this topic-partition.",
            None,
        )
    if info.name in PROTECTED_TOPICS:
        # By anyone: the broker's own records (core/server/internal_topics.py).
        message = f"Internal topic {info.name} cannot be deleted."
        return ErrorCode.invalid_topic_exception, message, None
    return ErrorCode.none, None, info


async def handle_delete_topics(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "DeletableTopicResult")
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    counts = Counter(name if name is not None else topic_id for name, topic_id in wanted)
    results = []
    deleted: list[str] = []
    for name, topic_id in wanted:
        duplicate = counts[name if name is not None else topic_id] > 1
        error, message, info = _deletion_refused(broker, ctx.api_version, name, topic_id, duplicate)
        if info is not None and not allowed(
            broker, ctx, Operation.DELETE, AclResource.TOPIC, info.name
        ):
            error, message, info = ErrorCode.topic_authorization_failed, None, None
        if info is not None:
            try:
                await broker.delete_topic(info.name, timeout_ms=timeout_ms)
                deleted.append(info.name)
            except CoreError as e:
                error, message = error_of(e), str(e)
        results.append(
            make(
                result_cls,
                name=info.name if info is not None else name,
                topic_id=info.topic_id if info is not None else topic_id,
                error_code=error,
                error_message=message,
            )
        )
    if deleted:
        # Kafka drops the committed offsets of deleted partitions.
        store = broker.group_offsets
        version = 0
        for name in deleted:
            version = store.delete_topic(name)
        try:
            await flush_offsets(store, version)
        except (OSError, CoreError) as e:
            log.error("cannot persist committed offsets after deleting %s: %s", deleted, e)
    return make(response_type, throttle_time=NO_THROTTLE, responses=tuple(results))


# -- DescribeConfigs --------------------------------------------------------------------------
def _broker_id_error(rname: str, node: str) -> str | None:
    """Kafka's refusal of a BROKER resource name other than this node's id or ``""``."""
    try:
        int(rname)
    except ValueError:
        return f"Broker id must be an integer, but it is: {rname}"
    if rname != node:
        return f"Unexpected broker id, expected {node} or empty string, but received {rname}"
    return None


def _describe_resource(
    broker: BrokerServices, rtype: int, rname: str, wanted: Any
) -> tuple[ErrorCode, str | None, list[ConfigEntry]]:
    if rtype == ResourceType.TOPIC:
        info = broker.topics.get(rname)
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"The topic '{rname}' does not exist.", []
        effective = broker.topics.effective_config(info).to_props()
        return ErrorCode.none, None, topic_entries(broker.config, info, effective, wanted)
    if rtype == ResourceType.BROKER:
        if rname == "":
            return ErrorCode.none, None, []  # the cluster-wide dynamic defaults: there are none
        refused = _broker_id_error(rname, str(broker.config.node_id))
        if refused is not None:
            return ErrorCode.invalid_request, refused, []
        return ErrorCode.none, None, broker_entries(broker.config, wanted)
    return ErrorCode.invalid_request, f"Unsupported resource type: {rtype}", []


def _describe_refusal(
    broker: BrokerServices, ctx: RequestContext, rtype: int, rname: str
) -> tuple[ErrorCode, str] | None:
    """The authorization error of describing a resource, with Kafka's message, or None."""
    if rtype == ResourceType.TOPIC and not allowed(
        broker, ctx, Operation.DESCRIBE_CONFIGS, AclResource.TOPIC, rname
    ):
        return ErrorCode.topic_authorization_failed, "Topic authorization failed."
    if rtype == ResourceType.BROKER and not cluster_allowed(
        broker, ctx, Operation.DESCRIBE_CONFIGS
    ):
        return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    return None


async def handle_describe_configs(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "DescribeConfigsResult")
    entry_cls = nested(response_type, "DescribeConfigsResourceResult")
    synonym_cls = nested(response_type, "DescribeConfigsSynonym")
    include_synonyms = getattr(request, "include_synonyms", False)
    include_docs = getattr(request, "include_documentation", False)

    def answer(e: ConfigEntry) -> Any:
        return make(
            entry_cls,
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=int(e.source),
            is_default=e.source == ConfigSource.DEFAULT_CONFIG,
            is_sensitive=e.sensitive,
            synonyms=tuple(
                make(synonym_cls, name=s.name, value=s.value, source=int(s.source))
                for s in e.synonyms
            )
            if include_synonyms
            else (),
            config_type=e.config_type,
            documentation=e.documentation if include_docs else None,
        )

    described, refused = [], []
    for resource in request.resources:
        rtype, rname = resource.resource_type, resource.resource_name
        refusal = _describe_refusal(broker, ctx, rtype, rname)
        if refusal is not None:
            error, message, entries = refusal[0], refusal[1], []
        else:
            wanted = resource.configuration_keys
            error, message, entries = _describe_resource(broker, rtype, rname, wanted)
        result = make(
            result_cls,
            error_code=error,
            error_message=message,
            resource_type=rtype,
            resource_name=rname,
            configs=tuple(answer(e) for e in entries),
        )
        # Kafka answers the resources it may describe first, the refused ones after them.
        (described if refusal is None else refused).append(result)
    return make(response_type, throttle_time=NO_THROTTLE, results=tuple(described + refused))


# -- IncrementalAlterConfigs ------------------------------------------------------------------
class _RequestError(Exception):
    """An alteration refused with INVALID_REQUEST."""


def _altered_overrides(broker: BrokerServices, info: TopicInfo, configs: Any) -> dict[str, str]:
    """The topic's overrides after the operations, validated by LogConfig.

    Raises:
        _RequestError: duplicate keys, an unknown operation, a null value to set.
        InvalidConfigError: an unknown key, an invalid value, APPEND/SUBTRACT on a non-list.
    """
    names = Counter(c.name for c in configs)
    if any(n > 1 for n in names.values()):
        raise _RequestError("Error due to duplicate config keys")
    overrides = dict(info.configs)
    effective = broker.topics.effective_config(info).to_props()
    for c in configs:
        try:
            op = AlterOp(c.config_operation)
        except ValueError:
            raise _RequestError(f"Unknown alter config operation {c.config_operation}") from None
        if c.name not in TOPIC_CONFIG:
            raise InvalidConfigError(f"Unknown topic config name: {c.name}")
        key = TOPIC_CONFIG[c.name]
        if op is AlterOp.DELETE:
            overrides.pop(c.name, None)
            continue
        if c.value is None:
            raise _RequestError(f"Null value not supported for : {c.name}")
        if op is AlterOp.SET:
            overrides[c.name] = c.value
            continue
        if key.type is not ConfigType.LIST:
            verb = "append" if op is AlterOp.APPEND else "subtract"
            raise InvalidConfigError(f"Config value {verb} is not allowed for config key: {c.name}")
        current = overrides.get(c.name, effective[c.name])
        old = [v.strip() for v in current.split(",") if v.strip()]
        given = [v.strip() for v in c.value.split(",") if v.strip()]
        if op is AlterOp.APPEND:
            new = old + [v for v in given if v not in old]
        else:
            new = [v for v in old if v not in given]
        overrides[c.name] = ",".join(dict.fromkeys(new))
    LogConfig.from_props(overrides, defaults=broker.topics.broker_defaults)
    return overrides


def _replaced_overrides(broker: BrokerServices, configs: Any) -> dict[str, str]:
    """AlterConfigs (the non-incremental one): the request's configs become the topic's
    whole set of overrides, as in Kafka; a key it does not list goes back to its default.

    Raises:
        _RequestError: duplicate keys, a null value.
        InvalidConfigError: an unknown key or an invalid value.
    """
    names = Counter(c.name for c in configs)
    if any(n > 1 for n in names.values()):
        raise _RequestError("Error due to duplicate config keys")
    nulls = [c.name for c in configs if c.value is None]
    if nulls:
        raise _RequestError(f"Null value not supported for : {', '.join(nulls)}")
    for c in configs:
        if c.name not in TOPIC_CONFIG:
            raise InvalidConfigError(f"Unknown topic config name: {c.name}")
    overrides = {c.name: c.value for c in configs}
    LogConfig.from_props(overrides, defaults=broker.topics.broker_defaults)
    return overrides


OverridesOf = Callable[[BrokerServices, TopicInfo, Any], dict[str, str]]


async def _alter_resource(
    broker: BrokerServices,
    ctx: RequestContext,
    resource: Any,
    validate_only: bool,
    overrides_of: OverridesOf,
) -> tuple[ErrorCode, str | None]:
    """Alter one resource of an (Incremental)AlterConfigs request: its error and message.

    Raises:
        _RequestError, CoreError: the resource is refused (INVALID_REQUEST, the error's code).
    """
    rtype, rname = resource.resource_type, resource.resource_name
    if rtype == ResourceType.TOPIC:
        if not allowed(broker, ctx, Operation.ALTER_CONFIGS, AclResource.TOPIC, rname):
            return ErrorCode.topic_authorization_failed, "Topic authorization failed."
        if refused_for(broker.broker_trust, ctx, rname):
            # retention.ms=1 on __remote_log_metadata would erase it, for one.
            return ErrorCode.policy_violation, protected_message(rname, "alter the configs of")
        info = broker.topics.get(rname)
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"The topic '{rname}' does not exist."
        overrides = overrides_of(broker, info, resource.configs)
        if not validate_only and overrides != dict(info.configs):
            await broker.alter_topic_configs(rname, overrides)
            log.info("topic %s configs now %s", rname, overrides)
        return ErrorCode.none, None
    if rtype == ResourceType.BROKER:
        if not cluster_allowed(broker, ctx, Operation.ALTER_CONFIGS):
            return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        node = str(broker.config.node_id)
        if rname not in ("", node):
            raise _RequestError(
                f"Unexpected broker id, expected {node} or empty string, but received {rname}"
            )
        if resource.configs:
            # Kafka refuses a key it cannot change at run time this way; tierlog has none.
            keys = ", ".join(sorted({c.name for c in resource.configs}))
            raise _RequestError(
                f"Cannot update these configs dynamically: {keys} (tierlog broker "
                "configs are static: change the properties file and restart)"
            )
        return ErrorCode.none, None  # nothing to set: no dynamic broker config to remove
    raise _RequestError(f"Unsupported resource type {rtype}: only topics (2) and brokers (4)")


async def _alter_configs(
    broker: BrokerServices, ctx: RequestContext, request: Any, overrides_of: OverridesOf
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "AlterConfigsResourceResponse")
    seen = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results = []
    for resource in request.resources:
        rtype, rname = resource.resource_type, resource.resource_name
        try:
            if seen[(rtype, rname)] > 1:
                raise _RequestError("Error due to duplicate resource")
            error, message = await _alter_resource(
                broker, ctx, resource, request.validate_only, overrides_of
            )
        except _RequestError as e:
            error, message = ErrorCode.invalid_request, str(e)
        except CoreError as e:
            error, message = error_of(e), str(e)
        results.append(
            make(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=rtype,
                resource_name=rname,
            )
        )
    return make(response_type, throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_incremental_alter_configs(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    return await _alter_configs(broker, ctx, request, _altered_overrides)


# -- AlterConfigs -----------------------------------------------------------------------------
async def handle_alter_configs(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    """The non-incremental AlterConfigs (KafkaJS and librdkafka still send it): each resource's
    configs replace its overrides whole."""
    return await _alter_configs(broker, ctx, request, lambda b, _info, c: _replaced_overrides(b, c))


# -- DeleteRecords ----------------------------------------------------------------------------
async def handle_delete_records(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "DeleteRecordsTopicResult")
    partition_cls = nested(response_type, "DeleteRecordsPartitionResult")
    loop = asyncio.get_running_loop()
    manager = broker.replica_manager
    topics = []
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            error, low = ErrorCode.none, -1
            partition = manager.partition(topic.name, p.partition_index)
            if not allowed(broker, ctx, Operation.DELETE, AclResource.TOPIC, topic.name):
                error = ErrorCode.topic_authorization_failed
            elif refused_for(broker.broker_trust, ctx, topic.name):
                error = ErrorCode.policy_violation  # whatever the ACLs say
            elif partition is None:
                error = error_code(manager.missing_partition_error((topic.name, p.partition_index)))
            elif not partition.is_leader:
                error = ErrorCode.not_leader_or_follower
            elif not partition.log.config.delete:
                # Kafka: records of a compacted-only topic cannot be deleted by offset.
                error = ErrorCode.policy_violation
            else:
                try:
                    # Moving the log start rewrites the leader-epoch checkpoint (fsync).
                    low = await loop.run_in_executor(
                        None, manager.delete_records, partition, p.offset
                    )
                except CoreError as e:
                    error = error_of(e)
                    log.debug("delete records of %s-%d: %s", topic.name, p.partition_index, e)
            results.append(
                make(
                    partition_cls,
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=error,
                )
            )
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(results)))
    return make(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))


# -- OffsetForLeaderEpoch ---------------------------------------------------------------------
async def handle_offset_for_leader_epoch(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "OffsetForLeaderTopicResult")
    partition_cls = nested(response_type, "EpochEndOffset")
    # A follower's request (replica_id >= 0, v3+) is a broker's: Kafka lets CLUSTER_ACTION
    # stand for DESCRIBE on every topic.
    from_follower = getattr(request, "replica_id", -1) >= 0
    as_broker = from_follower and cluster_action_allowed(broker, ctx)
    topics = []
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            error, epoch, end = ErrorCode.none, -1, -1
            partition = broker.replica_manager.partition(topic.topic, p.partition)
            try:
                may_describe = as_broker or (
                    not from_follower
                    and allowed(broker, ctx, Operation.DESCRIBE, AclResource.TOPIC, topic.topic)
                )
                if not may_describe:
                    error = ErrorCode.topic_authorization_failed
                elif partition is None:
                    error = error_code(
                        broker.replica_manager.missing_partition_error((topic.topic, p.partition))
                    )
                else:
                    # Answered by the leader only, for followers and consumers alike.
                    partition.check_leader()
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    plog = partition.log
                    epoch, end = plog.leader_epoch_cache.end_offset_for(
                        p.leader_epoch, plog.log_end_offset
                    )
            except CoreError as e:
                error = error_of(e)
            results.append(
                make(
                    partition_cls,
                    error_code=error,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(results)))
    return make(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))


HANDLERS: dict[int, Handler] = {
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
}

__all__ = ["HANDLERS", "AlterOp", "ConfigSource", "ResourceType"]
