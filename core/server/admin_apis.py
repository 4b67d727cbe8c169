"""Admin APIs: DeleteTopics, DescribeConfigs, IncrementalAlterConfigs, DeleteRecords and
OffsetForLeaderEpoch, with Kafka's error codes.

Config resources follow Kafka's ConfigResource types: 2 TOPIC and 4 BROKER. Topic configs
are the keys of ``core.log.config.TOPIC_CONFIG``; a value comes from the topic's override
(DYNAMIC_TOPIC_CONFIG), else from the broker key that sets its default
(STATIC_BROKER_CONFIG, e.g. ``log.segment.bytes`` for ``segment.bytes``), else from the
key's default (DEFAULT_CONFIG). Broker configs are static: described read-only, never
altered (Kafka answers INVALID_REQUEST for a broker key it cannot update dynamically).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from core.config import ConfigKey, ConfigType, format_value
from core.errors import CoreError, InvalidConfigError
from core.log.config import TOPIC_CONFIG, LogConfig
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation
from core.server.authorizer import ResourceType as AclResource
from core.server.config import BROKER_CONFIG
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


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class AlterOp(enum.IntEnum):
    """Kafka's AlterConfigOp.OpType ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# Kafka's DescribeConfigsResponse.ConfigType ids (SHORT 4 and CLASS 8 have no keys here).
CONFIG_TYPE_IDS: dict[ConfigType, int] = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
    ConfigType.PASSWORD: 9,
}
UNKNOWN_CONFIG_TYPE = 0


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
def _format(key: ConfigKey, raw: Any) -> str:
    """A stored value in Kafka's printed form (raw strings are re-parsed to normalise)."""
    try:
        return format_value(key, TOPIC_CONFIG.parse_value(key.name, raw))
    except InvalidConfigError:
        return str(raw)


# Broker keys that also set a topic key's default, most specific first (Kafka's synonyms).
_BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}

_BROKER_KEYS = {key.name: key for key in BROKER_CONFIG}

Synonym = tuple[str, str | None, int]  # name, value, ConfigSource
Entry = tuple[str, ConfigKey | None, str | None, list[Synonym]]  # name, key, value, synonyms


def _set_by_broker(broker: BrokerServices, key: ConfigKey) -> Synonym | None:
    """The broker key that sets ``key``'s default, with its value, if the broker sets one.

    Uses the config's ``originals`` (the keys given explicitly; the value in the broker
    key's own unit, as Kafka shows it).
    """
    broker_name = key.server_default_property
    if broker_name is None:
        return None
    originals = broker.config.originals
    for name in _BROKER_SYNONYMS.get(key.name, (broker_name,)):
        if name in originals:
            return name, str(originals[name]).strip(), ConfigSource.STATIC_BROKER_CONFIG
    return None


def _topic_config_entries(
    broker: BrokerServices, info: TopicInfo, wanted: set[str] | None
) -> list[Entry]:
    """One entry per topic key; synonyms in precedence order, the first is the source."""
    broker_defaults = broker.topics.broker_defaults
    out = []
    for key in TOPIC_CONFIG:
        if wanted is not None and key.name not in wanted:
            continue
        synonyms: list[Synonym] = []
        if key.name in info.configs:
            value = _format(key, info.configs[key.name])
            synonyms.append((key.name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        from_broker = _set_by_broker(broker, key)
        if from_broker is not None:
            synonyms.append(from_broker)
        default_name = key.server_default_property or key.name
        default = format_value(key, key.default)
        synonyms.append((default_name, default, ConfigSource.DEFAULT_CONFIG))
        # The value is the effective one (a broker key in hours is shown in ms here).
        value = info.configs.get(key.name, broker_defaults.get(key.name, key.default))
        out.append((key.name, key, _format(key, value), synonyms))
    return out


def _broker_config_entries(broker: BrokerServices, wanted: set[str] | None) -> list[Entry]:
    """Every broker key: read-only (nothing is dynamic), sensitive values hidden."""
    originals = broker.config.originals
    out: list[Entry] = []
    for name, value in sorted(broker.config.to_props().items()):
        if wanted is not None and name not in wanted:
            continue
        key = _BROKER_KEYS.get(name)
        text = None if value is None or _is_sensitive(name, key) else str(value)
        source = (
            ConfigSource.STATIC_BROKER_CONFIG if name in originals else ConfigSource.DEFAULT_CONFIG
        )
        out.append((name, key, text, [(name, text, source)]))
    return out


def _is_sensitive(name: str, key: ConfigKey | None) -> bool:
    if key is not None and key.type is ConfigType.PASSWORD:
        return True
    return "password" in name or "jaas.config" in name


async def handle_describe_configs(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "DescribeConfigsResult")
    entry_cls = nested(response_type, "DescribeConfigsResourceResult")
    synonym_cls = nested(response_type, "DescribeConfigsSynonym")
    include_synonyms = getattr(request, "include_synonyms", False)
    include_docs = getattr(request, "include_documentation", False)
    node = str(broker.config.node_id)
    results = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        keys = resource.configuration_keys
        wanted = set(keys) if keys is not None else None
        entries: list[Entry] = []
        rtype, rname = resource.resource_type, resource.resource_name
        if rtype == ResourceType.TOPIC:
            info = broker.topics.get(rname)
            if not allowed(broker, ctx, Operation.DESCRIBE_CONFIGS, AclResource.TOPIC, rname):
                error = ErrorCode.topic_authorization_failed
            elif info is None:
                error = ErrorCode.unknown_topic_or_partition
                message = f"The topic '{rname}' does not exist."
            else:
                entries = _topic_config_entries(broker, info, wanted)
        elif rtype == ResourceType.BROKER:
            if not cluster_allowed(broker, ctx, Operation.DESCRIBE_CONFIGS):
                error = ErrorCode.cluster_authorization_failed
            elif rname == node:
                entries = _broker_config_entries(broker, wanted)
            elif rname == "":
                entries = []  # the cluster-wide dynamic defaults: there are none
            else:
                error = ErrorCode.invalid_request
                message = f"Unexpected broker id, expected {node} or empty string, got {rname}"
        else:
            error = ErrorCode.invalid_request
            message = f"Unsupported resource type: {rtype}"
        configs = []
        for name, key, value, synonyms in entries:
            is_broker = rtype == ResourceType.BROKER
            configs.append(
                make(
                    entry_cls,
                    name=name,
                    value=value,
                    read_only=is_broker,
                    config_source=int(synonyms[0][2]),
                    is_default=synonyms[0][2] == ConfigSource.DEFAULT_CONFIG,
                    is_sensitive=is_broker and _is_sensitive(name, key),
                    synonyms=tuple(
                        make(synonym_cls, name=n, value=v, source=int(s)) for n, v, s in synonyms
                    )
                    if include_synonyms
                    else (),
                    config_type=CONFIG_TYPE_IDS.get(key.type, UNKNOWN_CONFIG_TYPE)
                    if key is not None
                    else UNKNOWN_CONFIG_TYPE,
                    documentation=(key.doc if key is not None else None) if include_docs else None,
                )
            )
        results.append(
            make(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=rtype,
                resource_name=rname,
                configs=tuple(configs),
            )
        )
    return make(response_type, throttle_time=NO_THROTTLE, results=tuple(results))


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


async def handle_incremental_alter_configs(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "AlterConfigsResourceResponse")
    node = str(broker.config.node_id)
    seen = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        rtype, rname = resource.resource_type, resource.resource_name
        try:
            if seen[(rtype, rname)] > 1:
                raise _RequestError("Error due to duplicate resource")
            if rtype == ResourceType.TOPIC:
                info = broker.topics.get(rname)
                if not allowed(broker, ctx, Operation.ALTER_CONFIGS, AclResource.TOPIC, rname):
                    error = ErrorCode.topic_authorization_failed
                elif refused_for(broker.broker_trust, ctx, rname):
                    # retention.ms=1 on __remote_log_metadata would erase it, for one.
                    error = ErrorCode.policy_violation
                    message = protected_message(rname, "alter the configs of")
                elif info is None:
                    error = ErrorCode.unknown_topic_or_partition
                    message = f"The topic '{rname}' does not exist."
                else:
                    overrides = _altered_overrides(broker, info, resource.configs)
                    if not request.validate_only and overrides != dict(info.configs):
                        await broker.alter_topic_configs(rname, overrides)
                        log.info("topic %s configs now %s", rname, overrides)
            elif rtype == ResourceType.BROKER:
                if not cluster_allowed(broker, ctx, Operation.ALTER_CONFIGS):
                    error = ErrorCode.cluster_authorization_failed
                elif rname not in ("", node):
                    raise _RequestError(
                        f"Unexpected broker id, expected {node} or empty string, "
                        f"but received {rname}"
                    )
                elif resource.configs:
                    keys = ", ".join(sorted({c.name for c in resource.configs}))
                    raise _RequestError(
                        f"Cannot update these configs dynamically: {keys} (tierlog broker "
                        "configs are static: change the properties file and restart)"
                    )
            else:
                raise _RequestError(
                    f"Unsupported resource type {rtype}: only topics (2) and brokers (4)"
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
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
}

__all__ = ["HANDLERS", "AlterOp", "ConfigSource", "ResourceType"]
