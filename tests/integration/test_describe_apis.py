"""DescribeLogDirs, DescribeProducers and OffsetDelete through kafka-python's admin client,
DescribeCluster through confluent-kafka's: what the clients report of a real broker."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupIdNotFoundError

from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.waiting import wait_until

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(
        tmp_path_factory.mktemp("describe") / "broker", {"group.initial.rebalance.delay.ms": "0"}
    )
    yield b
    if b.proc.poll() is None:
        assert b.stop() == 0, b.log_tail()


@pytest.fixture(scope="module")
def kafka_python(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    client.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT_S)


def produce(broker: BrokerProcess, topic: str, partition: int, count: int, **config) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, **config})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def test_describe_log_dirs_reports_each_partitions_size(broker, kafka_python) -> None:
    create_topic(broker, "sized", 2)
    produce(broker, "sized", 1, 50)
    data_dir = broker.settings["log.dirs"]
    on_disk = sum(
        os.path.getsize(os.path.join(data_dir, "sized-1", f))
        for f in os.listdir(os.path.join(data_dir, "sized-1"))
        if f.endswith(".log")
    )
    ((answer,),) = [b["log_dirs"] for b in kafka_python.describe_log_dirs({"sized": [0, 1]})]
    assert (answer["error_code"], answer["log_dir"]) == (0, os.path.abspath(data_dir))
    assert answer["total_bytes"] >= answer["usable_bytes"] > 0
    ((topic,),) = [answer["topics"]]
    assert topic["name"] == "sized"
    sizes = {
        p["partition_index"]: (p["partition_size"], p["offset_lag"]) for p in topic["partitions"]
    }
    assert sizes == {0: (0, 0), 1: (on_disk, 0)}
    assert on_disk > 0


def test_describe_producers_shows_an_idempotent_producer(broker, kafka_python) -> None:
    create_topic(broker, "idempotent", 1)
    produce(broker, "idempotent", 0, 7, **{"enable.idempotence": True})
    states = kafka_python.describe_producers([TopicPartition("idempotent", 0)])
    (producer,) = states[TopicPartition("idempotent", 0)].active_producers
    assert producer.producer_id >= 0 and producer.producer_epoch == 0
    assert producer.last_sequence == 6  # 7 records, sequences 0..6
    assert producer.last_timestamp > 0
    assert (producer.coordinator_epoch, producer.current_transaction_start_offset) == (-1, -1)


def committed(broker: BrokerProcess, group: str, partitions: list[tuple[str, int]]) -> dict:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = consumer.committed([ConfluentPartition(t, p) for t, p in partitions], TIMEOUT_S)
        return {(tp.topic, tp.partition): tp.offset for tp in found}
    finally:
        consumer.close()


def test_offset_delete_drops_offsets_unless_a_member_subscribes(broker, kafka_python) -> None:
    create_topic(broker, "offsets-a", 2)
    create_topic(broker, "offsets-b", 1)
    group = "offset-delete-group"
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        offsets = [("offsets-a", 0, 5), ("offsets-a", 1, 6), ("offsets-b", 0, 7)]
        committer.commit(
            offsets=[ConfluentPartition(t, p, o) for t, p, o in offsets], asynchronous=False
        )
    finally:
        committer.close()
    wanted = [("offsets-a", 0), ("offsets-a", 1), ("offsets-b", 0)]
    assert committed(broker, group, wanted) == {
        ("offsets-a", 0): 5,
        ("offsets-a", 1): 6,
        ("offsets-b", 0): 7,
    }

    # An empty group: the offsets asked for go, the others stay.
    result = kafka_python.delete_group_offsets(group, [TopicPartition("offsets-a", 0)])
    assert {tp: e.__name__ for tp, e in result.items()} == {
        TopicPartition("offsets-a", 0): "NoError"
    }
    assert committed(broker, group, wanted)[("offsets-a", 0)] < 0  # none committed

    # A live member subscribed to offsets-a: its offsets stay; offsets-b's may go.
    member = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "session.timeout.ms": 10000}
    )
    assigned: list = []
    member.subscribe(["offsets-a"], on_assign=lambda c, ps: assigned.extend(ps))
    try:
        wait_until(lambda: member.poll(0.2) is None and bool(assigned), 30, 0, what="assignment")
        result = kafka_python.delete_group_offsets(
            group, [TopicPartition("offsets-a", 1), TopicPartition("offsets-b", 0)]
        )
        assert {tp: e.__name__ for tp, e in result.items()} == {
            TopicPartition("offsets-a", 1): "GroupSubscribedToTopicError",
            TopicPartition("offsets-b", 0): "NoError",
        }
    finally:
        member.close()
    after = committed(broker, group, wanted)
    assert after[("offsets-a", 1)] == 6 and after[("offsets-b", 0)] < 0

    with pytest.raises(GroupIdNotFoundError):
        kafka_python.delete_group_offsets("no-such-group", [TopicPartition("offsets-a", 0)])


def test_describe_cluster_through_confluent_kafka(broker) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = client.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    host, port = broker.bootstrap.rsplit(":", 1)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, host, int(port))]
    assert cluster.controller.id == 1
    metadata = client.list_topics(timeout=TIMEOUT_S)
    assert cluster.cluster_id == metadata.cluster_id and cluster.cluster_id
    # No authorizer: every cluster operation is allowed.
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
    }
