"""Transaction handlers: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions, ListTransactions.

The coordinator (``core.server.transaction_coordinator``) decides; these handlers check
ACLs as Kafka does (WRITE on the transactional id, WRITE on each topic added, READ on the
group of TxnOffsetCommit, CLUSTER_ACTION for WriteTxnMarkers, DESCRIBE on the id to
describe or list it) and shape the answers per version. Versions before KIP-588 cannot
carry PRODUCER_FENCED: they get INVALID_PRODUCER_EPOCH, as Kafka answers them.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from core.clock import now_ms
from core.errors import CoreError
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation, ResourceType
from core.server.coordinator_records import CommittedOffset, partition_for
from core.server.handler_support import (
    NO_THROTTLE,
    BrokerServices,
    Handler,
    allowed,
    cluster_allowed,
    error_code,
)
from core.server.internal_topics import TRANSACTION_STATE_TOPIC
from core.server.kio_build import make, nested
from core.server.offsets_topic import OFFSETS_TOPIC
from core.server.protocol import RequestContext
from core.server.transaction_coordinator import INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
from core.server.transaction_log import TransactionState
from core.server.transaction_marker_channel import TxnMarker, write_replicated_markers
from core.server.zookeeper.errors import ZkError

log = logging.getLogger(__name__)

MAX_PRODUCER_EPOCH = 32767
# The first version of each api that may answer PRODUCER_FENCED (KIP-588).
PRODUCER_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}
EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
FENCED_INSTANCE_ID = 82
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
NOT_LEADER_OR_FOLLOWER = 6
KAFKA_STORAGE_ERROR = 56
# UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND)
RETRIABLE_OFFSETS_WRITE_ERRORS = frozenset({3, 7, 19, 20})


def _for_version(ctx: RequestContext, code: int) -> ErrorCode:
    if code == PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_SINCE.get(ctx.api_key, 0):
        code = INVALID_PRODUCER_EPOCH
    return error_code(code)


def _may_write_txn(broker: BrokerServices, ctx: RequestContext, txn_id: str) -> bool:
    return allowed(broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)


# -- InitProducerId ---------------------------------------------------------------------------
async def handle_init_producer_id(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)

    def answer(error: Any, pid: int = -1, epoch: int = -1) -> Any:
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=error,
            producer_id=pid,
            producer_epoch=epoch,
        )

    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    txn_id = request.transactional_id
    if txn_id is not None:
        if txn_id and not _may_write_txn(broker, ctx, txn_id):
            return answer(ErrorCode.transactional_id_authorization_failed)
        timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
        code, new_pid, new_epoch = await broker.transaction_coordinator.init_producer_id(
            txn_id, timeout_ms, pid, epoch
        )
        return answer(_for_version(ctx, code), new_pid, new_epoch)
    if not (
        cluster_allowed(broker, ctx, Operation.IDEMPOTENT_WRITE)
        or any(
            allowed(broker, ctx, Operation.WRITE, ResourceType.TOPIC, t.name)
            for t in broker.topics.all()
        )
    ):
        # KIP-679: an idempotent producer needs IDEMPOTENT_WRITE or WRITE on some topic.
        return answer(ErrorCode.cluster_authorization_failed)
    if pid >= 0 and 0 <= epoch < MAX_PRODUCER_EPOCH:
        # KIP-360: an idempotent producer re-initialising keeps its id with a new epoch.
        return answer(ErrorCode.none, pid, epoch + 1)
    try:
        new_pid = await broker.allocate_producer_id()
    except (CoreError, ZkError) as e:
        # Kafka answers a failed block allocation with COORDINATOR_NOT_AVAILABLE: retry.
        log.warning("cannot allocate a producer id: %s", e)
        return answer(ErrorCode.coordinator_not_available)
    return answer(ErrorCode.none, new_pid, 0)


# -- AddPartitionsToTxn -----------------------------------------------------------------------
async def _add_one(
    broker: BrokerServices,
    ctx: RequestContext,
    txn_id: str,
    pid: int,
    epoch: int,
    topics: Any,
    verify_only: bool,
) -> dict[tuple[str, int], int]:
    """Error code per partition of one transaction of the request."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    coordinator = broker.transaction_coordinator
    if verify_only:
        return coordinator.verify(txn_id, pid, epoch, wanted)
    if not _may_write_txn(broker, ctx, txn_id):
        return dict.fromkeys(wanted, int(ErrorCode.transactional_id_authorization_failed))
    refused: dict[tuple[str, int], int] = {}
    for topic, index in wanted:
        info = broker.topics.get(topic)
        if not allowed(broker, ctx, Operation.WRITE, ResourceType.TOPIC, topic):
            refused[(topic, index)] = int(ErrorCode.topic_authorization_failed)
        elif info is None or not 0 <= index < info.partitions:
            refused[(topic, index)] = int(ErrorCode.unknown_topic_or_partition)
        elif topic == TRANSACTION_STATE_TOPIC:
            refused[(topic, index)] = int(ErrorCode.topic_authorization_failed)
    if refused:
        # Kafka adds none when one is refused: the others are OPERATION_NOT_ATTEMPTED.
        not_attempted = int(ErrorCode.operation_not_attempted)
        return {tp: refused.get(tp, not_attempted) for tp in wanted}
    code = await coordinator.add_partitions(txn_id, pid, epoch, wanted)
    return dict.fromkeys(wanted, code)


def _by_topic(results: dict[tuple[str, int], int]) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for (topic, index), code in results.items():
        out.setdefault(topic, []).append((index, code))
    return out


async def handle_add_partitions_to_txn(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "AddPartitionsToTxnTopicResult")
    partition_cls = nested(response_type, "AddPartitionsToTxnPartitionResult")

    def topic_results(results: dict[tuple[str, int], int]) -> tuple[Any, ...]:
        return tuple(
            make(
                topic_cls,
                name=topic,
                results_by_partition=tuple(
                    make(
                        partition_cls, partition_index=i, partition_error_code=_for_version(ctx, c)
                    )
                    for i, c in parts
                ),
            )
            for topic, parts in _by_topic(results).items()
        )

    if ctx.api_version <= 3:
        results = await _add_one(
            broker,
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            results_by_topic_v3_and_below=topic_results(results),
        )
    # v4+: batched, sent by brokers (KIP-890): verification needs CLUSTER_ACTION.
    result_cls = nested(response_type, "AddPartitionsToTxnResult")
    if not cluster_allowed(broker, ctx, Operation.CLUSTER_ACTION):
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    answers = await asyncio.gather(
        *(
            _add_one(
                broker,
                ctx,
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                t.topics,
                verify_only=t.verify_only,
            )
            for t in request.transactions
        )
    )
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(
            make(result_cls, transactional_id=t.transactional_id, topic_results=topic_results(r))
            for t, r in zip(request.transactions, answers, strict=True)
        ),
    )


# -- AddOffsetsToTxn --------------------------------------------------------------------------
async def handle_add_offsets_to_txn(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    if not _may_write_txn(broker, ctx, request.transactional_id):
        code: Any = ErrorCode.transactional_id_authorization_failed
    elif not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        code = ErrorCode.group_authorization_failed
    else:
        offsets = broker.topics.get(OFFSETS_TOPIC)
        assert offsets is not None
        tp = (OFFSETS_TOPIC, partition_for(request.group_id, offsets.partitions))
        code = _for_version(
            ctx,
            await broker.transaction_coordinator.add_partitions(
                request.transactional_id, request.producer_id, request.producer_epoch, [tp]
            ),
        )
    return make(response_type, throttle_time=NO_THROTTLE, error_code=code)


# -- EndTxn -----------------------------------------------------------------------------------
async def handle_end_txn(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    if not _may_write_txn(broker, ctx, request.transactional_id):
        code: Any = ErrorCode.transactional_id_authorization_failed
    else:
        code = _for_version(
            ctx,
            await broker.transaction_coordinator.end_txn(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
            ),
        )
    return make(response_type, throttle_time=NO_THROTTLE, error_code=code)


# -- TxnOffsetCommit --------------------------------------------------------------------------
def _txn_commit_error(broker: BrokerServices, request: Any) -> int:
    """KIP-447: the producer's consumer-group metadata must still be current."""
    group = broker.group_coordinator.groups.get(request.group_id)
    member_id = getattr(request, "member_id", "") or ""
    generation = getattr(request, "generation_id", -1)
    instance_id = getattr(request, "group_instance_id", None)
    if group is None or not group.members:
        return UNKNOWN_MEMBER_ID if member_id or generation >= 0 else 0
    if member_id and member_id not in group.members:
        return UNKNOWN_MEMBER_ID
    if instance_id is not None and group.static.get(instance_id, member_id) != member_id:
        return FENCED_INSTANCE_ID
    if generation >= 0 and generation != group.generation:
        return ILLEGAL_GENERATION
    return 0


async def _offsets_replicated(broker: BrokerServices, index: int, end: int) -> int:
    """Wait until the in-sync replicas of ``__consumer_offsets`` partition ``index`` have
    everything up to ``end`` (``offsets.commit.timeout.ms``); returns the error code to
    answer (0: replicated), mapped as Kafka's coordinator maps write errors."""
    partition = broker.replica_manager.partition(OFFSETS_TOPIC, index)
    if partition is None:
        return NOT_COORDINATOR
    if end < 0:
        return 0
    timeout_ms = broker.config.get("offsets.commit.timeout.ms")
    code = await broker.replica_manager.wait_replicated(partition, end, timeout_ms)
    if code == 0:
        return 0
    log.warning(
        "transactional offsets in %s-%d not replicated (error %d)", OFFSETS_TOPIC, index, code
    )
    return _offsets_write_error(code)


def _offsets_write_error(code: int) -> int:
    """What a failed write to ``__consumer_offsets`` is answered with (Kafka's
    GroupMetadataManager): the producer finds the coordinator again, or retries."""
    if code in (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR):
        return NOT_COORDINATOR
    if code in RETRIABLE_OFFSETS_WRITE_ERRORS:
        return COORDINATOR_NOT_AVAILABLE
    return code  # e.g. INVALID_PRODUCER_EPOCH: the producer's own


async def handle_txn_offset_commit(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "TxnOffsetCommitResponseTopic")
    partition_cls = nested(response_type, "TxnOffsetCommitResponsePartition")
    txn_id, group = request.transactional_id, request.group_id
    pid, epoch = request.producer_id, request.producer_epoch
    offsets_info = broker.topics.get(OFFSETS_TOPIC)
    group_tp = (OFFSETS_TOPIC, partition_for(group, offsets_info.partitions if offsets_info else 1))
    code: int
    if not _may_write_txn(broker, ctx, txn_id):
        code = int(ErrorCode.transactional_id_authorization_failed)
    elif not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, group):
        code = int(ErrorCode.group_authorization_failed)
    elif offsets_info is None:
        code = COORDINATOR_NOT_AVAILABLE  # __consumer_offsets is not there yet
    elif status := broker.group_coordinator.status(group).value:
        # In a cluster, only the leader of the group's partition coordinates it (Kafka
        # checks the group's status first: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
        code = int(status)
    else:
        # KIP-890: the group's offsets partition must be in the producer's transaction
        # (AddOffsetsToTxn first), or the commit would hang outside any transaction.
        code = broker.transaction_coordinator.verify(txn_id, pid, epoch, [group_tp])[group_tp]
        if not code:
            code = _txn_commit_error(broker, request)
    now = now_ms()
    offsets: dict[tuple[str, int], CommittedOffset] = {}
    layout: list[tuple[str, list[tuple[int, int]]]] = []
    for topic in request.topics:
        info = broker.topics.get(topic.name)
        rows = []
        for p in topic.partitions:
            if code:
                error = code
            elif not allowed(broker, ctx, Operation.READ, ResourceType.TOPIC, topic.name):
                error = int(ErrorCode.topic_authorization_failed)
            elif info is None or not 0 <= p.partition_index < info.partitions:
                error = int(ErrorCode.unknown_topic_or_partition)
            else:
                error = 0
                offsets[(topic.name, p.partition_index)] = CommittedOffset(
                    offset=p.committed_offset,
                    leader_epoch=getattr(p, "committed_leader_epoch", -1),
                    metadata=p.committed_metadata or "",
                    commit_timestamp_ms=now,
                )
            rows.append((p.partition_index, error))
        layout.append((topic.name, rows))
    if offsets:
        store = broker.group_offsets
        try:
            index = store.txn_commit(pid, epoch, group, offsets)
            if index is not None and store.journal is not None:
                journal = store.journal
                await asyncio.get_running_loop().run_in_executor(None, journal.sync, [index])
                # Kafka's coordinator writes with acks=all: answer once the ISR has it.
                replicated = await _offsets_replicated(broker, index, store.appended_end(index))
                if replicated:
                    layout = [(t, [(i, replicated) for i, _ in rows]) for t, rows in layout]
        except (CoreError, LookupError) as e:
            log.info("TxnOffsetCommit of %s for group %s failed: %s", txn_id, group, e)
            failed = _offsets_write_error(e.error_code if isinstance(e, CoreError) else 6)
            layout = [(t, [(i, failed) for i, _ in rows]) for t, rows in layout]
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            make(
                topic_cls,
                name=t,
                partitions=tuple(
                    make(partition_cls, partition_index=i, error_code=_for_version(ctx, c))
                    for i, c in rows
                ),
            )
            for t, rows in layout
        ),
    )


# -- WriteTxnMarkers --------------------------------------------------------------------------
async def handle_write_txn_markers(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "WritableTxnMarkerResult")
    topic_cls = nested(response_type, "WritableTxnMarkerTopicResult")
    partition_cls = nested(response_type, "WritableTxnMarkerPartitionResult")
    may = cluster_allowed(broker, ctx, Operation.CLUSTER_ACTION) and broker.broker_trust.admits(ctx)
    results = []
    for m in request.markers:
        tps = frozenset((t.name, i) for t in m.topics for i in t.partition_indexes)
        if not may:
            codes = dict.fromkeys(tps, int(ErrorCode.cluster_authorization_failed))
        else:
            marker = TxnMarker(
                m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result, tps
            )
            codes = await write_replicated_markers(
                broker.replica_manager,
                marker,
                on_written=broker.on_marker_written,
                exists=lambda t, i: (
                    (info := broker.topics.get(t)) is not None and 0 <= i < info.partitions
                ),
            )
        results.append(
            make(
                result_cls,
                producer_id=m.producer_id,
                topics=tuple(
                    make(
                        topic_cls,
                        name=t,
                        partitions=tuple(
                            make(partition_cls, partition_index=i, error_code=error_code(c))
                            for i, c in parts
                        ),
                    )
                    for t, parts in _by_topic(codes).items()
                ),
            )
        )
    return make(response_type, markers=tuple(results))


# -- DescribeTransactions / ListTransactions --------------------------------------------------
async def handle_describe_transactions(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    state_cls = nested(response_type, "TransactionState")
    topic_cls = nested(response_type, "TopicData")
    out = []
    for txn_id in request.transactional_ids:
        meta = None
        if not allowed(broker, ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            code = int(ErrorCode.transactional_id_authorization_failed)
        else:
            code, meta = broker.transaction_coordinator.describe(txn_id)
        topics: dict[str, list[int]] = {}
        if meta is not None:
            for topic, index in sorted(meta.partitions):
                if allowed(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic):
                    topics.setdefault(topic, []).append(index)
        out.append(
            make(
                state_cls,
                error_code=error_code(code),
                transactional_id=txn_id,
                transaction_state=meta.state.kafka_name if meta else "",
                transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms if meta else 0),
                # -1 (Kafka's "no transaction") is 1 ms before the epoch.
                transaction_start_time=EPOCH
                + datetime.timedelta(milliseconds=meta.start_ms if meta else -1),
                producer_id=meta.producer_id if meta else -1,
                producer_epoch=meta.producer_epoch if meta else -1,
                topics=tuple(
                    make(topic_cls, topic=t, partitions=tuple(p)) for t, p in topics.items()
                ),
            )
        )
    return make(response_type, throttle_time=NO_THROTTLE, transaction_states=tuple(out))


async def handle_list_transactions(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    state_cls = nested(response_type, "TransactionState")
    states, unknown = set(), []
    for name in request.state_filters:
        state = TransactionState.from_kafka_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.add(state)
    listings = []
    if not unknown or states:
        listings = broker.transaction_coordinator.list_transactions(
            states or None,
            set(request.producer_id_filters) or None,
            getattr(request, "duration_filter", -1),
        )
    if unknown and not states:
        listings = []
    return make(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            make(
                state_cls,
                transactional_id=x.transactional_id,
                producer_id=x.producer_id,
                transaction_state=x.state.kafka_name,
            )
            for x in listings
            if allowed(
                broker, ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, x.transactional_id
            )
        ),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
}
