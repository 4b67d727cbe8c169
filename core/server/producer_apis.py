"""DescribeProducers: the idempotent and transactional producers a partition remembers.

Per partition, as Kafka answers it: each producer id's epoch, last sequence, last
timestamp, the coordinator epoch of its last transaction marker and the first offset of
its open transaction (-1 without one), from the partition's producer state
(``core.log.producer_state``). A topic name that is not legal is INVALID_TOPIC_EXCEPTION,
a topic the principal may not READ TOPIC_AUTHORIZATION_FAILED, an unknown topic or
partition UNKNOWN_TOPIC_OR_PARTITION, and a partition of a known topic that this broker
does not serve (yet: its creation is still opening it) NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.authorizer import Operation, ResourceType
from core.server.handler_support import NO_THROTTLE, BrokerServices, Handler, allowed
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext
from core.topic_name import InvalidTopicError, validate_topic_name


async def handle_describe_producers(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    topic_cls = nested(response_type, "TopicResponse")
    partition_cls = nested(response_type, "PartitionResponse")
    state_cls = nested(response_type, "ProducerState")
    topics = []
    for topic in request.topics:
        error, message = ErrorCode.none, None
        try:
            validate_topic_name(topic.name)
        except InvalidTopicError as e:
            error, message = ErrorCode.invalid_topic_exception, str(e)
        info = broker.topics.get(topic.name)
        if error is not ErrorCode.none:
            pass
        elif not allowed(broker, ctx, Operation.READ, ResourceType.TOPIC, topic.name):
            error = ErrorCode.topic_authorization_failed
        elif info is None:
            error = ErrorCode.unknown_topic_or_partition
        partitions = []
        for index in topic.partition_indexes:
            producers: tuple[Any, ...] = ()
            p_error = error
            if error is ErrorCode.none:
                partition = broker.replica_manager.partition(topic.name, index)
                assert info is not None
                if partition is not None:
                    producers = tuple(
                        make(
                            state_cls,
                            producer_id=e.producer_id,
                            producer_epoch=e.producer_epoch,
                            last_sequence=e.last_seq,
                            last_timestamp=e.last_timestamp,
                            coordinator_epoch=e.coordinator_epoch,
                            current_txn_start_offset=-1
                            if e.current_txn_first_offset is None
                            else e.current_txn_first_offset,
                        )
                        for e in partition.log.active_producers()
                    )
                elif 0 <= index < info.partitions:
                    p_error = ErrorCode.not_leader_or_follower
                else:
                    p_error = ErrorCode.unknown_topic_or_partition
            partitions.append(
                make(
                    partition_cls,
                    partition_index=index,
                    error_code=p_error,
                    error_message=message,
                    active_producers=producers,
                )
            )
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return make(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))


HANDLERS: dict[int, Handler] = {ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers}
