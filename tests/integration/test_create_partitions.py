"""CreatePartitions with real clients: consumer groups (confluent-kafka and KafkaJS) rebalance
onto the new partitions and read what is produced to them; the new count survives a
restart; the partitions added to a tiered topic are tiered too."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.support.broker_process import BrokerProcess, restart
from tests.support.internal_writes import manifests
from tests.support.waiting import wait_until

from .kafkajs_driver import GroupMember

TIMEOUT_S = 30.0


def admin(broker: BrokerProcess) -> AdminClient:
    """A new client: kept alive by the caller until its futures resolve (destroyed before,
    it fails them with _DESTROY)."""
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker: BrokerProcess, name: str, partitions: int, **config: str) -> None:
    client = admin(broker)
    client.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(TIMEOUT_S)


def add_partitions(broker: BrokerProcess, name: str, count: int, **options) -> None:
    client = admin(broker)
    client.create_partitions([NewPartitions(name, count)], **options)[name].result(TIMEOUT_S)


def partition_count(broker: BrokerProcess, name: str) -> int:
    client = admin(broker)
    metadata = client.list_topics(name, timeout=TIMEOUT_S)
    return len(metadata.topics[name].partitions)


def produce_to(broker: BrokerProcess, topic: str, partitions: range, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for p in partitions:
        for i in range(per_partition):
            producer.produce(topic, value=b"%d-%d" % (p, i), partition=p)
    assert producer.flush(TIMEOUT_S) == 0


class ConfluentMember:
    """A confluent-kafka group member that refreshes topic metadata every 500 ms."""

    def __init__(self, broker: BrokerProcess, topic: str, group: str) -> None:
        self.assigned: set[int] = set()
        self.records: set[tuple[int, int]] = set()
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 500,
                "metadata.max.age.ms": 1500,
                "session.timeout.ms": 10000,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned = {p.partition for p in partitions}

    def poll(self) -> None:
        message = self.consumer.poll(0.2)
        if message is not None and message.error() is None:
            self.records.add((message.partition(), message.offset()))

    def close(self) -> None:
        self.consumer.close()


def test_groups_rebalance_onto_new_partitions_and_read_them(broker_factory) -> None:
    broker = broker_factory({"group.initial.rebalance.delay.ms": "300"})
    topic = "growing"
    create_topic(broker, topic, 2)
    produce_to(broker, topic, range(2), 5)
    confluent = ConfluentMember(broker, topic, "confluent-group")
    kafkajs = GroupMember(broker.bootstrap, topic, "kafkajs-group", metadata_max_age_ms=1000)
    try:

        def both_read(partitions: range, per_partition: int) -> bool:
            confluent.poll()
            wanted = {(p, o) for p in partitions for o in range(per_partition)}
            return wanted <= confluent.records and wanted <= kafkajs.records()

        wait_until(lambda: both_read(range(2), 5), 60, 0, what="both groups reading 2 partitions")
        assert confluent.assigned == {0, 1} and kafkajs.partitions() == {0, 1}

        add_partitions(broker, topic, 4)
        assert partition_count(broker, topic) == 4
        produce_to(broker, topic, range(2, 4), 3)

        def rebalanced() -> bool:
            confluent.poll()
            return confluent.assigned == {0, 1, 2, 3} and kafkajs.partitions() == {0, 1, 2, 3}

        wait_until(rebalanced, 60, 0, what="both groups assigned the 4 partitions")
        wait_until(
            lambda: both_read(range(2, 4), 3), 60, 0, what="the records of the new partitions"
        )
        assert not kafkajs.events("crash"), kafkajs.log()
    finally:
        confluent.close()
        kafkajs.kill()


def test_the_new_count_is_validated_and_survives_a_restart(broker_factory) -> None:
    broker = broker_factory()
    create_topic(broker, "kept", 1)
    add_partitions(broker, "kept", 3, validate_only=True)
    assert partition_count(broker, "kept") == 1
    try:
        add_partitions(broker, "kept", 1)
        raise AssertionError("a count that is not larger was accepted")
    except KafkaException as e:
        assert e.args[0].name() == "INVALID_PARTITIONS", e
    add_partitions(broker, "kept", 3)
    produce_to(broker, "kept", range(3), 2)
    assert broker.stop() == 0, broker.log_tail()
    again = restart(broker)
    try:
        assert partition_count(again, "kept") == 3
        consumer = Consumer({"bootstrap.servers": again.bootstrap, "group.id": "after-restart"})
        try:
            for p in range(3):
                low, high = consumer.get_watermark_offsets(TopicPartition("kept", p), TIMEOUT_S)
                assert (low, high) == (0, 2)
        finally:
            consumer.close()
    finally:
        assert again.stop() == 0, again.log_tail()


def test_partitions_added_to_a_tiered_topic_are_tiered(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory(
        {
            "remote.log.storage.system.enable": "true",
            "rsm.config.storage.root": str(tmp_path / "bucket"),
            "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
            "remote.log.manager.task.interval.ms": "200",
        }
    )
    create_topic(
        broker,
        "tiered-growing",
        1,
        **{"segment.bytes": "4096", "remote.storage.enable": "true", "retention.ms": "-1"},
    )
    add_partitions(broker, "tiered-growing", 2)
    # Batches of 20 records (2 KiB): several 4 KiB segments of the new partition roll, and
    # rolled segments are copied to the remote tier by the RemoteLogManager's copy task.
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 20}
    )
    for i in range(600):
        producer.produce("tiered-growing", value=b"x" * 100 + b"%d" % i, partition=1)
    assert producer.flush(TIMEOUT_S) == 0

    def copied_partitions() -> set[int]:
        return {
            m.remote_log_segment_id.topic_id_partition.partition
            for m in manifests(tmp_path)
            if m.remote_log_segment_id.topic_id_partition.topic == "tiered-growing"
        }

    wait_until(lambda: 1 in copied_partitions(), 60, 0.2, what="segments of partition 1 copied")
