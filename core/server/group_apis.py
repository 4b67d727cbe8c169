"""FindCoordinator, OffsetCommit, OffsetFetch, OffsetDelete (membership APIs:
``membership_apis``).

This broker is the coordinator of every group. A commit is validated as Kafka validates it:
against the group's members and generation when the group has members
(``GroupCoordinator.validate_commit``), else as a "simple" group's (generation -1 accepted;
a generation >= 0 answered ILLEGAL_GENERATION, GROUP_ID_NOT_FOUND from OffsetCommit v9 for
an unknown group, UNKNOWN_MEMBER_ID for a known one). Offsets live in
:class:`core.server.group_offsets.GroupOffsetStore`, journaled in ``__consumer_offsets``; a
commit is answered once its records are appended and fsynced (NOT_COORDINATOR if that
failed, as Kafka answers a failed write to the offsets topic).

OffsetDelete (DELETE on the group, READ on each topic) drops committed offsets with
tombstones in ``__consumer_offsets``, as Kafka's coordinator does: an unknown group is
GROUP_ID_NOT_FOUND; a group without members loses the offsets asked for; a ``consumer``
group with members keeps those of the topics its members subscribe to
(GROUP_SUBSCRIBED_TO_TOPIC) and loses the others; a group of another protocol type with
members is NON_EMPTY_GROUP.

Transactions have no coordinator yet: FindCoordinator for key type 1 answers
COORDINATOR_NOT_AVAILABLE with a message saying so.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from core.clock import now_ms
from core.errors import CoreError
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation, ResourceType
from core.server.coordinator_records import partition_for
from core.server.group_coordinator import GroupCoordinator, GroupError
from core.server.group_offsets import CommittedOffset, GroupOffsetStore, TopicPartition
from core.server.handler_support import (
    NO_THROTTLE,
    BrokerServices,
    Handler,
    allowed,
    live_brokers,
)
from core.server.internal_topics import TRANSACTION_STATE_TOPIC
from core.server.kio_build import make, nested
from core.server.offsets_topic import OFFSETS_TOPIC
from core.server.protocol import RequestContext

log = logging.getLogger(__name__)

# Kafka's CoordinatorType ids.
COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1
# Kafka's default offset.metadata.max.bytes (not configurable in tierlog); Kafka compares
# the string's length.
OFFSET_METADATA_MAX_BYTES = 4096


async def flush_offsets(store: GroupOffsetStore, version: int) -> None:
    """``store.flush(version)`` on an executor thread (it appends and fsyncs)."""
    await asyncio.get_running_loop().run_in_executor(None, store.flush, version)


def _write_error(code: int) -> ErrorCode:
    """What a failed write to ``__consumer_offsets`` is answered with (Kafka's
    GroupMetadataManager): the client retries after finding the coordinator again."""
    if code == 0:
        return ErrorCode.none
    if code in (6, 56):  # NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR
        return ErrorCode.not_coordinator
    # UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), ...
    return ErrorCode.coordinator_not_available


async def store_replicated(
    broker: BrokerServices, store: GroupOffsetStore, version: int, group_id: str
) -> ErrorCode:
    """Write the store up to ``version`` (append and fsync), then wait until the group's
    partition's in-sync replicas have it (acks=all, ``offsets.commit.timeout.ms``)."""
    try:
        await flush_offsets(store, version)
    except (OSError, CoreError, LookupError) as e:
        log.error("cannot persist offsets of group %s: %s", group_id, e)
        return _write_error(e.error_code if isinstance(e, CoreError) else 6)
    if store.journal is None:
        return ErrorCode.none
    index = store.partition_for(group_id)
    end = store.appended_end(index)
    partition = broker.replica_manager.partition(OFFSETS_TOPIC, index)
    if partition is None:
        return ErrorCode.not_coordinator
    if end < 0:
        return ErrorCode.none
    timeout_ms = broker.config.get("offsets.commit.timeout.ms")
    code = await broker.replica_manager.wait_replicated(partition, end, timeout_ms)
    if code:
        log.warning(
            "offsets of group %s not replicated (error %d within offsets.commit.timeout.ms=%d)",
            group_id,
            code,
            timeout_ms,
        )
    return _write_error(code)


# -- FindCoordinator --------------------------------------------------------------------------
def _coordinator(
    broker: BrokerServices, ctx: RequestContext, topic: str, key: str
) -> dict[str, Any]:
    """The leader of the key's partition of ``topic`` (``__consumer_offsets`` for a group,
    ``__transaction_state`` for a transactional id), reachable on the request's listener;
    COORDINATOR_NOT_AVAILABLE while there is none (the topic is being created, or the
    partition has no live leader)."""
    snapshot = broker.metadata_cache.snapshot()
    partitions = snapshot.partitions_of(topic)
    unavailable = {
        "error_code": ErrorCode.coordinator_not_available,
        "error_message": None,
        "node_id": -1,
        "host": "",
        "port": -1,
    }
    if not partitions:
        return unavailable
    state = partitions[partition_for(key, len(partitions))]
    for node_id, host, port, _ in live_brokers(broker, ctx.listener, snapshot):
        if node_id == state.leader:
            return {
                "error_code": ErrorCode.none,
                "error_message": None,
                "node_id": node_id,
                "host": host,
                "port": port,
            }
    return unavailable


async def handle_find_coordinator(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    key_type = getattr(request, "key_type", COORDINATOR_GROUP)
    if key_type == COORDINATOR_GROUP and not broker.metadata_cache.contains_topic(OFFSETS_TOPIC):
        # Kafka creates __consumer_offsets when a group first asks for its coordinator.
        await broker.ensure_offsets_topic()
    if key_type == COORDINATOR_TRANSACTION and not broker.metadata_cache.contains_topic(
        TRANSACTION_STATE_TOPIC
    ):
        # ... and __transaction_state when a transactional producer first asks for its own.
        await broker.ensure_transaction_state_topic()

    def answer(key: str) -> dict[str, Any]:
        if key_type == COORDINATOR_GROUP and not allowed(
            broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, key
        ):
            error, message = ErrorCode.group_authorization_failed, None
            return {
                "error_code": error,
                "error_message": message,
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        if key_type == COORDINATOR_GROUP:
            return _coordinator(broker, ctx, OFFSETS_TOPIC, key)
        if key_type == COORDINATOR_TRANSACTION:
            if not allowed(broker, ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
                error, message = ErrorCode.transactional_id_authorization_failed, None
            else:
                return _coordinator(broker, ctx, TRANSACTION_STATE_TOPIC, key)
        else:
            error, message = ErrorCode.invalid_request, f"Unknown coordinator type: {key_type}"
        return {
            "error_code": error,
            "error_message": message,
            "node_id": -1,
            "host": "",
            "port": -1,
        }

    if ctx.api_version < 4:
        return make(response_type, throttle_time=NO_THROTTLE, **answer(request.key))
    coordinator_cls = nested(response_type, "Coordinator")
    coordinators = tuple(
        make(coordinator_cls, key=key, **answer(key)) for key in request.coordinator_keys
    )
    return make(response_type, throttle_time=NO_THROTTLE, coordinators=coordinators)


# -- OffsetCommit -----------------------------------------------------------------------------
def _commit_error(
    broker: BrokerServices, store: GroupOffsetStore, request: Any, version: int
) -> ErrorCode:
    """Kafka's validation of a commit: against the group's members and generation when the
    coordinator knows the group, else as for a group that never had members."""
    generation = request.generation_id_or_member_epoch
    coordinator = broker.group_coordinator
    group = coordinator.groups.get(request.group_id)
    if group is not None and group.members:
        error = coordinator.validate_commit(
            request.group_id, generation, getattr(request, "member_id", "")
        )
        return ErrorCode(error.value)
    if generation < 0:
        return ErrorCode.none  # a simple commit: accepted whatever the member id
    if store.has_group(request.group_id):
        return ErrorCode.unknown_member_id  # an empty simple group has no such member
    return ErrorCode.group_id_not_found if version >= 9 else ErrorCode.illegal_generation


async def handle_offset_commit(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    # The in-memory commit happens before the first await: it stays even if the client
    # goes away while the commit is persisted (the network layer cancels the wait).
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "OffsetCommitResponseTopic")
    partition_cls = nested(response_type, "OffsetCommitResponsePartition")
    store = broker.group_offsets
    status = broker.group_coordinator.status(request.group_id)
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        group_error = ErrorCode.group_authorization_failed
    elif status is not GroupError.NONE:
        group_error = ErrorCode(status.value)
    else:
        group_error = _commit_error(broker, store, request, ctx.api_version)
    timestamp = now_ms()
    pending: dict[TopicPartition, CommittedOffset] = {}
    layout: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
    cache = broker.metadata_cache.snapshot()
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            metadata = p.committed_metadata
            if group_error is ErrorCode.group_authorization_failed:
                error = group_error
            elif not allowed(broker, ctx, Operation.READ, ResourceType.TOPIC, topic.name):
                error = ErrorCode.topic_authorization_failed
            elif cache.partition((topic.name, p.partition_index)) is None:
                error = ErrorCode.unknown_topic_or_partition
            elif group_error is not ErrorCode.none:
                error = group_error
            elif metadata is not None and len(metadata) > OFFSET_METADATA_MAX_BYTES:
                error = ErrorCode.offset_metadata_too_large
            else:
                error = ErrorCode.none
                pending[(topic.name, p.partition_index)] = CommittedOffset(
                    offset=p.committed_offset,
                    leader_epoch=max(getattr(p, "committed_leader_epoch", -1), -1),
                    metadata=metadata or "",
                    commit_timestamp_ms=timestamp,
                )
            results.append((p.partition_index, error))
        layout.append((topic.name, results))
    if pending:
        version = store.commit(request.group_id, pending)
        failed = await store_replicated(broker, store, version, request.group_id)
        if failed is not ErrorCode.none:
            layout = [
                (name, [(i, failed if err is ErrorCode.none else err) for i, err in results])
                for name, results in layout
            ]
    topics = tuple(
        make(
            topic_cls,
            name=name,
            partitions=tuple(
                make(partition_cls, partition_index=i, error_code=err) for i, err in results
            ),
        )
        for name, results in layout
    )
    return make(response_type, throttle_time=NO_THROTTLE, topics=topics)


# -- OffsetFetch ------------------------------------------------------------------------------
def _fetch_group(
    store: GroupOffsetStore, group: str, topics: Any
) -> list[tuple[str, list[tuple[int, CommittedOffset | None]]]]:
    """Committed offsets per requested topic, or every committed partition (topics=None)."""
    if topics is None:
        out: dict[str, list[tuple[int, CommittedOffset | None]]] = {}
        for (topic, partition), committed in store.group_offsets(group).items():
            out.setdefault(topic, []).append((partition, committed))
        return list(out.items())
    result = []
    for topic in topics:
        found = store.fetch_many(group, [(topic.name, i) for i in topic.partition_indexes])
        result.append((topic.name, [(tp[1], c) for tp, c in found.items()]))
    return result


async def handle_offset_fetch(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    store = broker.group_offsets
    multi = ctx.api_version >= 8
    suffix = "s" if multi else ""  # v8+ names its nested classes in the plural
    topic_cls = nested(response_type, f"OffsetFetchResponseTopic{suffix}")
    partition_cls = nested(response_type, f"OffsetFetchResponsePartition{suffix}")
    # require_stable (v7+): a partition with a transactional commit not yet completed
    # answers UNSTABLE_OFFSET_COMMIT (the consumer retries), as Kafka does, so that a
    # read_committed consumer never starts from an offset its transaction may still undo.
    require_stable = bool(getattr(request, "require_stable", False))

    def unstable(group: str, topic: str, index: int) -> bool:
        return require_stable and store.has_pending_txn_offsets(group, (topic, index))

    def may_describe(topic: str) -> bool:
        return allowed(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic)

    def group_denied(group: str) -> bool:
        return not allowed(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, group)

    def group_error(group: str) -> ErrorCode:
        if group_denied(group):
            return ErrorCode.group_authorization_failed
        return ErrorCode(broker.group_coordinator.status(group).value)

    def topics_of(group: str, topics: Any) -> tuple[Any, ...]:
        error = group_error(group)
        if error is not ErrorCode.none:
            if ctx.api_version >= 2 or error is ErrorCode.group_authorization_failed:
                return ()  # the group's error says it all
            # v1 has no group error: each partition asked for carries it.
            return tuple(
                make(
                    topic_cls,
                    name=t.name,
                    partitions=tuple(
                        make(
                            partition_cls,
                            partition_index=index,
                            committed_offset=-1,
                            committed_leader_epoch=-1,
                            metadata="",
                            error_code=error,
                        )
                        for index in t.partition_indexes
                    ),
                )
                for t in topics or ()
            )
        return tuple(
            make(
                topic_cls,
                name=name,
                partitions=tuple(
                    make(
                        partition_cls,
                        partition_index=index,
                        committed_offset=c.offset if c is not None else -1,
                        committed_leader_epoch=c.leader_epoch if c is not None else -1,
                        metadata=c.metadata if c is not None else "",
                        error_code=ErrorCode.topic_authorization_failed
                        if not may_describe(name)
                        else ErrorCode.unstable_offset_commit
                        if unstable(group, name, index)
                        else ErrorCode.none,
                    )
                    for index, c in partitions
                    if topics is not None or may_describe(name)
                ),
            )
            for name, partitions in _fetch_group(store, group, topics)
            if topics is not None or may_describe(name)
        )

    if not multi:
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            topics=topics_of(request.group_id, request.topics),
            error_code=group_error(request.group_id),
        )
    group_cls = nested(response_type, "OffsetFetchResponseGroup")
    groups = tuple(
        make(
            group_cls,
            group_id=g.group_id,
            topics=topics_of(g.group_id, g.topics),
            error_code=group_error(g.group_id),
        )
        for g in request.groups
    )
    return make(response_type, throttle_time=NO_THROTTLE, groups=groups)


# -- OffsetDelete -----------------------------------------------------------------------------
def _offset_delete_group_error(
    broker: BrokerServices, group_id: str
) -> tuple[ErrorCode, set[str] | None]:
    """Kafka's GroupCoordinator.handleDeleteOffsets: the group's error, and the topics whose
    offsets stay because live members subscribe to them (None: no member)."""
    group = broker.group_coordinator.groups.get(group_id)
    if group is None or not group.members:
        known = group is not None or broker.group_offsets.has_group(group_id)
        return (ErrorCode.none if known else ErrorCode.group_id_not_found), None
    if group.protocol_type != "consumer":
        return ErrorCode.non_empty_group, None
    return ErrorCode.none, GroupCoordinator.subscribed_topics(group) or set()


async def handle_offset_delete(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    # The in-memory deletion happens before the first await, as a commit does.
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "OffsetDeleteResponseTopic")
    partition_cls = nested(response_type, "OffsetDeleteResponsePartition")
    group_id = request.group_id

    def answer(error: ErrorCode, topics: tuple[Any, ...] = ()) -> Any:
        return make(response_type, throttle_time=NO_THROTTLE, error_code=error, topics=topics)

    if not allowed(broker, ctx, Operation.DELETE, ResourceType.GROUP, group_id):
        return answer(ErrorCode.group_authorization_failed)
    group_error, subscribed = _offset_delete_group_error(broker, group_id)
    if group_error is not ErrorCode.none:
        return answer(group_error)
    layout: dict[str, dict[int, ErrorCode]] = {}
    doomed: list[TopicPartition] = []
    for topic in request.topics:
        info = broker.topics.get(topic.name)
        may_read = allowed(broker, ctx, Operation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            index = p.partition_index
            if not may_read:
                error = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= index < info.partitions:
                error = ErrorCode.unknown_topic_or_partition
            elif subscribed is not None and topic.name in subscribed:
                error = ErrorCode.group_subscribed_to_topic
            else:
                error = ErrorCode.none
                doomed.append((topic.name, index))
            layout.setdefault(topic.name, {})[index] = error
    if doomed:
        store = broker.group_offsets
        version = store.delete_offsets(group_id, doomed)
        log.info("deleted the committed offsets of group %s for %s", group_id, doomed)
        try:
            await flush_offsets(store, version)
        except (OSError, CoreError) as e:
            # Kafka answers a failed write to __consumer_offsets with NOT_COORDINATOR.
            log.error("cannot persist the offset deletion of group %s: %s", group_id, e)
            return answer(ErrorCode.not_coordinator)
    topics = tuple(
        make(
            topic_cls,
            name=name,
            partitions=tuple(
                make(partition_cls, partition_index=i, error_code=e) for i, e in errors.items()
            ),
        )
        for name, errors in layout.items()
    )
    return answer(ErrorCode.none, topics)


HANDLERS: dict[int, Handler] = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
}
