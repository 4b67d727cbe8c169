"""Config keys that used to be accepted without effect, seen by real clients of a real broker:
group.max.size refuses a consumer, broker.rack reaches Metadata, KIP-405's old key names
start a tiered broker, and the inert keys a config sets are named in the broker's log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kio.schema.metadata.v9.request import MetadataRequest

from core.server.api_keys import ApiKey
from tests.support.broker_process import start_broker
from tests.support.kafka_wire import call
from tests.support.waiting import wait_until

TOPIC = "capped"


def test_a_consumer_beyond_group_max_size_is_refused_and_the_member_keeps_its_partitions(
    broker_factory,
):
    from kafka import KafkaConsumer
    from kafka.errors import GroupMaxSizeReachedError

    broker = broker_factory(
        {
            "group.max.size": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "2",
        }
    )
    common = {
        "bootstrap_servers": broker.bootstrap,
        "group_id": "capped-group",
        "enable_auto_commit": False,
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 500,
    }
    first = KafkaConsumer(TOPIC, **common)
    second = KafkaConsumer(TOPIC, **common)
    try:
        deadline = time.monotonic() + 30
        while not first.assignment():
            assert time.monotonic() < deadline, "the first consumer never got its partitions"
            first.poll(timeout_ms=200)
        assert {tp.partition for tp in first.assignment()} == {0, 1}

        with pytest.raises(GroupMaxSizeReachedError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                second.poll(timeout_ms=200)
                first.poll(timeout_ms=0)
        assert not second.assignment()
        # The refusal changed nothing for the member: no rebalance took its partitions.
        first.poll(timeout_ms=200)
        assert {tp.partition for tp in first.assignment()} == {0, 1}
        assert "group.max.size=1 reached" in broker.log_file.read_text()
    finally:
        second.close(autocommit=False)
        first.close(autocommit=False)


def test_broker_rack_is_in_metadata_and_inert_keys_are_logged(broker_factory):
    broker = broker_factory(
        {"broker.rack": "rack-a", "num.io.threads": "16", "num.network.threads": "4"}
    )
    metadata = call(
        broker.bootstrap,
        ApiKey.METADATA,
        9,
        MetadataRequest(
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )
    assert [(b.node_id, b.rack) for b in metadata.brokers] == [(1, "rack-a")]
    log = broker.log_file.read_text()
    assert "accepted with no effect in tierlog: num.io.threads, num.network.threads\n" in log


def test_kip_405_key_names_start_a_tiered_broker_with_warnings(tmp_path: Path):
    broker = start_broker(
        tmp_path / "broker",
        {
            "remote.log.storage.system.enable": "true",
            "rsm.config.storage.root": str(tmp_path / "bucket"),
            "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
            "remote.log.index.file.cache.total.size.mb": "16",
            "remote.log.manager.task.retry.interval.ms": "250",
        },
    )
    try:
        wait_until(
            lambda: "remote tier started" in broker.log_file.read_text(),
            what="the remote tier to start",
        )
        log = broker.log_file.read_text()
        assert (
            "remote.log.index.file.cache.total.size.mb is deprecated: use "
            "remote.log.index.file.cache.total.size.bytes" in log
        )
        assert "remote.log.index.file.cache.total.size.bytes=16777216" in log
        assert (
            "remote.log.manager.task.retry.interval.ms is deprecated: use "
            "remote.log.manager.task.retry.backoff.ms" in log
        )
    finally:
        assert broker.stop() == 0, broker.log_tail()


def test_a_batch_larger_than_segment_bytes_is_refused_and_the_partition_goes_on(broker):
    """Kafka's rule: a produce whose records exceed the topic's segment.bytes is answered
    RECORD_BATCH_TOO_LARGE (18); nothing of it is stored and the next produce works."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "small-segments"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = {"segment.bytes": "65536"}
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    errors: list[KafkaError | None] = []

    def report(err, _msg) -> None:
        errors.append(err)

    producer.produce(topic, value=b"x" * 100_000, callback=report)  # one 100 kB batch
    assert producer.flush(30) == 0
    producer.produce(topic, value=b"small", callback=report)
    assert producer.flush(30) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.RECORD_LIST_TOO_LARGE
    assert errors[1] is None

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
        assert got == [(0, b"small")]
    finally:
        consumer.close()
