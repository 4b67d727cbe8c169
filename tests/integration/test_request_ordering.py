"""Requests pipelined on one connection are processed in order, as Kafka does.

Kafka handles one request of a connection at a time: its socket server stops reading a
connection once a request has arrived and reads the next one only when the answer has been
sent. A client may therefore pipeline a change and a read of what it changed on one
connection and rely on the read seeing the change. Each test here sends such a pipeline at
once on one raw connection (``kafka_wire``) to a real broker and checks what the reads
answered.

Some handlers apply their change before their first ``await`` (produce, offset commit,
config changes); a broker that started every request on arrival would still get a read
right behind them right, but not one behind a slower change. Those cases pipeline the
creation of their topic first: the change and the read must both wait for it.

Clients that keep several produce requests in flight on one connection (librdkafka,
idempotent or not, and kafka-python) still get every record acknowledged, in order.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_client_quotas.v1.request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kio.schema.describe_configs.v4.request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v8.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import Records, f64, i8, i16, i32, i64

from core.records.batch import iter_batches
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records
from core.server.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.kafka_clients import Rec, consume_confluent, produce_confluent
from tests.support.kafka_wire import (
    Connection,
    call,
    list_offsets_request,
    metadata_request,
    pipeline,
)

TIMEOUT = datetime.timedelta(seconds=60)
EARLIEST, LATEST = -2, -1
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_RESOURCE = i8(2)
SET = i8(0)  # IncrementalAlterConfigs' SET operation
MATCH_EXACT = i8(0)  # DescribeClientQuotas' match type for one entity name
# Enough partitions that creating them takes the broker many executor steps.
PARTITIONS = 8


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(Path(tmp_path_factory.mktemp("ordering")) / "broker")
    yield b
    if b.proc.poll() is None:
        code = b.stop()
        assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- requests ---------------------------------------------------------------------------------
def create_topics(name: str, partitions: int = PARTITIONS) -> tuple[int, int, Any]:
    topic = CreatableTopic(
        name=TopicName(name),
        num_partitions=i32(partitions),
        replication_factor=i16(1),
        assignments=(),
        configs=(),
    )
    return ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=(topic,), timeout=TIMEOUT)


def delete_topics(name: str) -> tuple[int, int, Any]:
    state = DeleteTopicState(name=TopicName(name), topic_id=uuid.UUID(int=0))
    return ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(topics=(state,), timeout=TIMEOUT)


def metadata(name: str) -> tuple[int, int, Any]:
    return ApiKey.METADATA, 12, metadata_request([name], auto_create=False)


def list_offsets(name: str, timestamp: int) -> tuple[int, int, Any]:
    return ApiKey.LIST_OFFSETS, 11, list_offsets_request(name, 0, timestamp)


def delete_records(name: str, before: int) -> tuple[int, int, Any]:
    partition = DeleteRecordsPartition(partition_index=i32(0), offset=i64(before))
    topic = DeleteRecordsTopic(name=TopicName(name), partitions=(partition,))
    return ApiKey.DELETE_RECORDS, 2, DeleteRecordsRequest(topics=(topic,), timeout=TIMEOUT)


def produce(name: str, values: Sequence[bytes], acks: int = 1) -> tuple[int, int, Any]:
    builder = RecordBatchBuilder()
    now = int(time.time() * 1000)
    for value in values:
        builder.append(value, key=None, timestamp=now)
    data = PartitionProduceData(index=i32(0), records=Records(bytes(builder.build())))
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=TIMEOUT,
        topic_data=(TopicProduceData(name=TopicName(name), partition_data=(data,)),),
    )
    return ApiKey.PRODUCE, 9, request


def fetch(name: str, offset: int) -> tuple[int, int, Any]:
    partition = FetchPartition(
        partition=i32(0),
        current_leader_epoch=i32(-1),
        fetch_offset=i64(offset),
        last_fetched_epoch=i32(-1),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(1 << 20),
    )
    request = FetchRequest(
        cluster_id=None,
        replica_id=BrokerId(-1),
        max_wait=datetime.timedelta(0),  # answer at once: this is a read, not a long poll
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(FetchTopic(topic=TopicName(name), partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    return ApiKey.FETCH, 12, request


def alter_configs(name: str, key: str, value: str) -> tuple[int, int, Any]:
    resource = AlterConfigsResource(
        resource_type=TOPIC_RESOURCE,
        resource_name=name,
        configs=(AlterableConfig(name=key, config_operation=SET, value=value),),
    )
    request = IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)
    return ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request


def describe_configs(name: str, key: str) -> tuple[int, int, Any]:
    resource = DescribeConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=name, configuration_keys=(key,)
    )
    return ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=(resource,))


def offset_commit(group: str, name: str, offset: int) -> tuple[int, int, Any]:
    partition = OffsetCommitRequestPartition(
        partition_index=i32(0), committed_offset=i64(offset), committed_metadata=""
    )
    request = OffsetCommitRequest(
        group_id=GroupId(group),
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        topics=(OffsetCommitRequestTopic(name=TopicName(name), partitions=(partition,)),),
    )
    return ApiKey.OFFSET_COMMIT, 8, request


def offset_fetch(group: str, name: str) -> tuple[int, int, Any]:
    topics = (OffsetFetchRequestTopics(name=TopicName(name), partition_indexes=(i32(0),)),)
    group_request = OffsetFetchRequestGroup(group_id=GroupId(group), topics=topics)
    return ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(groups=(group_request,))


def create_partitions(name: str, count: int) -> tuple[int, int, Any]:
    topic = CreatePartitionsTopic(name=TopicName(name), count=i32(count), assignments=None)
    request = CreatePartitionsRequest(topics=(topic,), timeout=TIMEOUT, validate_only=False)
    return ApiKey.CREATE_PARTITIONS, 3, request


def alter_client_quota(client_id: str, key: str, value: float) -> tuple[int, int, Any]:
    entry = EntryData(
        entity=(EntityData(entity_type="client-id", entity_name=client_id),),
        ops=(OpData(key=key, value=f64(value), remove=False),),
    )
    return (
        ApiKey.ALTER_CLIENT_QUOTAS,
        1,
        AlterClientQuotasRequest(entries=(entry,), validate_only=False),
    )


def describe_client_quotas(client_id: str) -> tuple[int, int, Any]:
    component = ComponentData(entity_type="client-id", match_type=MATCH_EXACT, match=client_id)
    request = DescribeClientQuotasRequest(components=(component,), strict=True)
    return ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request


# -- answers ----------------------------------------------------------------------------------
def created(response: Any) -> None:
    (topic,) = response.topics
    assert topic.error_code.value == 0, topic.error_message


def listed_offset(response: Any) -> int:
    answer = response.topics[0].partitions[0]
    assert answer.error_code.value == 0, answer.error_code
    return int(answer.offset)


def produced_at(response: Any) -> int:
    answer = response.responses[0].partition_responses[0]
    assert answer.error_code.value == 0, answer.error_code
    return int(answer.base_offset)


def fetched_values(response: Any) -> list[bytes | None]:
    part = response.responses[0].partitions[0]
    assert part.error_code.value == 0, part.error_code
    return [r.value for header in iter_batches(part.records or b"") for r in decode_records(header)]


def new_topic(broker: BrokerProcess, prefix: str, partitions: int = 1) -> str:
    name = unique(prefix)
    created(call(broker.bootstrap, *create_topics(name, partitions)))
    return name


# -- the tests --------------------------------------------------------------------------------
def test_delete_records_then_list_offsets_earliest(broker: BrokerProcess) -> None:
    name = new_topic(broker, "delete-records")
    assert produced_at(call(broker.bootstrap, *produce(name, [b"a", b"b", b"c"]))) == 0
    deleted, earliest = pipeline(
        broker.bootstrap, [delete_records(name, 2), list_offsets(name, EARLIEST)]
    )
    answer = deleted.topics[0].partitions[0]
    assert (answer.error_code.value, answer.low_watermark) == (0, 2)
    assert listed_offset(earliest) == 2


def test_create_topics_then_metadata(broker: BrokerProcess) -> None:
    name = unique("create")
    made, described = pipeline(broker.bootstrap, [create_topics(name), metadata(name)])
    created(made)
    (topic,) = described.topics
    assert topic.error_code.value == 0
    assert sorted(p.partition_index for p in topic.partitions) == list(range(PARTITIONS))
    node = described.brokers[0].node_id
    assert all((p.error_code.value, p.leader_id) == (0, node) for p in topic.partitions)


def test_delete_topics_then_metadata(broker: BrokerProcess) -> None:
    name = new_topic(broker, "delete", PARTITIONS)
    deleted, described = pipeline(broker.bootstrap, [delete_topics(name), metadata(name)])
    assert deleted.responses[0].error_code.value == 0
    (topic,) = described.topics
    assert topic.error_code.value == UNKNOWN_TOPIC_OR_PARTITION


def test_create_partitions_then_metadata(broker: BrokerProcess) -> None:
    name = new_topic(broker, "more-partitions")
    grown, described = pipeline(
        broker.bootstrap, [create_partitions(name, PARTITIONS), metadata(name)]
    )
    (result,) = grown.results
    assert result.error_code.value == 0, result.error_message
    (topic,) = described.topics
    assert sorted(p.partition_index for p in topic.partitions) == list(range(PARTITIONS))


def test_alter_client_quotas_then_describe_client_quotas(broker: BrokerProcess) -> None:
    client_id = unique("quota-client")
    altered, described = pipeline(
        broker.bootstrap,
        [
            alter_client_quota(client_id, "producer_byte_rate", 1_048_576.0),
            describe_client_quotas(client_id),
        ],
    )
    (entry,) = altered.entries
    assert entry.error_code.value == 0, entry.error_message
    assert described.error_code.value == 0, described.error_message
    assert [
        ([(e.entity_type, e.entity_name) for e in d.entity], [(v.key, v.value) for v in d.values])
        for d in described.entries or ()
    ] == [([("client-id", client_id)], [("producer_byte_rate", 1_048_576.0)])]


def test_create_topics_then_alter_configs_then_describe_configs(broker: BrokerProcess) -> None:
    name = unique("configs")
    made, altered, described = pipeline(
        broker.bootstrap,
        [
            create_topics(name),
            alter_configs(name, "retention.ms", "123456789"),
            describe_configs(name, "retention.ms"),
        ],
    )
    created(made)
    assert altered.responses[0].error_code.value == 0, altered.responses[0].error_message
    (result,) = described.results
    assert result.error_code.value == 0, result.error_message
    assert [(c.name, c.value) for c in result.configs] == [("retention.ms", "123456789")]


def test_create_topics_then_offset_commit_then_offset_fetch(broker: BrokerProcess) -> None:
    name, group = unique("commits"), unique("group")
    made, committed, fetched = pipeline(
        broker.bootstrap,
        [create_topics(name), offset_commit(group, name, 5), offset_fetch(group, name)],
    )
    created(made)
    assert committed.topics[0].partitions[0].error_code.value == 0
    answer = fetched.groups[0].topics[0].partitions[0]
    assert (answer.error_code.value, answer.committed_offset) == (0, 5)


def test_delete_topics_drops_committed_offsets_before_the_next_offset_fetch(
    broker: BrokerProcess,
) -> None:
    name, group = new_topic(broker, "commits-deleted"), unique("group")
    (committed,) = pipeline(broker.bootstrap, [offset_commit(group, name, 7)])
    assert committed.topics[0].partitions[0].error_code.value == 0
    deleted, fetched = pipeline(broker.bootstrap, [delete_topics(name), offset_fetch(group, name)])
    assert deleted.responses[0].error_code.value == 0
    # Kafka drops a deleted topic's committed offsets: none is left to fetch.
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == -1


def test_create_topics_then_produce_then_list_offsets_and_fetch(broker: BrokerProcess) -> None:
    name = unique("produce")
    made, appended, latest, read = pipeline(
        broker.bootstrap,
        [
            create_topics(name),
            produce(name, [b"one", b"two", b"three"]),
            list_offsets(name, LATEST),
            fetch(name, 0),
        ],
    )
    created(made)
    assert produced_at(appended) == 0
    assert listed_offset(latest) == 3
    assert fetched_values(read) == [b"one", b"two", b"three"]


def test_unanswered_produce_then_list_offsets(broker: BrokerProcess) -> None:
    """acks=0 produce has no answer; the request behind it still waits for its append."""
    name = unique("produce-acks0")
    requests = [
        create_topics(name),
        produce(name, [b"x", b"y"], acks=0),
        produce(name, [b"z"], acks=0),
        list_offsets(name, LATEST),
    ]
    with Connection(broker.bootstrap) as connection:
        create, _, _, listed = connection.send_all(requests)
        created(connection.receive(*requests[0][:2], create))
        assert listed_offset(connection.receive(*requests[3][:2], listed)) == 3


# -- real clients that pipeline produce requests ----------------------------------------------
PIPELINED_RECORDS = 2000


def produce_kafka_python_pipelined(bootstrap: str, topic: str, records: list[Rec]) -> list[int]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=0,
        batch_size=1024,  # small batches: many produce requests, several in flight
        max_in_flight_requests_per_connection=5,
    )
    try:
        futures = [producer.send(topic, value=r.value, key=r.key, partition=0) for r in records]
        producer.flush(60)
        return [f.get(timeout=60).offset for f in futures]
    finally:
        producer.close(timeout=10)


PIPELINING_PRODUCERS = {
    # Idempotent: librdkafka keeps up to 5 requests in flight and checks their sequence
    # numbers, so a reordering would fail the produce (OUT_OF_ORDER_SEQUENCE_NUMBER).
    "confluent-idempotent": lambda bootstrap, topic, records: produce_confluent(
        bootstrap,
        topic,
        records,
        {
            "enable.idempotence": True,
            "linger.ms": 0,
            "batch.num.messages": 10,
            "max.in.flight.requests.per.connection": 5,
        },
    ),
    "confluent-acks1": lambda bootstrap, topic, records: produce_confluent(
        bootstrap,
        topic,
        records,
        {"acks": 1, "linger.ms": 0, "batch.num.messages": 10},
    ),
    "kafka-python": produce_kafka_python_pipelined,
}


@pytest.mark.parametrize("client", list(PIPELINING_PRODUCERS))
def test_clients_that_pipeline_produce_requests_get_every_record_in_order(
    broker: BrokerProcess, client: str
) -> None:
    name = new_topic(broker, f"pipelined-{client}")
    records = [Rec(b"k%d" % i, b"v%d" % i) for i in range(PIPELINED_RECORDS)]
    offsets = PIPELINING_PRODUCERS[client](broker.bootstrap, name, records)
    assert offsets == list(range(PIPELINED_RECORDS))
    got = consume_confluent(broker.bootstrap, name)
    assert [(g.offset, g.value) for g in got] == [(i, r.value) for i, r in enumerate(records)]
